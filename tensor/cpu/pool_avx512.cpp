// See pool_avx512.h. Scalar twins: max2x2_row / max2x2_row_short (cpu/pool.cpp).
#include <strata/tensor/cpu/pool_avx512.h>

#include <strata/core/error.h>
#include <strata/tensor/cpu/avx512_source.h>

#if STRATA_AVX512_SOURCE

namespace strata::cpu {
namespace {

// x replaces the running max m where x > m, or x is NaN and m is not.
STRATA_AVX512 inline __mmask16 replaces(__m512 x, __m512 m) {
  return _mm512_cmp_ps_mask(x, m, _CMP_GT_OQ) |
         (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(m, m, _CMP_ORD_Q));
}

// The masks of a row's first n <= 32 elements over its two vectors (lo: elements 0-15,
// hi: 16-31), and of its first m <= 16 (one vector).
struct RowMasks {
  __mmask16 lo, hi;
};
inline RowMasks row_masks(int64_t n) {
  return {n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1),
          n > 16 ? __mmask16((1u << (n - 16)) - 1) : __mmask16(0)};
}
inline __mmask16 first_lanes(int64_t m) { return __mmask16((1u << m) - 1); }

// The even (e) and odd (o) columns of the first 2 * Wo elements of a row.
STRATA_AVX512 inline void split_row(const float* r, __mmask16 lo, __mmask16 hi, __m512& e, __m512& o) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 v0 = _mm512_maskz_loadu_ps(lo, r), v1 = _mm512_maskz_loadu_ps(hi, r + 16);
  e = _mm512_permutex2var_ps(v0, even, v1);
  o = _mm512_permutex2var_ps(v0, odd, v1);
}

}  // namespace

STRATA_AVX512 void max2x2_plane_avx512(const float* x, int64_t W, float* y, int64_t* idx, int64_t Ho, int64_t Wo) {
  const int64_t n = 2 * Wo;  // input columns read per row (an odd W's last one is outside every window)
  const auto [lo, hi] = row_masks(n);
  const __mmask16 out = first_lanes(Wo);
  const __m512i col0 = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);  // 2 ow for the lanes' ow
  const __m512i col8 = _mm512_setr_epi64(16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i one = _mm512_set1_epi64(1), below = _mm512_set1_epi64(W), diag = _mm512_set1_epi64(W + 1);
  for (int64_t oh = 0; oh < Ho; ++oh) {
    const float* r0 = x + 2 * oh * W;
    __m512 a, b, c, d;
    split_row(r0, lo, hi, a, b);
    split_row(r0 + W, lo, hi, c, d);
    const __mmask16 tb = replaces(b, a);
    const __m512 m1 = _mm512_mask_blend_ps(tb, a, b);
    const __mmask16 tc = replaces(c, m1);
    const __m512 m2 = _mm512_mask_blend_ps(tc, m1, c);
    const __mmask16 td = replaces(d, m2);
    _mm512_mask_storeu_ps(y + oh * Wo, out, _mm512_mask_blend_ps(td, m2, d));
    // index = 2 oh W + 2 ow + (d: W + 1, else c: W, else b: 1, else 0), eight lanes a vector
    const __m512i row = _mm512_set1_epi64(2 * oh * W);
    for (int h = 0; h < 2; ++h) {
      const int s = 8 * h;
      if (!(out >> s)) break;
      __m512i k = _mm512_setzero_si512();
      k = _mm512_mask_mov_epi64(k, __mmask8(tb >> s), one);
      k = _mm512_mask_mov_epi64(k, __mmask8(tc >> s), below);
      k = _mm512_mask_mov_epi64(k, __mmask8(td >> s), diag);
      const __m512i at = _mm512_add_epi64(_mm512_add_epi64(row, h ? col8 : col0), k);
      _mm512_mask_storeu_epi64(idx + oh * Wo + s, __mmask8(out >> s), at);
    }
  }
}

