// See act_avx512.h. Scalar twins: gelu_tanh_of / gelu_tanh_grad_of (cpu/elementwise.h) and the
// generic loops of cpu/swiglu.cpp.
#include <strata/tensor/cpu/act_avx512.h>

#include <strata/core/error.h>

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
// GCC 12's avx512fintrin.h starts masked intrinsics from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports inside the headers (GCC bug 105593)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <strata/tensor/cpu/exp_avx512.h>

#define STRATA_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,fma")))

namespace strata::cpu {
namespace {

constexpr float kK = 0.79788456080286535588f;  // sqrt(2/pi)
constexpr float kCubic = 0.044715f;
constexpr int64_t kPrefetchAhead = 1024;  // floats

// exp(z), z clamped to [-87, 89] (NaN -> the clamp's bound; the caller's x carries NaN;
// 89: inf).
STRATA_AVX512 inline __m512 exp_clamped(__m512 z) {
  return detail::exp_reduced_avx512(_mm512_min_ps(_mm512_max_ps(z, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(89.0f)));
}

// -2u = -2 sqrt(2/pi) (h + 0.044715 h^3), from h and h^2.
STRATA_AVX512 inline __m512 minus_two_u(__m512 h, __m512 h2) {
  return _mm512_mul_ps(h, _mm512_fmadd_ps(h2, _mm512_set1_ps(-2 * kK * kCubic), _mm512_set1_ps(-2 * kK)));
}

// gelu_tanh(h) = h sigmoid(2u) = h / (1 + exp(-2u)). exp(-2u) = inf (h < -10) gives
// h / inf = -0, as the scalar form does.
STRATA_AVX512 inline __m512 gelu(__m512 h) {
  const __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), exp_clamped(minus_two_u(h, _mm512_mul_ps(h, h))));
  return _mm512_div_ps(h, d);
}

// gelu_tanh'(h) = s + h s (1 - s) 2 du/dh, s = 1 / (1 + exp(-2u)); h clamped to +-30
// (vmaxps / vminps return their second operand when either is NaN: NaN stays NaN).
STRATA_AVX512 inline __m512 gelu_grad(__m512 h) {
  h = _mm512_min_ps(_mm512_set1_ps(30.0f), _mm512_max_ps(_mm512_set1_ps(-30.0f), h));
  const __m512 h2 = _mm512_mul_ps(h, h);
  const __m512 s =
      _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), exp_clamped(minus_two_u(h, h2))));
  const __m512 du2 = _mm512_fmadd_ps(h2, _mm512_set1_ps(2 * kK * 3 * kCubic), _mm512_set1_ps(2 * kK));
  const __m512 t = _mm512_mul_ps(_mm512_mul_ps(h, s), _mm512_sub_ps(_mm512_set1_ps(1.0f), s));
  return _mm512_fmadd_ps(t, du2, s);
}

// sigmoid(z) = 1 / (1 + exp(-z)); exp(-z) = inf (z < -89) gives 0.
STRATA_AVX512 inline __m512 sigmoid(__m512 z) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp_clamped(_mm512_sub_ps(_mm512_setzero_ps(), z))));
}

STRATA_AVX512 inline __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }

STRATA_AVX512 inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
}

}  // namespace

STRATA_AVX512 void gelu_tanh_grad_row_avx512(const float* g, const float* y, const float* b, float* d, float* p,
                                             int64_t n) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = tail_mask(n - j);
    // 4 KiB ahead in each input and output (cpu/prefetch.h): rows are contiguous in the
    // callers, so this reaches into the next rows (a prefetch past an allocation's end
    // does not fault)
    _mm_prefetch(reinterpret_cast<const char*>(g + j + kPrefetchAhead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(y + j + kPrefetchAhead), _MM_HINT_T0);
    __m512 h = load(y + j, m);
    if (b) h = _mm512_add_ps(h, load(b + j, m));
    const __m512 v = _mm512_mul_ps(load(g + j, m), gelu_grad(h));
    __builtin_prefetch(d + j + kPrefetchAhead, 1, 3);
    _mm512_mask_storeu_ps(d + j, m, v);
    if (p) _mm512_mask_storeu_ps(p + j, m, _mm512_add_ps(load(p + j, m), v));
  }
}

STRATA_AVX512 void gelu_tanh_row_avx512(const float* y, const float* b, float* out, int64_t n) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = tail_mask(n - j);
    _mm_prefetch(reinterpret_cast<const char*>(y + j + kPrefetchAhead), _MM_HINT_T0);
    __m512 h = load(y + j, m);
    if (b) h = _mm512_add_ps(h, load(b + j, m));
    __builtin_prefetch(out + j + kPrefetchAhead, 1, 3);
    _mm512_mask_storeu_ps(out + j, m, gelu(h));
  }
}

STRATA_AVX512 void swiglu_row_avx512(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = tail_mask(n - j);
    _mm_prefetch(reinterpret_cast<const char*>(g + j + kPrefetchAhead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(u + j + kPrefetchAhead), _MM_HINT_T0);
    __builtin_prefetch(y + j + kPrefetchAhead, 1, 3);
    const __m512 z = load(g + j, m);
    _mm512_mask_storeu_ps(y + j, m, _mm512_mul_ps(_mm512_mul_ps(z, sigmoid(z)), load(u + j, m)));
  }
}

STRATA_AVX512 void swiglu_grad_row_avx512(const float* dy, const float* g, const float* u, float* dg, float* du,
                                          int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = tail_mask(n - j);
    _mm_prefetch(reinterpret_cast<const char*>(dy + j + kPrefetchAhead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(g + j + kPrefetchAhead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(u + j + kPrefetchAhead), _MM_HINT_T0);
    __builtin_prefetch(dg + j + kPrefetchAhead, 1, 3);
    __builtin_prefetch(du + j + kPrefetchAhead, 1, 3);
    const __m512 z = load(g + j, m), d = load(dy + j, m), s = sigmoid(z);
    // dg = d u s (1 + z (1 - s)), du = d z s
    const __m512 ds = _mm512_mul_ps(_mm512_mul_ps(d, load(u + j, m)), s);
    _mm512_mask_storeu_ps(dg + j, m, _mm512_mul_ps(ds, _mm512_fmadd_ps(z, _mm512_sub_ps(one, s), one)));
    _mm512_mask_storeu_ps(du + j, m, _mm512_mul_ps(_mm512_mul_ps(d, z), s));
  }
}

}  // namespace strata::cpu

#else

namespace strata::cpu {
void gelu_tanh_grad_row_avx512(const float*, const float*, const float*, float*, float*, int64_t) {
  STRATA_THROW(Error, "[gelu_tanh_grad_row_avx512] not built for this target (kHaveActAvx512 is false)");
}
void gelu_tanh_row_avx512(const float*, const float*, float*, int64_t) {
  STRATA_THROW(Error, "[gelu_tanh_row_avx512] not built for this target (kHaveActAvx512 is false)");
}
void swiglu_row_avx512(const float*, const float*, float*, int64_t) {
  STRATA_THROW(Error, "[swiglu_row_avx512] not built for this target (kHaveActAvx512 is false)");
}
void swiglu_grad_row_avx512(const float*, const float*, const float*, float*, float*, int64_t) {
  STRATA_THROW(Error, "[swiglu_grad_row_avx512] not built for this target (kHaveActAvx512 is false)");
}
}  // namespace strata::cpu

#endif
