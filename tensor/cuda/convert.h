// Element loads/stores between any two dtypes for CUDA kernels, with the CPU copy
// kernel's semantics bit for bit: arithmetic pairs convert directly (integers narrow
// modulo 2^n), f16/bf16 go through double -> float -> 16 bits with round-to-nearest-even
// (core/dtype.h's float_to_half / float_to_bf16). Host-testable.
#pragma once
#include <cstdint>

#include <strata/core/dtype.h>
#include <strata/tensor/cuda/hd.h>

namespace strata::cuda {

using strata::bf16_bits_to_float;
using strata::float_to_bf16_bits;
using strata::float_to_half_bits;
using strata::half_bits_to_float;

/// One element read from memory, kept exactly: integers as int64, floats as double.
struct Scalar {
  double f;
  int64_t i;
  bool is_int;
};

STRATA_HD Scalar load_scalar(const void* base, int64_t off, DType t) {
  switch (t) {
    case DType::f32: return {double(static_cast<const float*>(base)[off]), 0, false};
    case DType::f64: return {static_cast<const double*>(base)[off], 0, false};
    case DType::f16: return {double(half_bits_to_float(static_cast<const uint16_t*>(base)[off])), 0, false};
    case DType::bf16: return {double(bf16_bits_to_float(static_cast<const uint16_t*>(base)[off])), 0, false};
    case DType::i32: return {0.0, int64_t(static_cast<const int32_t*>(base)[off]), true};
    case DType::i64: return {0.0, static_cast<const int64_t*>(base)[off], true};
    case DType::u8: return {0.0, int64_t(static_cast<const uint8_t*>(base)[off]), true};
  }
  return {0.0, 0, false};
}

/// The value as a double (for reading scalars such as a loss gradient of any dtype).
STRATA_HD double scalar_as_double(Scalar s) { return s.is_int ? double(s.i) : s.f; }

template <class D>
STRATA_HD D scalar_to(Scalar s) {
  return s.is_int ? static_cast<D>(s.i) : static_cast<D>(s.f);
}

/// Writes `s` converted to dtype t (the CPU copy kernel's conversion).
STRATA_HD void store_scalar(void* base, int64_t off, DType t, Scalar s) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[off] = scalar_to<float>(s); return;
    case DType::f64: static_cast<double*>(base)[off] = scalar_to<double>(s); return;
    case DType::f16:
      static_cast<uint16_t*>(base)[off] = float_to_half_bits(float(scalar_as_double(s)));
      return;
    case DType::bf16:
      static_cast<uint16_t*>(base)[off] = float_to_bf16_bits(float(scalar_as_double(s)));
      return;
    case DType::i32: static_cast<int32_t*>(base)[off] = scalar_to<int32_t>(s); return;
    case DType::i64: static_cast<int64_t*>(base)[off] = scalar_to<int64_t>(s); return;
    case DType::u8: static_cast<uint8_t*>(base)[off] = scalar_to<uint8_t>(s); return;
  }
}

}  // namespace strata::cuda