STRATA_AVX512 void bn_relu_max2x2_plane_avx512(const float* x, float scale, float shift, int64_t W, float* y,
                                               uint8_t* win, int64_t Ho, int64_t Wo) {
  const int64_t n = 2 * Wo;
  const auto [lo, hi] = row_masks(n);
  const __mmask16 out = first_lanes(Wo);
  const __m512 s = _mm512_set1_ps(scale), t = _mm512_set1_ps(shift), zero = _mm512_setzero_ps();
  // max(v, 0) returns its second operand for a NaN v, and +0 for v = -0: the ReLU's rule
  const auto bn_relu = [&](__m512 v) STRATA_AVX512 { return _mm512_max_ps(_mm512_fmadd_ps(v, s, t), zero); };
  for (int64_t oh = 0; oh < Ho; ++oh) {
    const float* r0 = x + 2 * oh * W;
    __m512 a, b, c, d;
    split_row(r0, lo, hi, a, b);
    split_row(r0 + W, lo, hi, c, d);
    a = bn_relu(a), b = bn_relu(b), c = bn_relu(c), d = bn_relu(d);
    // no NaN left: x replaces the running max where x > m
    const __mmask16 tb = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ);
    const __m512 m1 = _mm512_mask_blend_ps(tb, a, b);
    const __mmask16 tc = _mm512_cmp_ps_mask(c, m1, _CMP_GT_OQ);
    const __m512 m2 = _mm512_mask_blend_ps(tc, m1, c);
    const __mmask16 td = _mm512_cmp_ps_mask(d, m2, _CMP_GT_OQ);
    _mm512_mask_storeu_ps(y + oh * Wo, out, _mm512_mask_blend_ps(td, m2, d));
    __m512i k = _mm512_maskz_mov_epi32(tb, _mm512_set1_epi32(1));
    k = _mm512_mask_mov_epi32(k, tc, _mm512_set1_epi32(2));
    k = _mm512_mask_mov_epi32(k, td, _mm512_set1_epi32(3));
    _mm_mask_storeu_epi8(win + oh * Wo, out, _mm512_cvtepi32_epi8(k));
  }
}

STRATA_AVX512 void unpool2x2_relu_plane_avx512(const float* dy, const float* y, const uint8_t* win, float* g,
                                               int64_t H, int64_t W) {
  const int64_t Ho = H / 2, Wo = W / 2;
  const __mmask16 in = first_lanes(Wo);
  const auto [lo, hi] = row_masks(W);
  // lane 2j of a row pair's first vector takes the even column's j, lane 2j + 1 the odd's
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t oh = 0; oh < Ho; ++oh) {
    const __m512 d = _mm512_maskz_loadu_ps(in, dy + oh * Wo), m = _mm512_maskz_loadu_ps(in, y + oh * Wo);
    const __m512i k = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(in, win + oh * Wo));
    // 0 + dy where the max passed the ReLU (+0 + -0 is +0, as max_pool2d's backward adds)
    const __m512 gv = _mm512_maskz_add_ps(_mm512_cmp_ps_mask(m, zero, _CMP_GT_OQ), zero, d);
    for (int r = 0; r < 2; ++r) {
      const __m512 e = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(2 * r)), gv);
      const __m512 o = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(2 * r + 1)), gv);
      float* row = g + (2 * oh + r) * W;  // an odd W's last column: lane Wo's zeros
      _mm512_mask_storeu_ps(row, lo, _mm512_permutex2var_ps(e, first, o));
      if (hi) _mm512_mask_storeu_ps(row + 16, hi, _mm512_permutex2var_ps(e, second, o));
    }
  }
  if (H % 2) {
    _mm512_mask_storeu_ps(g + (H - 1) * W, lo, zero);
    if (hi) _mm512_mask_storeu_ps(g + (H - 1) * W + 16, hi, zero);
  }
}

}  // namespace strata::cpu

#else

namespace strata::cpu {
void max2x2_plane_avx512(const float*, int64_t, float*, int64_t*, int64_t, int64_t) {
  STRATA_THROW(Error, "[max2x2_plane_avx512] not built for this target (kHaveActAvx512 is false)");
}
void bn_relu_max2x2_plane_avx512(const float*, float, float, int64_t, float*, uint8_t*, int64_t, int64_t) {
  STRATA_THROW(Error, "[bn_relu_max2x2_plane_avx512] not built for this target (kHaveActAvx512 is false)");
}
void unpool2x2_relu_plane_avx512(const float*, const float*, const uint8_t*, float*, int64_t, int64_t) {
  STRATA_THROW(Error, "[unpool2x2_relu_plane_avx512] not built for this target (kHaveActAvx512 is false)");
}
}  // namespace strata::cpu

#endif
