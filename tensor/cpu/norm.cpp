// Layer norm runs one row per iteration (rows in parallel); its backward reads each row
// once, writing dx and its row block's weight/bias gradient partials, summed in a fixed
// order, so the result does not depend on the thread count. Batch norm runs one channel
// per iteration (channels in parallel) with double accumulators.
#include <strata/tensor/cpu/norm.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <strata/tensor/cpu/isa_dispatch.h>
#include <strata/tensor/cpu/norm_rows.h>
#include <strata/tensor/cpu/pool_rows.h>
#include <strata/tensor/cpu/prefetch.h>
#include <strata/tensor/cpu/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {


// T is the storage type, A = acc_t<T> the arithmetic and statistics type (norm_rows.h).
template <class T, class A = acc_t<T>>
void layer_norm_impl(const T* x, const T* w, const T* b, T* y, A* mean, A* rstd, int64_t rows, int64_t C,
                     double eps) {
  const bool avx512 = norm_rows::use_avx512<T>();
  parallel_for_simd(rows, std::max<int64_t>(1, 8192 / C), [&](int64_t r0, int64_t r1) {
    if constexpr (std::is_same_v<T, float>) {
      if (avx512) return layer_norm_rows_avx512(x + r0 * C, w, b, y + r0 * C, mean + r0, rstd + r0, r1 - r0, C, float(eps));
    }
    for (int64_t r = r0; r < r1; ++r) {
      prefetch_row_ahead(x, r, rows, C);
      prefetch_row_ahead<true>(y, r, rows, C);
      norm_rows::layer_norm_row(x + r * C, w, b, y + r * C, mean[r], rstd[r], C, eps);
    }
  });
}

// Per-run reductions over one contiguous (n, c) plane of S elements, written on raw
// pointers so that the simd reductions vectorise (a generic element functor did not).
// 16-bit elements are widened (ld) and summed in f32 (acc_t).
template <class T, class A = acc_t<T>>
A run_sum(const T* r, int64_t S) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < S; ++i) s += ld(r[i]);
  return s;
}
template <class T, class A = acc_t<T>>
A run_sq_dev(const T* r, int64_t S, A m) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < S; ++i) s += (ld(r[i]) - m) * (ld(r[i]) - m);
  return s;
}
// sum(g) and sum(g * (x - m)) of one run in a single pass, g = dy; with the ReLU after the
// batch norm fused (kRelu, y its output), g = relu_backward's y > 0 ? dy : 0, also stored
// to g_out (dx's run: the second pass then reads g and x, two streams instead of three, a
// channel's whole working set staying in L2).
template <bool kRelu, class T, class A = acc_t<T>>
void run_grad_sums(const T* dy, const T* y, const T* x, T* g_out, int64_t S, A m, double& sdy, double& sdyx) {
  A a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
  for (int64_t i = 0; i < S; ++i) {
    A g = ld(dy[i]);
    if constexpr (kRelu) {
      g = ld(y[i]) > A(0) ? g : A(0);
      g_out[i] = st<T>(g);  // exact: dy's own value or 0
    }
    a += g;
    b += g * (ld(x[i]) - m);
  }
  sdy += double(a);
  sdyx += double(b);
}

// Channel c's statistics (batch ones in training, which also updates the running ones;
// the running ones in eval), stored to smean / sinv, as the scale and shift of
// y = x * scale + shift.
template <class T, class A = acc_t<T>>
std::pair<A, A> channel_affine(const T* x, const T* w, const T* b, T* rmean, T* rvar, T* smean, T* sinv, int64_t N,
                               int64_t C, int64_t S, int64_t c, bool training, double momentum, double eps) {
  const int64_t M = N * S;
  double mu, inv;
  if (training) {
    double sum = 0, sq = 0;
    for (int64_t n = 0; n < N; ++n) sum += double(run_sum(x + (n * C + c) * S, S));
    mu = sum / double(M);
    const A m = A(mu);
    for (int64_t n = 0; n < N; ++n) sq += double(run_sq_dev(x + (n * C + c) * S, S, m));
    const double var = sq / double(M);
    inv = 1.0 / std::sqrt(var + eps);
    if (rmean) rmean[c] = st<T>((1 - momentum) * double(ld(rmean[c])) + momentum * mu);
    if (rvar) rvar[c] = st<T>((1 - momentum) * double(ld(rvar[c])) + momentum * var * double(M) / double(M - 1));
  } else {
    mu = double(ld(rmean[c]));
    inv = 1.0 / std::sqrt(double(ld(rvar[c])) + eps);
  }
  smean[c] = st<T>(mu);
  sinv[c] = st<T>(inv);
  const double scale_d = inv * (w ? double(ld(w[c])) : 1.0);
  return {A(scale_d), A((b ? double(ld(b[c])) : 0.0) - mu * scale_d)};
}

