// CUDA layer norm and RMSNorm (a block per row of a contiguous (rows, C) matrix; weight/bias
// gradients as chunked f64 column sums added in a fixed order) and batch norm (a block
// per channel of a contiguous (N, C, S) tensor computes the statistics in f64, then an
// elementwise kernel applies them). Formulas as in tensor/cpu/norm.cpp and
// tensor/cpu/rms_norm.cpp, f16/bf16 included (f32 arithmetic, widen.h).
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/cuda/norm_rows.h>
#include <strata/tensor/cuda/op_math.h>
#include <strata/tensor/cuda/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cuda {
namespace {

// S: the storage type (f16/bf16 widened per element, each output rounded once); A =
// acc_t<S> the arithmetic and statistics type: LayerNorm's mean / rstd and RMSNorm's rstd
// are f32 for 16-bit inputs (the CPU kernels' contract, tensor/ops.h).
template <class S, class A = acc_t<S>>
__global__ void ln_fwd_k(int64_t rows, int64_t C, const S* x, const S* w, const S* b, S* y, A* mean, A* rstd,
                         double eps) {
  __shared__ A smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const S* xr = x + r * C;
    A s = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) s += ld(xr[i]);
    norm_rows::layer_norm_row(s, xr, w, b, y + r * C, mean, rstd, r, C, eps, smem);
  }
}

// RMSNorm: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps).
template <class S, class A = acc_t<S>>
__global__ void rms_fwd_k(int64_t rows, int64_t C, const S* x, const S* w, S* y, A* rstd, double eps) {
  __shared__ A smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const S* xr = x + r * C;
    S* yr = y + r * C;
    A ss = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) ss += ld(xr[i]) * ld(xr[i]);
    const A rs = A(1) / math::sqrt_(block_reduce(ss, SumOp(), A(0), smem) / A(C) + A(eps));
    if (threadIdx.x == 0) rstd[r] = rs;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
      yr[i] = st<S>(w ? ld(xr[i]) * rs * ld(w[i]) : ld(xr[i]) * rs);
  }
}

// RMSNorm backward: dx = rstd * (g - xhat * mean(g * xhat)),  g = dy * w,  xhat = x * rstd;
// with `pending` (the gradient x already received from its other consumers) dx = pending +
// that dx rounded to S, as norm_rows::ln_bwd_dx_k adds it (dx may be pending itself).
template <class S, class A = acc_t<S>>
__global__ void rms_bwd_dx_k(int64_t rows, int64_t C, const S* dy, const S* x, const A* rstd, const S* w,
                             const S* pending, S* dx) {
  __shared__ A smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const S* gr = dy + r * C;
    const S* xr = x + r * C;
    S* dr = dx + r * C;
    const A rs = rstd[r];
    A sgx = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
      sgx += (w ? ld(gr[i]) * ld(w[i]) : ld(gr[i])) * (ld(xr[i]) * rs);
    sgx = block_reduce(sgx, SumOp(), A(0), smem) / A(C);
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      const A g = w ? ld(gr[i]) * ld(w[i]) : ld(gr[i]);
      const S d = st<S>(rs * (g - ld(xr[i]) * rs * sgx));
      dr[i] = pending ? st<S>(norm_rows::add_rn(ld(pending[r * C + i]), ld(d))) : d;
    }
  }
}

// RMSNorm's dw = sum over rows of dy * xhat, as ln_bwd_params_k's column sums over chunks of rows.
template <class S, class A = acc_t<S>>
__global__ void rms_bwd_w_k(int64_t rows, int64_t C, int64_t chunk_len, const S* dy, const S* x, const A* rstd,
                            double* pw, S* dw, int64_t chunks) {
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * chunk_len, r1 = min(rows, r0 + chunk_len);
  for (int64_t c = global_index(); c < C; c += grid_stride()) {
    double aw = 0;
    for (int64_t r = r0; r < r1; ++r) aw += double(ld(dy[r * C + c]) * (ld(x[r * C + c]) * rstd[r]));
    if (chunks == 1)
      dw[c] = st<S>(aw);
    else
      pw[chunk * C + c] = aw;
  }
}

