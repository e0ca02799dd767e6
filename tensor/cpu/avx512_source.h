// The preamble of the AVX-512 intrinsics sources (act_avx512.cpp, norm_avx512.cpp,
// dropout_avx512.cpp, pool_avx512.cpp), included
// by those .cpp files only: where the compiler has x86 intrinsics (GCC or clang on x86-64)
// STRATA_AVX512_SOURCE is 1 and the functions marked STRATA_AVX512 are compiled for
// AVX-512 whatever the file's target; the callers pick them only when simd_level() is
// SimdLevel::v4. Elsewhere STRATA_AVX512_SOURCE is 0 and the sources define stubs that throw.
#pragma once
#include <cstdint>

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define STRATA_AVX512_SOURCE 1
// GCC 12's avx512fintrin.h starts masked intrinsics, shuffles, casts and the lane reductions
// from _mm512_undefined_ps(), which -W(maybe-)uninitialized reports inside the headers
// (GCC bug 105593). For the rest of the including file, which holds intrinsics only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

// The subsets of x86-64-v4 (the level the callers require) the rows use; BW for byte masks.
#define STRATA_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))

namespace strata::cpu::avx512 {

/// The lanes of a 16-lane chunk with `left` elements of the row left: all of them from 16.
STRATA_AVX512 inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
}

}  // namespace strata::cpu::avx512
#else
#define STRATA_AVX512_SOURCE 0
#endif