// The relu op's rule (v > 0 ? v : 0: NaN and -0 give +0) on a value rounded to T, widened.
template <class T, class A = acc_t<T>>
inline A relu_of(T v) {
  return ld(v) > A(0) ? ld(v) : A(0);
}

// relu(x * scale + shift) as the relu op applies it to the batch norm's rounded output.
template <class T, class A = acc_t<T>>
inline A bn_relu_of(T x, A scale, A shift) {
  return relu_of(st<T>(ld(x) * scale + shift));
}

// The channels per parallel_for_simd grain of a batch norm pass over M values a channel.
inline int64_t channel_grain(int64_t M) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(M, 1)); }

// kRelu: y = relu_of(the rounded value), as the relu op would apply it to this kernel's
// output.
template <class T, bool kRelu, class A = acc_t<T>>
void batch_norm_impl(const T* x, const T* w, const T* b, T* rmean, T* rvar, T* y, T* smean, T* sinv, int64_t N,
                     int64_t C, int64_t S, bool training, double momentum, double eps) {
  parallel_for_simd(C, channel_grain(N * S), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const auto [scale, shift] =
          channel_affine(x, w, b, rmean, rvar, smean, sinv, N, C, S, c, training, momentum, eps);
      for (int64_t n = 0; n < N; ++n) {
        const int64_t base = (n * C + c) * S;
#pragma omp simd
        for (int64_t i = base; i < base + S; ++i) {
          const T v = st<T>(ld(x[i]) * scale + shift);
          if constexpr (kRelu) y[i] = st<T>(relu_of(v));  // exact: v or 0
          else y[i] = v;
        }
      }
    }
  });
}

// win[j] = the place (0..3, row-major) in its 2x2 window of the flat plane index idx[j] of
// a Ho x Wo stride-2 pool over a plane W wide. Everything in locals: a u8 store may alias
// any memory the compiler would otherwise reload.
inline void window_places(const int64_t* idx, uint8_t* win, int64_t Ho, int64_t Wo, int64_t W) {
  for (int64_t oh = 0; oh < Ho; ++oh) {
    const int64_t* ir = idx + oh * Wo;
    uint8_t* wr = win + oh * Wo;
    const int64_t row = 2 * oh * W;
#pragma omp simd
    for (int64_t ow = 0; ow < Wo; ++ow) {
      const int64_t d = ir[ow] - (row + 2 * ow);  // 0, 1, W or W + 1
      wr[ow] = uint8_t(d >= W ? d - W + 2 : d);
    }
  }
}

// Batch norm, ReLU and a 2x2 stride-2 max pool (floor: an odd last row or column is in the
// statistics but in no window) of (N, C, H, W), one channel per iteration. Only the maxima
// p (N, C, H/2, W/2) are stored, with win, each max's place in its window (0 to 3,
// row-major): f32 planes up to 32 wide at x86-64-v4 form each window's ReLU outputs in
// registers (pool_avx512.h); elsewhere each plane's ReLU output goes to a per-thread buffer
// (widened: exact) and max_pool2d's own rows (pool_rows.h) pool it. p and the gradient are
// those of the three ops one after another.
template <class T, class A = acc_t<T>>
void bn_relu_pool_impl(const T* x, const T* w, const T* b, T* rmean, T* rvar, T* p, uint8_t* win, T* smean,
                       T* sinv, int64_t N, int64_t C, int64_t H, int64_t W, bool training, double momentum,
                       double eps) {
  const int64_t S = H * W, Ho = H / 2, Wo = W / 2, P = Ho * Wo;
  const bool avx512 = std::is_same_v<T, float> && W <= 32 && avx512_rows();  // one masked vector a row
  parallel_for_simd(C, channel_grain(N * S), [&](int64_t c0, int64_t c1) {
    // the generic rows' buffers: the ReLU plane, its pooled values (16-bit T) and indices
    const size_t rs = avx512 ? 0 : size_t(S), ps = avx512 || std::is_same_v<T, A> ? 0 : size_t(P);
    std::vector<A> r(rs), pooled(ps);
    std::vector<int64_t> idx(avx512 ? 0 : size_t(P));
    for (int64_t c = c0; c < c1; ++c) {
      const auto [scale, shift] =
          channel_affine(x, w, b, rmean, rvar, smean, sinv, N, C, S, c, training, momentum, eps);
      for (int64_t n = 0; n < N; ++n) {
        const T* xs = x + (n * C + c) * S;
        T* ps = p + (n * C + c) * P;
        uint8_t* ws = win + (n * C + c) * P;
        if constexpr (std::is_same_v<T, float>) {
          if (avx512) {
            bn_relu_max2x2_plane_avx512(xs, scale, shift, W, ps, ws, Ho, Wo);
            continue;
          }
        }
#pragma omp simd
        for (int64_t i = 0; i < S; ++i) r[size_t(i)] = bn_relu_of(xs[i], scale, shift);
        if constexpr (std::is_same_v<T, A>) {
          max2x2_plane(r.data(), H, W, ps, idx.data());
        } else {
          max2x2_plane(r.data(), H, W, pooled.data(), idx.data());
          for (int64_t j = 0; j < P; ++j) ps[j] = st<T>(pooled[size_t(j)]);
        }
        window_places(idx.data(), ws, Ho, Wo, W);
      }
    }
  });
}