// Column sums over a chunk of rows: dw = sum dy * xhat, db = sum dy (each when wanted).
template <class S, class A = acc_t<S>>
__global__ void ln_bwd_params_k(int64_t rows, int64_t C, int64_t chunk_len, const S* dy, const S* x, const A* mean,
                                const A* rstd, bool want_w, bool want_b, double* pw, double* pb, S* dw, S* db,
                                int64_t chunks) {
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * chunk_len, r1 = min(rows, r0 + chunk_len);
  for (int64_t c = global_index(); c < C; c += grid_stride()) {
    double aw = 0, ab = 0;
    for (int64_t r = r0; r < r1; ++r) {
      const A g = ld(dy[r * C + c]);
      if (want_w) aw += double(g * (ld(x[r * C + c]) - mean[r]) * rstd[r]);
      if (want_b) ab += double(g);
    }
    if (chunks == 1) {
      if (want_w) dw[c] = st<S>(aw);
      if (want_b) db[c] = st<S>(ab);
    } else {
      if (want_w) pw[chunk * C + c] = aw;
      if (want_b) pb[chunk * C + c] = ab;
    }
  }
}

template <class S>
__global__ void column_finish_k(int64_t C, int64_t chunks, const double* p, S* out) {
  for (int64_t c = global_index(); c < C; c += grid_stride()) {
    double s = 0;
    for (int64_t k = 0; k < chunks; ++k) s += p[k * C + c];
    out[c] = st<S>(s);
  }
}

// Per channel: the statistics y is normalised with, the running-stat update, and
// coef[2c], coef[2c+1] = scale, shift with y = x * scale + shift (in A). As on the CPU the
// saved and running statistics are stored in the input's dtype (16-bit for f16/bf16).
template <class S, class A = acc_t<S>>
__global__ void bn_stats_k(int64_t N, int64_t C, int64_t S_, const S* x, const S* w, const S* b, S* rmean, S* rvar,
                           S* smean, S* sinv, A* coef, bool training, double momentum, double eps) {
  __shared__ double smem[32];
  const int64_t M = N * S_;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    double mu, inv;
    if (training) {
      double s = 0;
      for (int64_t j = threadIdx.x; j < M; j += blockDim.x) s += double(ld(x[((j / S_) * C + c) * S_ + j % S_]));
      mu = block_reduce(s, SumOp(), 0.0, smem) / double(M);
      const A m = A(mu);
      double v = 0;
      for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
        const A d = ld(x[((j / S_) * C + c) * S_ + j % S_]) - m;
        v += double(d * d);
      }
      const double var = block_reduce(v, SumOp(), 0.0, smem) / double(M);
      inv = 1.0 / ::sqrt(var + eps);
      if (threadIdx.x == 0) {
        if (rmean) rmean[c] = st<S>((1 - momentum) * double(ld(rmean[c])) + momentum * mu);
        if (rvar) rvar[c] = st<S>((1 - momentum) * double(ld(rvar[c])) + momentum * var * double(M) / double(M - 1));
      }
    } else {
      mu = double(ld(rmean[c]));
      inv = 1.0 / ::sqrt(double(ld(rvar[c])) + eps);
    }
    if (threadIdx.x == 0) {
      smean[c] = st<S>(mu);
      sinv[c] = st<S>(inv);
      const double scale = inv * (w ? double(ld(w[c])) : 1.0);
      coef[2 * c] = A(scale);
      coef[2 * c + 1] = A((b ? double(ld(b[c])) : 0.0) - mu * scale);
    }
  }
}

template <class S, class A = acc_t<S>>
__global__ void bn_apply_k(int64_t n, int64_t C, int64_t S_, const S* x, const A* coef, S* y) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const int64_t c = (i / S_) % C;
    y[i] = st<S>(ld(x[i]) * coef[2 * c] + coef[2 * c + 1]);
  }
}

