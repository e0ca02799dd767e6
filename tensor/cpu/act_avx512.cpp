// See act_avx512.h. Scalar twins: gelu_tanh_of / gelu_tanh_grad_of (cpu/elementwise.h) and the
// generic loops of cpu/swiglu.cpp.
#include <strata/tensor/cpu/act_avx512.h>

#include <strata/core/error.h>
#include <strata/tensor/cpu/avx512_source.h>

#if STRATA_AVX512_SOURCE
#include <limits>

#include <strata/tensor/cpu/exp_avx512.h>

namespace strata::cpu {
namespace {

using avx512::tail_mask;

constexpr float kK = 0.79788456080286535588f;  // sqrt(2/pi)
constexpr float kCubic = 0.044715f;
constexpr int64_t kPrefetchAhead = 1024;  // floats

// Prefetches the lines kPrefetchAhead past the two vectors at p + j: 4 KiB ahead in each
// input and (kWrite) output, as cpu/prefetch.h's row loops. Rows are contiguous in the
// callers, so this reaches into the next rows (a prefetch past an allocation's end does
// not fault).
template <bool kWrite = false>
inline void prefetch_pair(const float* p, int64_t j) {
  for (int64_t o = 0; o < 32; o += 16) __builtin_prefetch(p + j + o + kPrefetchAhead, kWrite ? 1 : 0, 3);
}

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
// (vmaxps / vminps return their second operand when either is NaN: NaN stays NaN). Then
// |2u| < 2000 and the exp needs no clamp of its own: vscalefps saturates 2^n to inf or 0,
// giving s = 0 or 1 exactly. In two stages, so that a row can run the first of one block
// of vectors beside the second of the block before (the row's pace is its chains' latency):
// the exp, with h 2du/dh formed while it runs; then s and, after it, s (1 - s) = s - s s
// and the FMA.
struct GeluGradPart {
  __m512 e, hdu2;
};
STRATA_AVX512 inline GeluGradPart gelu_grad_first(__m512 h) {
  h = _mm512_min_ps(_mm512_set1_ps(30.0f), _mm512_max_ps(_mm512_set1_ps(-30.0f), h));
  const __m512 h2 = _mm512_mul_ps(h, h);
  return {detail::exp_reduced_avx512(minus_two_u(h, h2)),
          _mm512_mul_ps(h, _mm512_fmadd_ps(h2, _mm512_set1_ps(2 * kK * 3 * kCubic), _mm512_set1_ps(2 * kK)))};
}
STRATA_AVX512 inline __m512 gelu_grad_second(const GeluGradPart& a) {
  const __m512 s = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), a.e));
  return _mm512_fmadd_ps(a.hdu2, _mm512_fnmadd_ps(s, s, s), s);
}
STRATA_AVX512 inline __m512 gelu_grad(__m512 h) { return gelu_grad_second(gelu_grad_first(h)); }

// sigmoid(z) = 1 / (1 + exp(-z)); exp(-z) = inf (z < -89) gives 0.
STRATA_AVX512 inline __m512 sigmoid(__m512 z) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp_clamped(_mm512_sub_ps(_mm512_setzero_ps(), z))));
}

STRATA_AVX512 inline __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }

// h = y + b (b null: y) of the two vectors at j.
STRATA_AVX512 inline void pre_activation_pair(const float* y, const float* b, int64_t j, __m512& h0, __m512& h1) {
  h0 = _mm512_loadu_ps(y + j);
  h1 = _mm512_loadu_ps(y + j + 16);
  if (b) {
    h0 = _mm512_add_ps(h0, _mm512_loadu_ps(b + j));
    h1 = _mm512_add_ps(h1, _mm512_loadu_ps(b + j + 16));
  }
}


}  // namespace