// The end of channel c's batch norm backward once sdy = sum(g) and sdyx = sum(g (x - mu))
// are known: dw, db, then dx = k (g - sdy/M - xhat sdyx'/M) in training (the statistics'
// gradient), k g in eval, from g (dy, or the masked gradient dx itself holds).
template <class T, class A = acc_t<T>>
void bn_backward_finish(const T* g, const T* x, const T* w, T* dx, T* dw, T* db, int64_t N, int64_t C, int64_t S,
                        int64_t c, A mu, A inv, double sdy, double sdyx, bool training) {
  const int64_t M = N * S;
  sdyx *= double(inv);
  dw[c] = st<T>(sdyx);
  db[c] = st<T>(sdy);
  const A k = inv * (w ? ld(w[c]) : A(1));
  const A a = A(sdy / double(M)), bq = A(sdyx / double(M)) * inv;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t base = (n * C + c) * S;
    if (training) {
#pragma omp simd
      for (int64_t i = base; i < base + S; ++i) dx[i] = st<T>(k * (ld(g[i]) - a - (ld(x[i]) - mu) * bq));
    } else {
#pragma omp simd
      for (int64_t i = base; i < base + S; ++i) dx[i] = st<T>(k * ld(g[i]));
    }
  }
}

// kRelu: y is the fused ReLU's output, dy is masked by y > 0 as it is read, and the
// masked gradient goes through dx between the two passes.
template <class T, bool kRelu, class A = acc_t<T>>
void batch_norm_backward_impl(const T* dy, const T* y, const T* x, const T* w, const T* smean, const T* sinv, T* dx,
                              T* dw, T* db, int64_t N, int64_t C, int64_t S, bool training) {
  const int64_t M = N * S;
  parallel_for_simd(C, channel_grain(M), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const A mu = ld(smean[c]), inv = ld(sinv[c]);
      double sdy = 0, sdyx = 0;
      for (int64_t n = 0; n < N; ++n) {
        const int64_t base = (n * C + c) * S;
        run_grad_sums<kRelu>(dy + base, y + base, x + base, dx + base, S, mu, sdy, sdyx);
      }
      bn_backward_finish(kRelu ? dx : dy, x, w, dx, dw, db, N, C, S, c, mu, inv, sdy, sdyx, training);
    }
  });
}

// One plane of max_pool2d's backward for a 2x2 stride-2 pool (0 + dp at each window's
// max, zeros elsewhere, the rows and columns in no window too), masked by the ReLU before
// it (p > 0), written into g (H x W) row pair by row pair; avx512: f32 planes up to 32
// wide at x86-64-v4 take the masked-vector rows (pool_avx512.h).
template <class T, class A = acc_t<T>>
void unpool_plane(const T* dp, const T* p, const uint8_t* win, T* g, int64_t H, int64_t W, bool avx512) {
  const int64_t Ho = H / 2, Wo = W / 2;
  if constexpr (std::is_same_v<T, float>) {
    if (avx512) return unpool2x2_relu_plane_avx512(dp, p, win, g, H, W);
  }
  const T zero = st<T>(A(0));
  for (int64_t oh = 0; oh < Ho; ++oh) {
    T* g0 = g + 2 * oh * W;
    T* g1 = g0 + W;
    const T* dr = dp + oh * Wo;
    const T* pr = p + oh * Wo;
    const uint8_t* wr = win + oh * Wo;
#pragma omp simd
    for (int64_t ow = 0; ow < Wo; ++ow) {
      const T gv = ld(pr[ow]) > A(0) ? st<T>(A(0) + ld(dr[ow])) : zero;
      const int k = wr[ow];
      g0[2 * ow] = k == 0 ? gv : zero;
      g0[2 * ow + 1] = k == 1 ? gv : zero;
      g1[2 * ow] = k == 2 ? gv : zero;
      g1[2 * ow + 1] = k == 3 ? gv : zero;
    }
    if (W % 2) g0[W - 1] = g1[W - 1] = zero;
  }
  if (H % 2) std::fill(g + (H - 1) * W, g + H * W, zero);
}