// Per channel: dw = sum dy * xhat, db = sum dy, and coef[3c..3c+2] = k, a, bq with
// dx = k * (dy - a - (x - mean) * bq) (training) or k * dy (eval), in A; the saved
// statistics are read in the input's dtype.
template <class S, class A = acc_t<S>>
__global__ void bn_bwd_stats_k(int64_t N, int64_t C, int64_t S_, const S* dy, const S* x, const S* w,
                               const S* smean, const S* sinv, S* dw, S* db, A* coef) {
  __shared__ double smem[32];
  const int64_t M = N * S_;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    const A mu = ld(smean[c]), inv = ld(sinv[c]);
    double sdy = 0, sdyx = 0;
    for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
      const int64_t i = ((j / S_) * C + c) * S_ + j % S_;
      const A g = ld(dy[i]);
      sdy += double(g);
      sdyx += double(g * (ld(x[i]) - mu));
    }
    sdy = block_reduce(sdy, SumOp(), 0.0, smem);
    sdyx = block_reduce(sdyx, SumOp(), 0.0, smem) * double(inv);
    if (threadIdx.x == 0) {
      dw[c] = st<S>(sdyx);
      db[c] = st<S>(sdy);
      coef[3 * c] = inv * (w ? ld(w[c]) : A(1));
      coef[3 * c + 1] = M > 0 ? A(sdy / double(M)) : A(0);
      coef[3 * c + 2] = M > 0 ? A(sdyx / double(M)) * inv : A(0);
    }
  }
}

template <class S, class A = acc_t<S>>
__global__ void bn_bwd_dx_k(int64_t n, int64_t C, int64_t S_, const S* dy, const S* x, const S* smean, const A* coef,
                            bool training, S* dx) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const int64_t c = (i / S_) % C;
    const A k = coef[3 * c];
    dx[i] = st<S>(training ? k * (ld(dy[i]) - coef[3 * c + 1] - (ld(x[i]) - ld(smean[c])) * coef[3 * c + 2])
                           : k * ld(dy[i]));
  }
}

// Row chunks for a column sum over `rows` rows of C columns (enough blocks to fill the GPU
// when C is small), as the layer norm's parameter gradients use.
int64_t column_chunks(int64_t rows, int64_t C) {
  const int64_t bx = (C + kThreads - 1) / kThreads;
  int64_t chunks = 1;
  if (bx < 128) chunks = std::min<int64_t>({(rows + 63) / 64, (256 + bx - 1) / bx, 65535});
  return std::max<int64_t>(chunks, 1);
}

}  // namespace

void layer_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, Tensor& mean, Tensor& rstd,
                       int64_t rows, int64_t C, double eps) {
  if (rows == 0 || C == 0) return;
  OpContext ctx(y);
  STRATA_DISPATCH_FLOAT16(x.dtype(), "layer_norm", [&] {
    using A = acc_t<scalar_t>;
    ln_fwd_k<<<block_grid(rows), pow2_threads(C, 32, 512), 0, ctx.stream>>>(
        rows, C, dptr<scalar_t>(x), dptr_or_null<scalar_t>(w), dptr_or_null<scalar_t>(b), dptr<scalar_t>(y), dptr<A>(mean),
        dptr<A>(rstd), eps);
  });
  STRATA_CUDA_CHECK_LAUNCH("layer_norm");
}

void layer_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                const Tensor& w, Tensor& dx, Tensor& dw, Tensor& db, int64_t rows, int64_t C) {
  layer_norm_backward_into("layer_norm_backward", dy, x, mean, rstd, w, Tensor(), dx, dw, db, rows, C);
}

void layer_norm_backward_into(const char* op, const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& rstd, const Tensor& w, const Tensor& pending, Tensor& dx, Tensor& dw,
                              Tensor& db, int64_t rows, int64_t C) {
  if (C == 0) return;
  OpContext ctx(dx);
  STRATA_DISPATCH_FLOAT16(x.dtype(), op, [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    if (rows == 0) {
      for (Tensor* t : {&dw, &db})
        if (t->defined()) fill_kernel(*t, 0.0);
      return;
    }
    norm_rows::ln_bwd_dx_k<<<block_grid(rows), pow2_threads(C, 32, 512), 0, ctx.stream>>>(
        rows, C, dptr<T>(dy), dptr<T>(x), dptr<A>(mean), dptr<A>(rstd), dptr_or_null<T>(w),
        static_cast<const T*>(dptr_or_null<T>(pending)), dptr<T>(dx));
    STRATA_CUDA_CHECK_LAUNCH(op);
  });
  layer_norm_param_grads(dy, x, mean, rstd, dw, db, rows, C);
}

