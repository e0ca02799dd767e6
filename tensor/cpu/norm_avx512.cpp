// See norm_avx512.h. Scalar twins: norm_rows.h's layer_norm_row and layer_norm_backward_rows.
#include <strata/tensor/cpu/norm_avx512.h>

#include <strata/core/error.h>
#include <strata/tensor/cpu/avx512_source.h>

#if STRATA_AVX512_SOURCE
#include <algorithm>
#include <cmath>

#include <strata/tensor/cpu/prefetch.h>

namespace strata::cpu {
namespace {

using avx512::tail_mask;

// Loads and stores of a row's 16-element chunk at mask m: whole chunks plain, only the tail
// masked (in a training step masked loads and stores of whole chunks ran the backward
// 2x slower than these: the rows come from DRAM there).
STRATA_AVX512 inline __m512 load(const float* p, __mmask16 m) {
  return m == 0xFFFF ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}
STRATA_AVX512 inline void store(float* p, __mmask16 m, __m512 v) {
  if (m == 0xFFFF)
    _mm512_storeu_ps(p, v);
  else
    _mm512_mask_storeu_ps(p, m, v);
}

// Calls f(j, k, m) for the 16-element chunks of a row of C (full of them whole): k = 0 for
// even chunks and 1 for odd ones and the tail, as a constant of each call site (two
// accumulator chains whose index the compiler resolves: a run-time index kept them in
// memory); m the chunk's mask, all ones but for the tail.
template <class F>
STRATA_AVX512 inline void chunks(int64_t full, int64_t C, __mmask16 tail, F&& f) {
  int64_t j = 0;
  for (; j + 32 <= full; j += 32) {
    f(j, 0, __mmask16(0xFFFF));
    f(j + 16, 1, __mmask16(0xFFFF));
  }
  if (j < full) f(j, 0, __mmask16(0xFFFF));
  if (full < C) f(full, 1, tail);
}

// One row's statistics: the mean, then the mean of squared deviations (two chains each; the
// tail's lanes zero) and from it rstd.
STRATA_AVX512 inline void forward_stats(const float* x, float& mean, float& rstd, int64_t C, float eps) {
  const int64_t full = C & ~int64_t(15);
  const __mmask16 tm = tail_mask(C - full);
  __m512 a[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  chunks(full, C, tm, [&](int64_t j, int k, __mmask16 m) STRATA_AVX512 { a[k] = _mm512_add_ps(a[k], load(x + j, m)); });
  mean = _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1])) / float(C);
  const __m512 mu = _mm512_set1_ps(mean);
  a[0] = a[1] = _mm512_setzero_ps();
  chunks(full, C, tm, [&](int64_t j, int k, __mmask16 m) STRATA_AVX512 {
    const __m512 d = _mm512_maskz_sub_ps(m, load(x + j, m), mu);
    a[k] = _mm512_fmadd_ps(d, d, a[k]);
  });
  rstd = 1.0f / std::sqrt(_mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1])) / float(C) + eps);
}

// y = xhat w + b of one row whose statistics are known.
template <bool kW, bool kB>
STRATA_AVX512 inline void forward_normalize(const float* x, const float* w, const float* b, float* y, float mean,
                                            float rstd, int64_t C) {
  const int64_t full = C & ~int64_t(15);
  const __mmask16 tm = tail_mask(C - full);
  const __m512 mu = _mm512_set1_ps(mean), rs = _mm512_set1_ps(rstd);
  for (int64_t j = 0; j < C; j += 16) {
    const __mmask16 m = j < full ? __mmask16(0xFFFF) : tm;
    __m512 v = _mm512_mul_ps(_mm512_sub_ps(load(x + j, m), mu), rs);
    if constexpr (kW && kB)
      v = _mm512_fmadd_ps(v, load(w + j, m), load(b + j, m));
    else if constexpr (kW)
      v = _mm512_mul_ps(v, load(w + j, m));
    else if constexpr (kB)
      v = _mm512_add_ps(v, load(b + j, m));
    store(y + j, m, v);
  }
}

