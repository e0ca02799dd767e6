// 16-bit storage, f32 arithmetic in the CUDA kernels, as tensor/cpu/widen.h on the CPU:
// a kernel templated on its storage type S (float, double, integers, or Half / BFloat16 for
// f16 / bf16 tensors) reads elements through ld() (widened to f32 in registers) and writes
// through st<S>() (rounded to nearest even by core/half_bits.h, bit for bit the CPU's
// rounding), computing in acc_t<S>. f32/f64/integer elements pass through unchanged, so the
// f32/f64 paths of a converted kernel are what they were. Host-testable (STRATA_HD).
// Kernels dispatch with the CPU's STRATA_DISPATCH_FLOAT16 / STRATA_DISPATCH_ALL16
// (scalar_t = Half / BFloat16 for the 16-bit dtypes).
#pragma once
#include <type_traits>

#include <strata/core/dtype.h>
#include <strata/tensor/cpu/widen.h>  // STRATA_DISPATCH_FLOAT16, STRATA_DISPATCH_ALL16
#include <strata/tensor/cuda/hd.h>

namespace strata::cuda {

template <class S>
inline constexpr bool kIs16 = std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>;

/// The type a kernel computes in for storage type S: float for f16/bf16, else S.
template <class S>
using acc_t = std::conditional_t<kIs16<S>, float, S>;

/// An element widened to acc_t<S> (exact).
template <class S>
STRATA_HD acc_t<S> ld(S v) {
  if constexpr (std::is_same_v<S, BFloat16>) return bf16_bits_to_float(v.bits);
  else if constexpr (std::is_same_v<S, Half>) return half_bits_to_float(v.bits);
  else return v;
}

/// v rounded (to nearest even for f16/bf16, through f32 as the CPU's st<T>) or converted
/// to the storage type S.
template <class S, class V>
STRATA_HD S st(V v) {
  if constexpr (std::is_same_v<S, BFloat16>) return BFloat16{float_to_bf16_bits(float(v))};
  else if constexpr (std::is_same_v<S, Half>) return Half{float_to_half_bits(float(v))};
  else return static_cast<S>(v);
}

}  // namespace strata::cuda