void layer_norm_param_grads(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd, Tensor& dw,
                            Tensor& db, int64_t rows, int64_t C) {
  if (C == 0 || rows == 0 || (!dw.defined() && !db.defined())) return;
  OpContext ctx(dw.defined() ? dw : db);
  STRATA_DISPATCH_FLOAT16(x.dtype(), "layer_norm_backward", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const int64_t chunks = column_chunks(rows, C);
    const int64_t chunk_len = (rows + chunks - 1) / chunks;
    Tensor pw, pb;
    if (chunks > 1) {
      if (dw.defined()) pw = Tensor::empty({chunks * C}, DType::f64, x.device());
      if (db.defined()) pb = Tensor::empty({chunks * C}, DType::f64, x.device());
    }
    const dim3 grid(grid_for(C), unsigned(chunks));
    ln_bwd_params_k<<<grid, kThreads, 0, ctx.stream>>>(rows, C, chunk_len, dptr<T>(dy), dptr<T>(x), dptr<A>(mean),
                                                       dptr<A>(rstd), dw.defined(), db.defined(), dptr_or_null<double>(pw),
                                                       dptr_or_null<double>(pb), dptr_or_null<T>(dw), dptr_or_null<T>(db), chunks);
    STRATA_CUDA_CHECK_LAUNCH("layer_norm_backward");
    if (chunks > 1) {
      if (dw.defined()) column_finish_k<<<grid_for(C), kThreads, 0, ctx.stream>>>(C, chunks, dptr<double>(pw), dptr<T>(dw));
      if (db.defined()) column_finish_k<<<grid_for(C), kThreads, 0, ctx.stream>>>(C, chunks, dptr<double>(pb), dptr<T>(db));
      STRATA_CUDA_CHECK_LAUNCH("layer_norm_backward");
    }
  });
}

void rms_norm_kernel(const Tensor& x, const Tensor& w, Tensor& y, Tensor& rstd, int64_t rows, int64_t C,
                     double eps) {
  if (rows == 0 || C == 0) return;
  OpContext ctx(y);
  STRATA_DISPATCH_FLOAT16(x.dtype(), "rms_norm", [&] {
    rms_fwd_k<<<block_grid(rows), pow2_threads(C, 32, 512), 0, ctx.stream>>>(
        rows, C, dptr<scalar_t>(x), dptr_or_null<scalar_t>(w), dptr<scalar_t>(y), dptr<acc_t<scalar_t>>(rstd), eps);
  });
  STRATA_CUDA_CHECK_LAUNCH("rms_norm");
}

namespace {
// dx (plus `pending` when given, rms_bwd_dx_k) and dw of RMSNorm's backward.
void rms_norm_backward_into(const char* op, const Tensor& dy, const Tensor& x, const Tensor& rstd, const Tensor& w,
                            const Tensor& pending, Tensor& dx, Tensor& dw, int64_t rows, int64_t C) {
  if (C == 0) return;
  OpContext ctx(dx);
  STRATA_DISPATCH_FLOAT16(x.dtype(), op, [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    if (rows == 0) {
      if (dw.defined()) fill_kernel(dw, 0.0);
      return;
    }
    rms_bwd_dx_k<<<block_grid(rows), pow2_threads(C, 32, 512), 0, ctx.stream>>>(
        rows, C, dptr<T>(dy), dptr<T>(x), dptr<A>(rstd), dptr_or_null<T>(w),
        static_cast<const T*>(dptr_or_null<T>(pending)), dptr<T>(dx));
    STRATA_CUDA_CHECK_LAUNCH(op);
    if (!dw.defined()) return;
    const int64_t chunks = column_chunks(rows, C), chunk_len = (rows + chunks - 1) / chunks;
    Tensor pw = chunks > 1 ? Tensor::empty({chunks * C}, DType::f64, dx.device()) : Tensor();
    rms_bwd_w_k<<<dim3(grid_for(C), unsigned(chunks)), kThreads, 0, ctx.stream>>>(
        rows, C, chunk_len, dptr<T>(dy), dptr<T>(x), dptr<A>(rstd), dptr_or_null<double>(pw), dptr<T>(dw), chunks);
    STRATA_CUDA_CHECK_LAUNCH(op);
    if (chunks > 1) {
      column_finish_k<<<grid_for(C), kThreads, 0, ctx.stream>>>(C, chunks, dptr<double>(pw), dptr<T>(dw));
      STRATA_CUDA_CHECK_LAUNCH(op);
    }
  });
}
}  // namespace