// Blocks of kStatRows rows: each row's statistics, then each row normalised (from L1). A
// row's normalisation waits on its statistics' reduction chains (two horizontal sums, a
// division and a square root); the rows' statistics one after another keep those chains
// overlapped. (Two rows interleaved chunk by chunk, to overlap their reduction chains, ran
// faster on rows in L1 but slower on rows from DRAM, as a training step reads them:
// 2048 x 128, backward 87 -> 134 us.) Each row's arithmetic is the one-row form's.
constexpr int64_t kStatRows = 4;
template <bool kW, bool kB>
STRATA_AVX512 void forward_rows(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                                int64_t n, int64_t C, float eps) {
  for (int64_t r0 = 0; r0 < n; r0 += kStatRows) {
    const int64_t r1 = std::min(n, r0 + kStatRows);
    for (int64_t r = r0; r < r1; ++r) {
      prefetch_row_ahead(x, r, n, C);
      forward_stats(x + r * C, mean[r], rstd[r], C, eps);
    }
    for (int64_t r = r0; r < r1; ++r) {
      prefetch_row_ahead<true>(y, r, n, C);
      forward_normalize<kW, kB>(x + r * C, w, b, y + r * C, mean[r], rstd[r], C);
    }
  }
}

// One row's backward, in two passes over the row (the second from L1). Pass 1: sum(g) and
// sum(g xhat) (two chains each), the block's dw and db partials; it returns their means.
template <bool kW>
STRATA_AVX512 inline void backward_sums(const float* dy, const float* x, float mean, float rstd, const float* w,
                                        float* dwp, float* dbp, int64_t C, float& mg, float& mgx) {
  const int64_t full = C & ~int64_t(15);
  const __mmask16 tm = tail_mask(C - full);
  const __m512 mu = _mm512_set1_ps(mean), rs = _mm512_set1_ps(rstd);
  __m512 sg[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()}, sx[2] = {sg[0], sg[1]};
  chunks(full, C, tm, [&](int64_t j, int k, __mmask16 m) STRATA_AVX512 {
    const __m512 d = load(dy + j, m);
    const __m512 xh = _mm512_maskz_mul_ps(m, _mm512_sub_ps(load(x + j, m), mu), rs);
    const __m512 g = kW ? _mm512_mul_ps(d, load(w + j, m)) : d;
    sg[k] = _mm512_add_ps(sg[k], g);
    sx[k] = _mm512_fmadd_ps(g, xh, sx[k]);
    if (dwp) store(dwp + j, m, _mm512_fmadd_ps(d, xh, load(dwp + j, m)));
    if (dbp) store(dbp + j, m, _mm512_add_ps(load(dbp + j, m), d));
  });
  const float inv_c = 1.0f / float(C);
  mg = _mm512_reduce_add_ps(_mm512_add_ps(sg[0], sg[1])) * inv_c;
  mgx = _mm512_reduce_add_ps(_mm512_add_ps(sx[0], sx[1])) * inv_c;
}

// Pass 2: dx = rstd ((g - mean(g)) - xhat mean(g xhat)), rounded, then pending added
// (embedded rounding: never contracted into an FMA, so the bits equal the add after the
// plain backward).
template <bool kW, bool kPending>
STRATA_AVX512 inline void backward_dx(const float* dy, const float* x, float mean, float rstd, const float* w,
                                      float* dx, int64_t C, const float* pending, float mean_g, float mean_gx) {
  const int64_t full = C & ~int64_t(15);
  const __mmask16 tm = tail_mask(C - full);
  const __m512 mu = _mm512_set1_ps(mean), rs = _mm512_set1_ps(rstd);
  const __m512 mg = _mm512_set1_ps(mean_g), mgx = _mm512_set1_ps(mean_gx);
  for (int64_t j = 0; j < C; j += 16) {
    const __mmask16 m = j < full ? __mmask16(0xFFFF) : tm;
    const __m512 d = load(dy + j, m);
    const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(load(x + j, m), mu), rs);
    const __m512 g = kW ? _mm512_mul_ps(d, load(w + j, m)) : d;
    __m512 v = _mm512_mul_ps(rs, _mm512_fnmadd_ps(xh, mgx, _mm512_sub_ps(g, mg)));
    if constexpr (kPending)
      v = _mm512_add_round_ps(load(pending + j, m), v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    store(dx + j, m, v);
  }
}