// The backward of bn_relu_pool_impl, dp the gradient of p: per plane, max_pool2d's backward
// (0 + dp at each window's max, zeros elsewhere) masked by the ReLU (p > 0) written into dx
// row pair by row pair, then batch_norm_backward's two passes over it, reading it as dy: the
// bits of the three backwards one after another, without their two full-size intermediates.
template <class T, class A = acc_t<T>>
void bn_relu_pool_backward_impl(const T* dp, const T* p, const uint8_t* win, const T* x, const T* w,
                                const T* smean, const T* sinv, T* dx, T* dw, T* db, int64_t N, int64_t C,
                                int64_t H, int64_t W, bool training) {
  const int64_t S = H * W, Ho = H / 2, Wo = W / 2;
  const bool avx512 = std::is_same_v<T, float> && W <= 32 && avx512_rows();
  parallel_for_simd(C, channel_grain(N * S), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const A mu = ld(smean[c]), inv = ld(sinv[c]);
      double sdy = 0, sdyx = 0;
      for (int64_t n = 0; n < N; ++n) {
        const int64_t base = (n * C + c) * S, pbase = (n * C + c) * Ho * Wo;
        T* g = dx + base;
        unpool_plane(dp + pbase, p + pbase, win + pbase, g, H, W, avx512);
        run_grad_sums<false, T>(g, nullptr, x + base, nullptr, S, mu, sdy, sdyx);
      }
      bn_backward_finish(dx, x, w, dx, dw, db, N, C, S, c, mu, inv, sdy, sdyx, training);
    }
  });
}

}  // namespace

void layer_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, Tensor& mean, Tensor& rstd,
                       int64_t rows, int64_t C, double eps) {
  if (rows == 0 || C == 0) return;
  STRATA_DISPATCH_FLOAT16(x.dtype(), "layer_norm", [&] {
    using A = acc_t<scalar_t>;
    layer_norm_impl<scalar_t>(x.data<scalar_t>(), w.data_or_null<scalar_t>(), b.data_or_null<scalar_t>(),
                              y.data<scalar_t>(), mean.data<A>(), rstd.data<A>(), rows, C, eps);
  });
}

void layer_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                const Tensor& w, Tensor& dx, Tensor& dw, Tensor& db, int64_t rows, int64_t C) {
  layer_norm_backward_into("layer_norm_backward", dy, x, mean, rstd, w, Tensor(), dx, dw, db, rows, C);
}

void layer_norm_backward_into(const char* op, const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& rstd, const Tensor& w, const Tensor& pending, Tensor& dx, Tensor& dw,
                              Tensor& db, int64_t rows, int64_t C) {
  if (C == 0) return;
  STRATA_DISPATCH_FLOAT16(x.dtype(), op, [&] {
    using A = acc_t<scalar_t>;
    scalar_t* dwp = dw.data_or_null<scalar_t>();
    scalar_t* dbp = db.data_or_null<scalar_t>();
    if (rows == 0) {
      if (dwp) std::fill(dwp, dwp + C, st<scalar_t>(0.0f));
      if (dbp) std::fill(dbp, dbp + C, st<scalar_t>(0.0f));
      return;
    }
    norm_rows::layer_norm_backward<scalar_t>(dy.data<scalar_t>(), x.data<scalar_t>(), mean.data<A>(),
                                             rstd.data<A>(), w.data_or_null<scalar_t>(), dx.data<scalar_t>(), dwp, dbp,
                                             rows, C, pending.data_or_null<scalar_t>());
  });
}