void rms_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& rstd, const Tensor& w, Tensor& dx,
                              Tensor& dw, int64_t rows, int64_t C) {
  rms_norm_backward_into("rms_norm_backward", dy, x, rstd, w, Tensor(), dx, dw, rows, C);
}

void rms_norm_backward_add_kernel(const Tensor& dy, const Tensor& x, const Tensor& rstd, const Tensor& w,
                                  const Tensor& pending, Tensor& dx, Tensor& dw, int64_t rows, int64_t C) {
  rms_norm_backward_into("rms_norm_backward_add", dy, x, rstd, w, pending, dx, dw, rows, C);
}

void batch_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& running_mean, Tensor& running_var,
                       Tensor& y, Tensor& save_mean, Tensor& save_invstd, int64_t N, int64_t C, int64_t S,
                       bool training, double momentum, double eps) {
  if (C == 0) return;
  OpContext ctx(y);
  STRATA_DISPATCH_FLOAT16(x.dtype(), "batch_norm", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    Tensor coef = Tensor::empty({2 * C}, dtype_v<A>, x.device());
    bn_stats_k<<<block_grid(C), kThreads, 0, ctx.stream>>>(N, C, S, dptr<T>(x), dptr_or_null<T>(w), dptr_or_null<T>(b),
                                                           dptr_or_null<T>(running_mean), dptr_or_null<T>(running_var),
                                                           dptr<T>(save_mean), dptr<T>(save_invstd), dptr<A>(coef),
                                                           training, momentum, eps);
    STRATA_CUDA_CHECK_LAUNCH("batch_norm");
    const int64_t n = N * C * S;
    if (n == 0) return;
    bn_apply_k<<<grid_for(n), kThreads, 0, ctx.stream>>>(n, C, S, dptr<T>(x), dptr<A>(coef), dptr<T>(y));
    STRATA_CUDA_CHECK_LAUNCH("batch_norm");
  });
}

void batch_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& save_mean,
                                const Tensor& save_invstd, Tensor& dx, Tensor& dw, Tensor& db, int64_t N, int64_t C,
                                int64_t S, bool training) {
  if (C == 0) return;
  OpContext ctx(dw);
  STRATA_DISPATCH_FLOAT16(x.dtype(), "batch_norm_backward", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    Tensor coef = Tensor::empty({3 * C}, dtype_v<A>, x.device());
    bn_bwd_stats_k<<<block_grid(C), kThreads, 0, ctx.stream>>>(N, C, S, dptr<T>(dy), dptr<T>(x), dptr_or_null<T>(w),
                                                               dptr<T>(save_mean), dptr<T>(save_invstd), dptr<T>(dw),
                                                               dptr<T>(db), dptr<A>(coef));
    STRATA_CUDA_CHECK_LAUNCH("batch_norm_backward");
    const int64_t n = N * C * S;
    if (n == 0) return;
    bn_bwd_dx_k<<<grid_for(n), kThreads, 0, ctx.stream>>>(n, C, S, dptr<T>(dy), dptr<T>(x), dptr<T>(save_mean),
                                                          dptr<A>(coef), training, dptr<T>(dx));
    STRATA_CUDA_CHECK_LAUNCH("batch_norm_backward");
  });
}

}  // namespace strata::cuda