// Each row walks two vectors at a time (a step of 32; the GELU gradient four, then two),
// their exp chains independent, then the tail one masked vector at a time: one vector per
// step left the FP pipes waiting on the chain's latency (the GELU rows 1.2-1.4x slower
// alone).
STRATA_AVX512 void gelu_tanh_grad_row_avx512(const float* g, const float* y, const float* b, float* d, float* p,
                                             int64_t n) {
  int64_t j = 0;
  // Blocks of four vectors (four chains: the gradient's is the longer one), software-
  // pipelined: each step runs the first stage of the next block beside the second stage of
  // this one (alone 0.243 -> 0.232 ns per element; in the GPT T64 step 1.06-1.11 -> 1.00-1.05
  // ms). The parts stay in registers.
  if (n >= 64) {
    GeluGradPart cur[4];
    {
      __m512 h[4];
      pre_activation_pair(y, b, 0, h[0], h[1]);
      pre_activation_pair(y, b, 32, h[2], h[3]);
      for (int k = 0; k < 4; ++k) cur[k] = gelu_grad_first(h[k]);
    }
    for (;; j += 64) {
      for (int64_t o = 0; o < 64; o += 32) {
        prefetch_pair(g, j + o);
        prefetch_pair(y, j + o);
        prefetch_pair<true>(d, j + o);
      }
      const bool more = j + 128 <= n;
      GeluGradPart next[4];
      if (more) {
        __m512 h[4];
        pre_activation_pair(y, b, j + 64, h[0], h[1]);
        pre_activation_pair(y, b, j + 96, h[2], h[3]);
        for (int k = 0; k < 4; ++k) next[k] = gelu_grad_first(h[k]);
      }
      __m512 v[4];
      for (int k = 0; k < 4; ++k) v[k] = _mm512_mul_ps(_mm512_loadu_ps(g + j + 16 * k), gelu_grad_second(cur[k]));
      for (int k = 0; k < 4; ++k) _mm512_storeu_ps(d + j + 16 * k, v[k]);
      if (p)
        for (int k = 0; k < 4; ++k)
          _mm512_storeu_ps(p + j + 16 * k, _mm512_add_ps(_mm512_loadu_ps(p + j + 16 * k), v[k]));
      if (!more) break;
      for (int k = 0; k < 4; ++k) cur[k] = next[k];
    }
    j += 64;
  }
  for (; j + 32 <= n; j += 32) {
    prefetch_pair(g, j);
    prefetch_pair(y, j);
    prefetch_pair<true>(d, j);
    __m512 h0, h1;
    pre_activation_pair(y, b, j, h0, h1);
    const __m512 v0 = _mm512_mul_ps(_mm512_loadu_ps(g + j), gelu_grad(h0));
    const __m512 v1 = _mm512_mul_ps(_mm512_loadu_ps(g + j + 16), gelu_grad(h1));
    _mm512_storeu_ps(d + j, v0);
    _mm512_storeu_ps(d + j + 16, v1);
    if (p) {
      _mm512_storeu_ps(p + j, _mm512_add_ps(_mm512_loadu_ps(p + j), v0));
      _mm512_storeu_ps(p + j + 16, _mm512_add_ps(_mm512_loadu_ps(p + j + 16), v1));
    }
  }
  for (; j < n; j += 16) {
    const __mmask16 m = tail_mask(n - j);
    __m512 h = load(y + j, m);
    if (b) h = _mm512_add_ps(h, load(b + j, m));
    const __m512 v = _mm512_mul_ps(load(g + j, m), gelu_grad(h));
    _mm512_mask_storeu_ps(d + j, m, v);
    if (p) _mm512_mask_storeu_ps(p + j, m, _mm512_add_ps(load(p + j, m), v));
  }
}

STRATA_AVX512 void gelu_tanh_row_avx512(const float* y, const float* b, float* out, int64_t n) {
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    prefetch_pair(y, j);
    prefetch_pair<true>(out, j);
    __m512 h0, h1;
    pre_activation_pair(y, b, j, h0, h1);
    _mm512_storeu_ps(out + j, gelu(h0));
    _mm512_storeu_ps(out + j + 16, gelu(h1));
  }
  for (; j < n; j += 16) {
    const __mmask16 m = tail_mask(n - j);
    __m512 h = load(y + j, m);
    if (b) h = _mm512_add_ps(h, load(b + j, m));
    _mm512_mask_storeu_ps(out + j, m, gelu(h));
  }
}

STRATA_AVX512 void swiglu_row_avx512(const float* g, const float* u, float* y, int64_t n) {
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {  // two vectors a step, as the GELU rows
    prefetch_pair(g, j);
    prefetch_pair(u, j);
    prefetch_pair<true>(y, j);
    const __m512 z0 = _mm512_loadu_ps(g + j), z1 = _mm512_loadu_ps(g + j + 16);
    const __m512 s0 = sigmoid(z0), s1 = sigmoid(z1);
    _mm512_storeu_ps(y + j, _mm512_mul_ps(_mm512_mul_ps(z0, s0), _mm512_loadu_ps(u + j)));
    _mm512_storeu_ps(y + j + 16, _mm512_mul_ps(_mm512_mul_ps(z1, s1), _mm512_loadu_ps(u + j + 16)));
  }
  for (; j < n; j += 16) {
    const __mmask16 m = tail_mask(n - j);
    const __m512 z = load(g + j, m);
    _mm512_mask_storeu_ps(y + j, m, _mm512_mul_ps(_mm512_mul_ps(z, sigmoid(z)), load(u + j, m)));
  }
}

