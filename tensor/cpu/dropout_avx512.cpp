// See dropout_avx512.h. Scalar twin: philox4x32 (core/rng.h) and the generic loops of
// cpu/dropout.cpp.
#include <strata/tensor/cpu/dropout_avx512.h>

#include <strata/core/error.h>
#include <strata/tensor/cpu/avx512_source.h>

#if STRATA_AVX512_SOURCE

namespace strata::cpu {
namespace {

constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
constexpr int kGroups = 2;   // independent groups of 16 blocks per step: the rounds' chains interleave
constexpr int64_t kStep = kGroups * 64;  // elements per step

// The low and high 32 bits of a[i] * m for the 16 lanes: vpmuludq multiplies the even lanes;
// the odd ones, shifted down, take a second.
STRATA_AVX512 inline void mul_lo_hi(__m512i a, __m512i m, __m512i& lo, __m512i& hi) {
  const __m512i e = _mm512_mul_epu32(a, m), o = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  lo = _mm512_mask_blend_epi32(0xAAAA, e, _mm512_slli_epi64(o, 32));
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(e, 32), o);
}

// The four words of blocks c0 + g * 16 + l (l < 16) for each group g, word k in w[g][k].
STRATA_AVX512 inline void philox_groups(uint64_t seed, uint64_t c0, __m512i w[kGroups][4]) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int g = 0; g < kGroups; ++g) {
    const uint64_t c = c0 + uint64_t(g) * 16;
    const __m512i lo = _mm512_add_epi32(_mm512_set1_epi32(int(uint32_t(c))), lane);
    // a lane whose low word wrapped past 2^32 carries into its high word
    const __mmask16 carry = _mm512_cmplt_epu32_mask(lo, lane);
    const __m512i hi = _mm512_set1_epi32(int(uint32_t(c >> 32)));
    w[g][0] = lo;
    w[g][1] = _mm512_mask_add_epi32(hi, carry, hi, _mm512_set1_epi32(1));
    w[g][2] = w[g][3] = _mm512_setzero_si512();
  }
  const __m512i m0 = _mm512_set1_epi64(kM0), m1 = _mm512_set1_epi64(kM1);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    const __m512i kv0 = _mm512_set1_epi32(int(k0)), kv1 = _mm512_set1_epi32(int(k1));
    for (int g = 0; g < kGroups; ++g) {
      __m512i lo0, hi0, lo1, hi1;
      mul_lo_hi(w[g][0], m0, lo0, hi0);
      mul_lo_hi(w[g][2], m1, lo1, hi1);
      const __m512i n0 = _mm512_ternarylogic_epi32(hi1, w[g][1], kv0, 0x96);  // three-way xor
      const __m512i n2 = _mm512_ternarylogic_epi32(hi0, w[g][3], kv1, 0x96);
      w[g][0] = n0;
      w[g][1] = lo1;
      w[g][2] = n2;
      w[g][3] = lo0;
    }
    k0 += kW0;
    k1 += kW1;
  }
}

// The keep bytes (0 or 1) of a group's 64 elements in element order: element 4l + k is word
// k of lane l, so byte k of lane l.
STRATA_AVX512 inline __m512i keep_bytes(const __m512i w[4], __m512i threshold) {
  __m512i bytes = _mm512_setzero_si512();
  for (int k = 0; k < 4; ++k) {
    const __mmask16 keep = _mm512_cmpge_epu32_mask(_mm512_srli_epi32(w[k], 8), threshold);
    bytes = _mm512_mask_or_epi32(bytes, keep, bytes, _mm512_set1_epi32(1 << (8 * k)));
  }
  return bytes;
}

STRATA_AVX512 inline __mmask64 first_n(int64_t n) { return n >= 64 ? ~__mmask64(0) : (__mmask64(1) << n) - 1; }

}  // namespace

STRATA_AVX512 void dropout_row_avx512(const float* x, float* y, uint8_t* mask, int64_t n, uint64_t seed,
                                        uint64_t c0, uint32_t threshold, float scale) {
  const __m512i thr = _mm512_set1_epi32(int(threshold));
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t i0 = 0; i0 < n; i0 += kStep, c0 += kStep / 4) {
    __m512i w[kGroups][4];
    philox_groups(seed, c0, w);
    for (int g = 0; g < kGroups; ++g) {
      const int64_t at = i0 + g * 64, left = n - at;
      if (left <= 0) break;
      const __m512i bytes = keep_bytes(w[g], thr);
      const __mmask64 valid = first_n(left), keep = _mm512_test_epi8_mask(bytes, bytes) & valid;
      _mm512_mask_storeu_epi8(mask + at, valid, bytes);
      for (int v = 0; v < 4; ++v) {
        const __mmask16 in = __mmask16(valid >> (16 * v)), kv = __mmask16(keep >> (16 * v));
        if (!in) break;
        const __m512 xv = _mm512_maskz_loadu_ps(in, x + at + 16 * v);
        _mm512_mask_storeu_ps(y + at + 16 * v, in, _mm512_maskz_mul_ps(kv, xv, s));
      }
    }
  }
}

STRATA_AVX512 void dropout_backward_row_avx512(const float* dy, const uint8_t* mask, float* dx, int64_t n,
                                                 float scale) {
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t i0 = 0; i0 < n; i0 += 64) {
    const __mmask64 valid = first_n(n - i0);
    const __m512i bytes = _mm512_maskz_loadu_epi8(valid, mask + i0);
    const __mmask64 keep = _mm512_test_epi8_mask(bytes, bytes);
    for (int v = 0; v < 4; ++v) {
      const __mmask16 in = __mmask16(valid >> (16 * v)), kv = __mmask16(keep >> (16 * v));
      if (!in) break;
      const __m512 g = _mm512_maskz_loadu_ps(in, dy + i0 + 16 * v);
      _mm512_mask_storeu_ps(dx + i0 + 16 * v, in, _mm512_maskz_mul_ps(kv, g, s));
    }
  }
}

}  // namespace strata::cpu

#else

namespace strata::cpu {
void dropout_row_avx512(const float*, float*, uint8_t*, int64_t, uint64_t, uint64_t, uint32_t, float) {
  STRATA_THROW(Error, "[dropout_row_avx512] not built for this target (kHaveActAvx512 is false)");
}
void dropout_backward_row_avx512(const float*, const uint8_t*, float*, int64_t, float) {
  STRATA_THROW(Error, "[dropout_backward_row_avx512] not built for this target (kHaveActAvx512 is false)");
}
}  // namespace strata::cpu

#endif
