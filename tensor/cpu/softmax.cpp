// Softmax kernels. The common case (softmax over the last dim) runs one row per
// iteration with `omp simd` reductions; other dims work on tiles of the inner dim so
// the loops stay contiguous and vectorised.
#include <strata/tensor/cpu/softmax.h>

#include <algorithm>
#include <limits>

#include <strata/tensor/cpu/isa_dispatch.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {

constexpr int64_t kTile = 64;  // inner-dim tile width for dims other than the last

template <class T, class A = acc_t<T>>
void softmax_backward_row(const T* dy, const T* y, T* dx, int64_t n, bool log) {
  A s = 0;
  if (log) {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += ld(dy[i]);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dx[i] = st<T>(ld(dy[i]) - vexp(ld(y[i])) * s);
  } else {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += ld(dy[i]) * ld(y[i]);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dx[i] = st<T>(ld(y[i]) * (ld(dy[i]) - s));
  }
}

// One tile: columns [0, w) of the (n, inner) slab starting at x, row stride `inner`.
// Each y is written once (exp recomputed), so 16-bit outputs are rounded once.
template <class T, class A = acc_t<T>>
void softmax_tile(const T* x, T* y, int64_t n, int64_t inner, int64_t w, bool log) {
  A mx[kTile], s[kTile];
  std::fill(mx, mx + w, -std::numeric_limits<A>::infinity());
  std::fill(s, s + w, A(0));
  for (int64_t k = 0; k < n; ++k) {
    const T* xr = x + k * inner;
    for (int64_t j = 0; j < w; ++j) mx[j] = ld(xr[j]) > mx[j] ? ld(xr[j]) : mx[j];
  }
  for (int64_t k = 0; k < n; ++k) {
    const T* xr = x + k * inner;
    for (int64_t j = 0; j < w; ++j) s[j] += vexp(ld(xr[j]) - mx[j]);
  }
  if (log) {
    for (int64_t j = 0; j < w; ++j) s[j] = mx[j] + std::log(s[j]);  // log-sum-exp
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < w; ++j) y[k * inner + j] = st<T>(ld(x[k * inner + j]) - s[j]);
  } else {
    for (int64_t j = 0; j < w; ++j) s[j] = A(1) / s[j];
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < w; ++j) y[k * inner + j] = st<T>(vexp(ld(x[k * inner + j]) - mx[j]) * s[j]);
  }
}

template <class T, class A = acc_t<T>>
void softmax_backward_tile(const T* dy, const T* y, T* dx, int64_t n, int64_t inner, int64_t w, bool log) {
  A s[kTile];
  std::fill(s, s + w, A(0));
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < w; ++j)
      s[j] += log ? ld(dy[k * inner + j]) : ld(dy[k * inner + j]) * ld(y[k * inner + j]);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t o = k * inner;
    for (int64_t j = 0; j < w; ++j)
      dx[o + j] = st<T>(log ? ld(dy[o + j]) - vexp(ld(y[o + j])) * s[j] : ld(y[o + j]) * (ld(dy[o + j]) - s[j]));
  }
}

// Calls fn(slab_offset, col0, width) for every (outer, tile) pair, in parallel.
template <class F>
void for_each_tile(int64_t outer, int64_t n, int64_t inner, F&& fn) {
  const int64_t tiles = (inner + kTile - 1) / kTile;
  const int64_t work = std::max<int64_t>(1, n * std::min(inner, kTile));
  parallel_for_simd(outer * tiles, std::max<int64_t>(1, 16384 / work), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / tiles, c0 = (t % tiles) * kTile;
      fn(o * n * inner + c0, std::min(kTile, inner - c0));
    }
  });
}

}  // namespace

void softmax_kernel(const Tensor& x, Tensor& y, int64_t outer, int64_t n, int64_t inner, bool log) {
  if (x.numel() == 0) return;
  STRATA_DISPATCH_FLOAT16(x.dtype(), log ? "log_softmax" : "softmax", [&] {
    const scalar_t* xp = x.data<scalar_t>();
    scalar_t* yp = y.data<scalar_t>();
    if (inner == 1) {
      parallel_for_simd(outer, std::max<int64_t>(1, 16384 / n), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) softmax_row(xp + r * n, yp + r * n, n, log);
      });
    } else {
      for_each_tile(outer, n, inner, [&](int64_t off, int64_t w) { softmax_tile(xp + off, yp + off, n, inner, w, log); });
    }
  });
}

void softmax_backward_kernel(const Tensor& dy, const Tensor& y, Tensor& dx, int64_t outer, int64_t n,
                             int64_t inner, bool log) {
  if (y.numel() == 0) return;
  STRATA_DISPATCH_FLOAT16(y.dtype(), log ? "log_softmax_backward" : "softmax_backward", [&] {
    const scalar_t* gp = dy.data<scalar_t>();
    const scalar_t* yp = y.data<scalar_t>();
    scalar_t* dp = dx.data<scalar_t>();
    if (inner == 1) {
      parallel_for_simd(outer, std::max<int64_t>(1, 16384 / n), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) softmax_backward_row(gp + r * n, yp + r * n, dp + r * n, n, log);
      });
    } else {
      for_each_tile(outer, n, inner,
                    [&](int64_t off, int64_t w) { softmax_backward_tile(gp + off, yp + off, dp + off, n, inner, w, log); });
    }
  });
}

}  // namespace strata::cpu