// Blocks of kStatRows rows, as the forward's: each row's pass 1, then each row's pass 2.
template <bool kW, bool kPending>
STRATA_AVX512 void backward_rows(const float* dy, const float* x, const float* mean, const float* rstd, const float* w,
                                 float* dx, float* dwp, float* dbp, int64_t r0, int64_t r1, int64_t C,
                                 const float* pending) {
  float mg[kStatRows], mgx[kStatRows];
  for (int64_t b0 = r0; b0 < r1; b0 += kStatRows) {
    const int64_t b1 = std::min(r1, b0 + kStatRows);
    for (int64_t r = b0; r < b1; ++r) {
      prefetch_row_ahead(dy, r, r1, C);
      prefetch_row_ahead(x, r, r1, C);
      backward_sums<kW>(dy + r * C, x + r * C, mean[r], rstd[r], w, dwp, dbp, C, mg[r - b0], mgx[r - b0]);
    }
    for (int64_t r = b0; r < b1; ++r) {
      if constexpr (kPending) prefetch_row_ahead(pending, r, r1, C);
      backward_dx<kW, kPending>(dy + r * C, x + r * C, mean[r], rstd[r], w, dx + r * C, C,
                                kPending ? pending + r * C : nullptr, mg[r - b0], mgx[r - b0]);
    }
  }
}

}  // namespace

void layer_norm_rows_avx512(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                            int64_t n, int64_t C, float eps) {
  if (w && b)
    forward_rows<true, true>(x, w, b, y, mean, rstd, n, C, eps);
  else if (w)
    forward_rows<true, false>(x, w, b, y, mean, rstd, n, C, eps);
  else if (b)
    forward_rows<false, true>(x, w, b, y, mean, rstd, n, C, eps);
  else
    forward_rows<false, false>(x, w, b, y, mean, rstd, n, C, eps);
}

void layer_norm_backward_rows_avx512(const float* dy, const float* x, const float* mean, const float* rstd,
                                     const float* w, float* dx, float* dwp, float* dbp, int64_t r0, int64_t r1,
                                     int64_t C, const float* pending) {
  if (w && pending)
    backward_rows<true, true>(dy, x, mean, rstd, w, dx, dwp, dbp, r0, r1, C, pending);
  else if (w)
    backward_rows<true, false>(dy, x, mean, rstd, w, dx, dwp, dbp, r0, r1, C, pending);
  else if (pending)
    backward_rows<false, true>(dy, x, mean, rstd, w, dx, dwp, dbp, r0, r1, C, pending);
  else
    backward_rows<false, false>(dy, x, mean, rstd, w, dx, dwp, dbp, r0, r1, C, pending);
}

}  // namespace strata::cpu

#else

namespace strata::cpu {
void layer_norm_rows_avx512(const float*, const float*, const float*, float*, float*, float*, int64_t, int64_t, float) {
  STRATA_THROW(Error, "[layer_norm_rows_avx512] not built for this target (kHaveActAvx512 is false)");
}
void layer_norm_backward_rows_avx512(const float*, const float*, const float*, const float*, const float*, float*,
                                     float*, float*, int64_t, int64_t, int64_t, const float*) {
  STRATA_THROW(Error, "[layer_norm_backward_rows_avx512] not built for this target (kHaveActAvx512 is false)");
}
}  // namespace strata::cpu

#endif