// dg = d u s (1 + z (1 - s)), du = d z s
STRATA_AVX512 inline void swiglu_grad(__m512 z, __m512 d, __m512 uu, __m512& dg, __m512& du) {
  const __m512 one = _mm512_set1_ps(1.0f), s = sigmoid(z);
  const __m512 ds = _mm512_mul_ps(_mm512_mul_ps(d, uu), s);
  dg = _mm512_mul_ps(ds, _mm512_fmadd_ps(z, _mm512_sub_ps(one, s), one));
  du = _mm512_mul_ps(_mm512_mul_ps(d, z), s);
}

STRATA_AVX512 void swiglu_grad_row_avx512(const float* dy, const float* g, const float* u, float* dg, float* du,
                                          int64_t n) {
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    prefetch_pair(dy, j);
    prefetch_pair(g, j);
    prefetch_pair(u, j);
    prefetch_pair<true>(dg, j);
    prefetch_pair<true>(du, j);
    __m512 a0, b0, a1, b1;
    swiglu_grad(_mm512_loadu_ps(g + j), _mm512_loadu_ps(dy + j), _mm512_loadu_ps(u + j), a0, b0);
    swiglu_grad(_mm512_loadu_ps(g + j + 16), _mm512_loadu_ps(dy + j + 16), _mm512_loadu_ps(u + j + 16), a1, b1);
    _mm512_storeu_ps(dg + j, a0);
    _mm512_storeu_ps(du + j, b0);
    _mm512_storeu_ps(dg + j + 16, a1);
    _mm512_storeu_ps(du + j + 16, b1);
  }
  for (; j < n; j += 16) {
    const __mmask16 m = tail_mask(n - j);
    __m512 a, c;
    swiglu_grad(load(g + j, m), load(dy + j, m), load(u + j, m), a, c);
    _mm512_mask_storeu_ps(dg + j, m, a);
    _mm512_mask_storeu_ps(du + j, m, c);
  }
}

STRATA_AVX512 void softmax_row_avx512(const float* x, float* p, int64_t n, float* mx_out, float* sum_out) {
  const int64_t full = n & ~int64_t(15);
  const __mmask16 tm = tail_mask(n - full);
  // the max in two chains (whole chunks plain; the tail masked, its lanes -inf)
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m0 = ninf, m1 = ninf;
  int64_t j = 0;
  for (; j + 32 <= full; j += 32) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + j));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + j + 16));
  }
  if (j < full) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + j));
  if (full < n) m1 = _mm512_max_ps(m1, _mm512_mask_loadu_ps(ninf, tm, x + full));
  const float mx = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
  const __m512 mv = _mm512_set1_ps(mx);
  // e = exp(x - max) as vexp: 0 below -86, NaN where x - max is NaN
  const auto expv = [mv](__m512 v) STRATA_AVX512 { return detail::exp_as_vexp_avx512(_mm512_sub_ps(v, mv)); };
  __m512 s0 = _mm512_setzero_ps(), s1 = s0;
  for (j = 0; j + 32 <= full; j += 32) {
    const __m512 e0 = expv(_mm512_loadu_ps(x + j)), e1 = expv(_mm512_loadu_ps(x + j + 16));
    _mm512_storeu_ps(p + j, e0);
    _mm512_storeu_ps(p + j + 16, e1);
    s0 = _mm512_add_ps(s0, e0);
    s1 = _mm512_add_ps(s1, e1);
  }
  if (j < full) {
    const __m512 e = expv(_mm512_loadu_ps(x + j));
    _mm512_storeu_ps(p + j, e);
    s0 = _mm512_add_ps(s0, e);
  }
  if (full < n) {
    const __m512 e = _mm512_maskz_mov_ps(tm, expv(_mm512_maskz_loadu_ps(tm, x + full)));
    _mm512_mask_storeu_ps(p + full, tm, e);
    s1 = _mm512_add_ps(s1, e);
  }
  const float sum = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
  const __m512 inv = _mm512_set1_ps(1.0f / sum);
  for (j = 0; j < full; j += 16) _mm512_storeu_ps(p + j, _mm512_mul_ps(_mm512_loadu_ps(p + j), inv));
  if (full < n) _mm512_mask_storeu_ps(p + full, tm, _mm512_mul_ps(_mm512_maskz_loadu_ps(tm, p + full), inv));
  *mx_out = mx;
  *sum_out = sum;
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
void softmax_row_avx512(const float*, float*, int64_t, float*, float*) {
  STRATA_THROW(Error, "[softmax_row_avx512] not built for this target (kHaveActAvx512 is false)");
}
}  // namespace strata::cpu

#endif
