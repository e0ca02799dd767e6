// exp on 16 f32 lanes with AVX-512: the core shared by the activation rows (act_avx512.cpp),
// which clamp its argument their own way, and the softmaxes (exp_as_vexp_avx512); and the
// log of the attention's row sums.
// Cephes' reduction and polynomial (exp_poly.h's scalar steps): v = n ln2 + r, n rounded
// by vrndscaleps, ln2 in two parts, and 2^n applied by vscalefps.
#pragma once

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
// GCC 12's avx512fintrin.h starts masked intrinsics from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports inside the headers (GCC bug 105593)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

namespace strata::cpu::detail {

/// exp(v) for v already clamped to a range where 2^round(v / ln2) is finite or inf as the
/// caller wants it (n = 128: inf).
[[gnu::target("avx512f")]] inline __m512 exp_reduced_avx512(__m512 v) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r =
      _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), v));
  // The polynomial by Estrin's scheme (three FMA levels where Horner's rule chains five):
  // the row loops that call this run as many exps as registers allow side by side, and
  // the chain's latency, not the FP pipes, set their pace (the GELU gradient row 0.274 ->
  // 0.259 ns per element alone; the GPT T64 step's bias + GELU backward 1.22 -> 1.19 ms).
  // Within an ulp of Horner's order (exp_poly.h, the generic loops).
  const __m512 r2 = _mm512_mul_ps(r, r), r4 = _mm512_mul_ps(r2, r2);
  const __m512 a = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
  const __m512 b = _mm512_fmadd_ps(_mm512_set1_ps(8.3334519073e-3f), r, _mm512_set1_ps(4.1665795894e-2f));
  const __m512 c = _mm512_fmadd_ps(_mm512_set1_ps(1.6666665459e-1f), r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 p = _mm512_fmadd_ps(a, r4, _mm512_fmadd_ps(b, r2, c));
  return _mm512_scalef_ps(_mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f))), n);
}

/// exp(x) as cpu::vexp (softmax.h) computes it, on 16 lanes: 0 below -86, inf above
/// ln(FLT_MAX), NaN for NaN (vmaxps / vminps return a NaN second operand). The softmaxes'
/// exp: the attention's (attention_tile.h) and cross-entropy's (act_avx512.cpp).
[[gnu::target("avx512f")]] inline __m512 exp_as_vexp_avx512(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-86.0f), hi = _mm512_set1_ps(88.72283f);
  __m512 e = exp_reduced_avx512(_mm512_min_ps(hi, _mm512_max_ps(lo, x)));
  e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), _mm512_setzero_ps());
  return _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), _mm512_set1_ps(__builtin_inff()));
}

/// log(x) for finite x > 0 (the attention's row sums, in [1, T]): x = m 2^e with m in
/// [sqrt(1/2), sqrt(2)) (vgetexpps / vgetmantps), log m = 2 atanh(s), s = (m - 1) / (m + 1),
/// |s| < 0.172, as its odd series to s^11 (truncation < 2e-11), e ln2 in two parts. Within a
/// few ulp of std::log.
[[gnu::target("avx512f")]] inline __m512 log_avx512(__m512 x) {
  // the zero-masked forms: GCC 12's plain ones start from _mm512_undefined_ps(), which
  // -Wuninitialized reports where they inline
  const __mmask16 all = 0xFFFF;
  __m512 e = _mm512_maskz_getexp_ps(all, x);
  __m512 m = _mm512_maskz_getmant_ps(all, x, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_src);  // [1, 2)
  const __mmask16 big = _mm512_cmp_ps_mask(m, _mm512_set1_ps(1.41421356237f), _CMP_GT_OQ);
  m = _mm512_mask_mul_ps(m, big, m, _mm512_set1_ps(0.5f));
  e = _mm512_mask_add_ps(e, big, e, _mm512_set1_ps(1.0f));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 sv = _mm512_div_ps(_mm512_sub_ps(m, one), _mm512_add_ps(m, one));
  const __m512 s2 = _mm512_mul_ps(sv, sv);
  __m512 p = _mm512_set1_ps(2.0f / 11);
  p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(2.0f / 9));
  p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(2.0f / 7));
  p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(2.0f / 5));
  p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(2.0f / 3));
  const __m512 logm = _mm512_fmadd_ps(_mm512_mul_ps(p, s2), sv, _mm512_add_ps(sv, sv));  // 2s + s^3 p
  // e ln2 = e * 0.693359375 (exact in f32 for |e| < 2^15) - e * 2.12194440e-4
  return _mm512_fmadd_ps(e, _mm512_set1_ps(0.693359375f), _mm512_fnmadd_ps(e, _mm512_set1_ps(2.12194440e-4f), logm));
}

}  // namespace strata::cpu::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif
