// Argument checks shared by the neural-network op front ends (tensor/nn_ops.cpp,
// tensor/batch_norm_ops.cpp): each names the op and the argument in its error.
#pragma once
#include <cstdint>

#include <strata/core/error.h>
#include <strata/tensor/tensor.h>

namespace strata::ops::detail {

inline bool is_16bit(DType dt) { return dt == DType::bf16 || dt == DType::f16; }

// f32 or f64, plus f16/bf16 (the CPU and CUDA kernels widen them to f32 inside).
inline void check_float16(const Tensor& t, const char* op, const char* what) {
  STRATA_CHECK(t.defined(), "[", op, "] ", what, " is undefined");
  STRATA_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64 || is_16bit(t.dtype()), "[", op, "] ", what,
               " must be f32, f64, bf16 or f16, got ", t.str());
}

// b has a's shape and dtype.
inline void check_same(const Tensor& a, const Tensor& b, const char* op, const char* what) {
  STRATA_CHECK(b.shape() == a.shape(), "[", op, "] ", what, " shape ", shape_str(b.shape()), " does not match ",
               shape_str(a.shape()));
  STRATA_CHECK(b.dtype() == a.dtype(), "[", op, "] ", what, " dtype ", dtype_name(b.dtype()), " does not match ",
               dtype_name(a.dtype()));
}

// A per-channel / per-feature vector of length C (undefined allowed) in x's dtype.
inline void check_vec(const Tensor& v, int64_t C, DType dt, const char* op, const char* what) {
  if (!v.defined()) return;
  STRATA_CHECK(v.shape() == Shape{C}, "[", op, "] ", what, " must have shape (", C, "), got ", shape_str(v.shape()));
  STRATA_CHECK(v.dtype() == dt, "[", op, "] ", what, " dtype ", dtype_name(v.dtype()), " does not match input ",
               dtype_name(dt));
}

}  // namespace strata::ops::detail
