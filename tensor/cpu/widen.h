// 16-bit storage, f32 arithmetic: the CPU kernels read f16/bf16 elements through ld()
// (widened to f32 in registers) and write them through st<T>() (rounded to nearest even),
// as PyTorch's CPU kernels do with their "opmath" type. f32/f64/integer elements pass
// through unchanged, so one kernel template serves every dtype.
#pragma once
#include <type_traits>

#include <strata/core/dtype.h>
#include <strata/core/error.h>

namespace strata::cpu {

template <class T>
inline constexpr bool kIs16 = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// The type a kernel computes in for storage type T: float for f16/bf16, else T.
template <class T>
using acc_t = std::conditional_t<kIs16<T>, float, T>;

[[gnu::always_inline]] inline float ld(BFloat16 v) { return bf16_bits_to_float(v.bits); }
[[gnu::always_inline]] inline float ld(Half v) { return half_bits_to_float(v.bits); }
template <class T>
  requires(!kIs16<T>)
[[gnu::always_inline]] inline T ld(T v) {
  return v;
}

/// v rounded (to nearest even for f16/bf16) or converted to the storage type T.
template <class T, class V>
[[gnu::always_inline]] inline T st(V v) {
  if constexpr (std::is_same_v<T, BFloat16>) return BFloat16{float_to_bf16_bits(float(v))};
  else if constexpr (std::is_same_v<T, Half>) return Half{float_to_half_bits(float(v))};
  else return static_cast<T>(v);
}

}  // namespace strata::cpu

/// As STRATA_DISPATCH_FLOAT plus f16 and bf16 (scalar_t = Half / BFloat16: kernels go
/// through ld / st / acc_t).
#define STRATA_DISPATCH_FLOAT16(dtype, op, ...)                                                        \
  [&] {                                                                                                \
    switch (dtype) {                                                                                   \
      case ::strata::DType::f32: { using scalar_t = float; return __VA_ARGS__(); }                     \
      case ::strata::DType::f64: { using scalar_t = double; return __VA_ARGS__(); }                    \
      case ::strata::DType::bf16: { using scalar_t = ::strata::BFloat16; return __VA_ARGS__(); }       \
      case ::strata::DType::f16: { using scalar_t = ::strata::Half; return __VA_ARGS__(); }            \
      default:                                                                                         \
        STRATA_THROW(Error, "[", op, "] unsupported dtype ", ::strata::dtype_name(dtype),              \
                     " (expected f32, f64, bf16 or f16)");                                             \
    }                                                                                                  \
  }()

/// As STRATA_DISPATCH_ALL plus f16 and bf16.
#define STRATA_DISPATCH_ALL16(dtype, op, ...)                                                          \
  [&] {                                                                                                \
    switch (dtype) {                                                                                   \
      case ::strata::DType::f32: { using scalar_t = float; return __VA_ARGS__(); }                     \
      case ::strata::DType::f64: { using scalar_t = double; return __VA_ARGS__(); }                    \
      case ::strata::DType::bf16: { using scalar_t = ::strata::BFloat16; return __VA_ARGS__(); }       \
      case ::strata::DType::f16: { using scalar_t = ::strata::Half; return __VA_ARGS__(); }            \
      case ::strata::DType::i32: { using scalar_t = int32_t; return __VA_ARGS__(); }                   \
      case ::strata::DType::i64: { using scalar_t = int64_t; return __VA_ARGS__(); }                   \
      case ::strata::DType::u8: { using scalar_t = uint8_t; return __VA_ARGS__(); }                    \
      default:                                                                                         \
        STRATA_THROW(Error, "[", op, "] unsupported dtype ", ::strata::dtype_name(dtype));             \
    }                                                                                                  \
  }()
