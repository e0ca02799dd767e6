// exp on 16 f32 lanes with AVX-512: the core shared by the activation rows (act_avx512.cpp)
// and the attention softmax (attention_tile.h), which clamp its argument each their own way.
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
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

}  // namespace strata::cpu::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif
