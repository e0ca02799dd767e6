// CPU GEMM: f32 through the library the rule of gemm_backends.h picks (OpenBLAS by
// default and as fallback), f64 and the 16-bit types through OpenBLAS.
#pragma once
#include <cstdint>
#include <string>

#include <strata/core/dtype.h>

namespace strata::cpu {

/// One row-major matrix operand: base pointer, leading dimension, transposed flag.
struct MatRef {
  const void* data;
  int64_t ld;
  bool trans;
};

/// C(m,n) = alpha * op(A)(m,k) @ op(B)(k,n) + beta * C, row-major, ldc given. f32 goes to
/// gemm_backends::forced() or choose() (a pure function of shape, transposes, lds and
/// thread count, so results are bit-stable per thread count), OpenBLAS where it declines.
void gemm(DType dt, int64_t m, int64_t n, int64_t k, double alpha, MatRef a, MatRef b, double beta, void* c,
          int64_t ldc);
/// C(m,n) = op(A)(m,k) @ op(B)(k,n) + bias, the n elements at `bias` added to every row
/// (a linear layer's forward, torch.addmm). Where the rule gives the f32 call to oneDNN's
/// matmul primitive, the bias is added in its kernel; elsewhere C is first filled with the
/// bias rows and the GEMM accumulated onto them (beta 1).
void gemm_bias(DType dt, int64_t m, int64_t n, int64_t k, MatRef a, MatRef b, const void* bias, void* c,
               int64_t ldc);
/// Called with every CPU GEMM's arguments before it runs (null: none, the default). For
/// `strata bench gemm --shapes model`, which records the GEMMs of a training step; the
/// observer must be thread-safe (the conv and attention kernels call gemm from a team).
using GemmObserver = void (*)(DType dt, int64_t m, int64_t n, int64_t k, MatRef a, MatRef b, double beta);
void set_gemm_observer(GemmObserver observer);
/// Name of the BLAS library and its configuration (for `strata info`).
const char* blas_info();
/// The f32 GEMM rule, the STRATA_GEMM override and the libraries available (for `strata info`).
std::string gemm_backend_info();

}  // namespace strata::cpu
