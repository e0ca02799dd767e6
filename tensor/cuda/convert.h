// Element loads/stores between any two dtypes for CUDA kernels, with the CPU copy
// kernel's semantics bit for bit: arithmetic pairs convert directly (integers narrow
// modulo 2^n), f16/bf16 go through double -> float -> 16 bits with round-to-nearest-even
// (core/dtype.h's float_to_half / float_to_bf16). Host-testable.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "tensor/cuda/hd.h"

namespace strata::cuda {

STRATA_HD float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return hd::bits_float(bits);
}

STRATA_HD uint16_t float_to_half_bits(float f) {
  const uint32_t u = hd::float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) return uint16_t(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // overflow to inf
  if (abs < 0x38800000u) {                                  // subnormal or zero in half
    if (abs < 0x33000000u) return sign;
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - exp;
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return uint16_t(sign | uint16_t(r));
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfff + ((r >> 13) & 1);    // round to nearest even
  return uint16_t(sign | uint16_t(r >> 13));
}

STRATA_HD float bf16_bits_to_float(uint16_t b) { return hd::bits_float(uint32_t(b) << 16); }

STRATA_HD uint16_t float_to_bf16_bits(float f) {
  uint32_t u = hd::float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                          // round to nearest even
  return uint16_t(u >> 16);
}

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