namespace {
template <bool kRelu>
void batch_norm_into(const char* op, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& running_mean,
                     Tensor& running_var, Tensor& y, Tensor& save_mean, Tensor& save_invstd, int64_t N, int64_t C,
                     int64_t S, bool training, double momentum, double eps) {
  STRATA_DISPATCH_FLOAT16(x.dtype(), op, [&] {
    batch_norm_impl<scalar_t, kRelu>(x.data<scalar_t>(), w.data_or_null<scalar_t>(), b.data_or_null<scalar_t>(),
                                     running_mean.data_or_null<scalar_t>(), running_var.data_or_null<scalar_t>(),
                                     y.data<scalar_t>(), save_mean.data<scalar_t>(), save_invstd.data<scalar_t>(), N,
                                     C, S, training, momentum, eps);
  });
}

template <bool kRelu>
void batch_norm_backward_into(const char* op, const Tensor& dy, const Tensor& y, const Tensor& x, const Tensor& w,
                              const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx, Tensor& dw, Tensor& db,
                              int64_t N, int64_t C, int64_t S, bool training) {
  STRATA_DISPATCH_FLOAT16(x.dtype(), op, [&] {
    batch_norm_backward_impl<scalar_t, kRelu>(dy.data<scalar_t>(), y.data_or_null<scalar_t>(), x.data<scalar_t>(),
                                              w.data_or_null<scalar_t>(), save_mean.data<scalar_t>(),
                                              save_invstd.data<scalar_t>(), dx.data<scalar_t>(), dw.data<scalar_t>(),
                                              db.data<scalar_t>(), N, C, S, training);
  });
}
}  // namespace

void batch_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& running_mean,
                       Tensor& running_var, Tensor& y, Tensor& save_mean, Tensor& save_invstd, int64_t N,
                       int64_t C, int64_t S, bool training, double momentum, double eps) {
  batch_norm_into<false>("batch_norm", x, w, b, running_mean, running_var, y, save_mean, save_invstd, N, C, S,
                         training, momentum, eps);
}

void batch_norm_relu_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& running_mean,
                            Tensor& running_var, Tensor& y, Tensor& save_mean, Tensor& save_invstd, int64_t N,
                            int64_t C, int64_t S, bool training, double momentum, double eps) {
  batch_norm_into<true>("batch_norm_relu", x, w, b, running_mean, running_var, y, save_mean, save_invstd, N, C, S,
                        training, momentum, eps);
}

void batch_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& save_mean,
                                const Tensor& save_invstd, Tensor& dx, Tensor& dw, Tensor& db, int64_t N,
                                int64_t C, int64_t S, bool training) {
  batch_norm_backward_into<false>("batch_norm_backward", dy, Tensor(), x, w, save_mean, save_invstd, dx, dw, db, N, C,
                                  S, training);
}

void batch_norm_relu_backward_kernel(const Tensor& dy, const Tensor& y, const Tensor& x, const Tensor& w,
                                     const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx, Tensor& dw,
                                     Tensor& db, int64_t N, int64_t C, int64_t S, bool training) {
  batch_norm_backward_into<true>("batch_norm_relu_backward", dy, y, x, w, save_mean, save_invstd, dx, dw, db, N, C,
                                 S, training);
}

void batch_norm_relu_max_pool2_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& running_mean,
                                      Tensor& running_var, Tensor& p, Tensor& win, Tensor& save_mean,
                                      Tensor& save_invstd, int64_t N, int64_t C, int64_t H, int64_t W, bool training,
                                      double momentum, double eps) {
  STRATA_DISPATCH_FLOAT16(x.dtype(), "batch_norm_relu_max_pool2", [&] {
    bn_relu_pool_impl<scalar_t>(x.data<scalar_t>(), w.data_or_null<scalar_t>(), b.data_or_null<scalar_t>(),
                                running_mean.data_or_null<scalar_t>(), running_var.data_or_null<scalar_t>(),
                                p.data<scalar_t>(), win.data<uint8_t>(), save_mean.data<scalar_t>(),
                                save_invstd.data<scalar_t>(), N, C, H, W, training, momentum, eps);
  });
}

void batch_norm_relu_max_pool2_backward_kernel(const Tensor& dp, const Tensor& p, const Tensor& win, const Tensor& x,
                                               const Tensor& w, const Tensor& save_mean, const Tensor& save_invstd,
                                               Tensor& dx, Tensor& dw, Tensor& db, int64_t N, int64_t C, int64_t H,
                                               int64_t W, bool training) {
  STRATA_DISPATCH_FLOAT16(x.dtype(), "batch_norm_relu_max_pool2_backward", [&] {
    bn_relu_pool_backward_impl<scalar_t>(dp.data<scalar_t>(), p.data<scalar_t>(), win.data<uint8_t>(),
                                         x.data<scalar_t>(), w.data_or_null<scalar_t>(), save_mean.data<scalar_t>(),
                                         save_invstd.data<scalar_t>(), dx.data<scalar_t>(), dw.data<scalar_t>(),
                                         db.data<scalar_t>(), N, C, H, W, training);
  });
}

}  // namespace strata::cpu
