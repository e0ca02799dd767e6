// CUDA layer norm and RMSNorm (a block per row of a contiguous (rows, C) matrix; weight/bias
// gradients as chunked f64 column sums added in a fixed order) and batch norm (a block
// per channel of a contiguous (N, C, S) tensor computes the statistics in f64, then an
// elementwise kernel applies them). Formulas as in tensor/cpu/norm.cpp.
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/cuda/op_math.h>
#include <strata/tensor/dispatch.h>

namespace strata::cuda {
namespace {

template <class T>
__global__ void ln_fwd_k(int64_t rows, int64_t C, const T* x, const T* w, const T* b, T* y, T* mean, T* rstd,
                         double eps) {
  __shared__ T smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    T s = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) s += xr[i];
    const T mu = block_reduce(s, SumOp(), T(0), smem) / T(C);
    T v = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) v += (xr[i] - mu) * (xr[i] - mu);
    v = block_reduce(v, SumOp(), T(0), smem);
    const T rs = T(1) / math::sqrt_(v / T(C) + T(eps));
    if (threadIdx.x == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      const T xh = (xr[i] - mu) * rs;
      yr[i] = w ? (b ? xh * w[i] + b[i] : xh * w[i]) : xh + (b ? b[i] : T(0));
    }
  }
}

// RMSNorm: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps).
template <class T>
__global__ void rms_fwd_k(int64_t rows, int64_t C, const T* x, const T* w, T* y, T* rstd, double eps) {
  __shared__ T smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    T ss = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) ss += xr[i] * xr[i];
    const T rs = T(1) / math::sqrt_(block_reduce(ss, SumOp(), T(0), smem) / T(C) + T(eps));
    if (threadIdx.x == 0) rstd[r] = rs;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) yr[i] = w ? xr[i] * rs * w[i] : xr[i] * rs;
  }
}

// RMSNorm backward: dx = rstd * (g - xhat * mean(g * xhat)),  g = dy * w,  xhat = x * rstd.
template <class T>
__global__ void rms_bwd_dx_k(int64_t rows, int64_t C, const T* dy, const T* x, const T* rstd, const T* w, T* dx) {
  __shared__ T smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* gr = dy + r * C;
    const T* xr = x + r * C;
    T* dr = dx + r * C;
    const T rs = rstd[r];
    T sgx = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) sgx += (w ? gr[i] * w[i] : gr[i]) * (xr[i] * rs);
    sgx = block_reduce(sgx, SumOp(), T(0), smem) / T(C);
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      const T g = w ? gr[i] * w[i] : gr[i];
      dr[i] = rs * (g - xr[i] * rs * sgx);
    }
  }
}

// RMSNorm's dw = sum over rows of dy * xhat, as ln_bwd_params_k's column sums over chunks of rows.
template <class T>
__global__ void rms_bwd_w_k(int64_t rows, int64_t C, int64_t chunk_len, const T* dy, const T* x, const T* rstd,
                            double* pw, T* dw, int64_t chunks) {
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * chunk_len, r1 = min(rows, r0 + chunk_len);
  for (int64_t c = global_index(); c < C; c += grid_stride()) {
    double aw = 0;
    for (int64_t r = r0; r < r1; ++r) aw += double(dy[r * C + c] * (x[r * C + c] * rstd[r]));
    if (chunks == 1)
      dw[c] = T(aw);
    else
      pw[chunk * C + c] = aw;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * w
template <class T>
__global__ void ln_bwd_dx_k(int64_t rows, int64_t C, const T* dy, const T* x, const T* mean, const T* rstd, const T* w,
                            T* dx) {
  __shared__ T smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* gr = dy + r * C;
    const T* xr = x + r * C;
    T* dr = dx + r * C;
    const T mu = mean[r], rs = rstd[r];
    T sg = 0, sgx = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      const T g = w ? gr[i] * w[i] : gr[i];
      sg += g;
      sgx += g * (xr[i] - mu) * rs;
    }
    sg = block_reduce(sg, SumOp(), T(0), smem) / T(C);
    sgx = block_reduce(sgx, SumOp(), T(0), smem) / T(C);
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      const T g = w ? gr[i] * w[i] : gr[i];
      dr[i] = rs * (g - sg - (xr[i] - mu) * rs * sgx);
    }
  }
}

// Column sums over a chunk of rows: dw = sum dy * xhat, db = sum dy (each when wanted).
template <class T>
__global__ void ln_bwd_params_k(int64_t rows, int64_t C, int64_t chunk_len, const T* dy, const T* x, const T* mean,
                                const T* rstd, bool want_w, bool want_b, double* pw, double* pb, T* dw, T* db,
                                int64_t chunks) {
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * chunk_len, r1 = min(rows, r0 + chunk_len);
  for (int64_t c = global_index(); c < C; c += grid_stride()) {
    double aw = 0, ab = 0;
    for (int64_t r = r0; r < r1; ++r) {
      const T g = dy[r * C + c];
      if (want_w) aw += double(g * (x[r * C + c] - mean[r]) * rstd[r]);
      if (want_b) ab += double(g);
    }
    if (chunks == 1) {
      if (want_w) dw[c] = T(aw);
      if (want_b) db[c] = T(ab);
    } else {
      if (want_w) pw[chunk * C + c] = aw;
      if (want_b) pb[chunk * C + c] = ab;
    }
  }
}

template <class T>
__global__ void column_finish_k(int64_t C, int64_t chunks, const double* p, T* out) {
  for (int64_t c = global_index(); c < C; c += grid_stride()) {
    double s = 0;
    for (int64_t k = 0; k < chunks; ++k) s += p[k * C + c];
    out[c] = T(s);
  }
}

// Per channel: the statistics y is normalised with, the running-stat update, and
// coef[2c], coef[2c+1] = scale, shift with y = x * scale + shift.
template <class T>
__global__ void bn_stats_k(int64_t N, int64_t C, int64_t S, const T* x, const T* w, const T* b, T* rmean, T* rvar,
                           T* smean, T* sinv, T* coef, bool training, double momentum, double eps) {
  __shared__ double smem[32];
  const int64_t M = N * S;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    double mu, inv;
    if (training) {
      double s = 0;
      for (int64_t j = threadIdx.x; j < M; j += blockDim.x) s += double(x[((j / S) * C + c) * S + j % S]);
      mu = block_reduce(s, SumOp(), 0.0, smem) / double(M);
      const T m = T(mu);
      double v = 0;
      for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
        const T d = x[((j / S) * C + c) * S + j % S] - m;
        v += double(d * d);
      }
      const double var = block_reduce(v, SumOp(), 0.0, smem) / double(M);
      inv = 1.0 / ::sqrt(var + eps);
      if (threadIdx.x == 0) {
        if (rmean) rmean[c] = T((1 - momentum) * double(rmean[c]) + momentum * mu);
        if (rvar) rvar[c] = T((1 - momentum) * double(rvar[c]) + momentum * var * double(M) / double(M - 1));
      }
    } else {
      mu = double(rmean[c]);
      inv = 1.0 / ::sqrt(double(rvar[c]) + eps);
    }
    if (threadIdx.x == 0) {
      smean[c] = T(mu);
      sinv[c] = T(inv);
      const double scale = inv * (w ? double(w[c]) : 1.0);
      coef[2 * c] = T(scale);
      coef[2 * c + 1] = T((b ? double(b[c]) : 0.0) - mu * scale);
    }
  }
}

template <class T>
__global__ void bn_apply_k(int64_t n, int64_t C, int64_t S, const T* x, const T* coef, T* y) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const int64_t c = (i / S) % C;
    y[i] = x[i] * coef[2 * c] + coef[2 * c + 1];
  }
}

// Per channel: dw = sum dy * xhat, db = sum dy, and coef[3c..3c+2] = k, a, bq with
// dx = k * (dy - a - (x - mean) * bq) (training) or k * dy (eval).
template <class T>
__global__ void bn_bwd_stats_k(int64_t N, int64_t C, int64_t S, const T* dy, const T* x, const T* w, const T* smean,
                               const T* sinv, T* dw, T* db, T* coef) {
  __shared__ double smem[32];
  const int64_t M = N * S;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    const T mu = smean[c], inv = sinv[c];
    double sdy = 0, sdyx = 0;
    for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
      const int64_t i = ((j / S) * C + c) * S + j % S;
      sdy += double(dy[i]);
      sdyx += double(dy[i] * (x[i] - mu));
    }
    sdy = block_reduce(sdy, SumOp(), 0.0, smem);
    sdyx = block_reduce(sdyx, SumOp(), 0.0, smem) * double(inv);
    if (threadIdx.x == 0) {
      dw[c] = T(sdyx);
      db[c] = T(sdy);
      coef[3 * c] = inv * (w ? w[c] : T(1));
      coef[3 * c + 1] = M > 0 ? T(sdy / double(M)) : T(0);
      coef[3 * c + 2] = M > 0 ? T(sdyx / double(M)) * inv : T(0);
    }
  }
}

template <class T>
__global__ void bn_bwd_dx_k(int64_t n, int64_t C, int64_t S, const T* dy, const T* x, const T* smean, const T* coef,
                            bool training, T* dx) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const int64_t c = (i / S) % C;
    const T k = coef[3 * c];
    dx[i] = training ? k * (dy[i] - coef[3 * c + 1] - (x[i] - smean[c]) * coef[3 * c + 2]) : k * dy[i];
  }
}

template <class T>
const T* cptr(const Tensor& t) {
  return t.defined() ? dptr<T>(t) : nullptr;
}
template <class T>
T* mptr(Tensor& t) {
  return t.defined() ? dptr<T>(t) : nullptr;
}

unsigned block_grid(int64_t n) { return unsigned(std::clamp<int64_t>(n, 1, kMaxBlocks)); }

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
  STRATA_DISPATCH_FLOAT(x.dtype(), "layer_norm", [&] {
    ln_fwd_k<<<block_grid(rows), pow2_threads(C, 32, 512), 0, ctx.stream>>>(
        rows, C, dptr<scalar_t>(x), cptr<scalar_t>(w), cptr<scalar_t>(b), dptr<scalar_t>(y), dptr<scalar_t>(mean),
        dptr<scalar_t>(rstd), eps);
  });
  STRATA_CUDA_CHECK_LAUNCH("layer_norm");
}

void layer_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                const Tensor& w, Tensor& dx, Tensor& dw, Tensor& db, int64_t rows, int64_t C) {
  if (C == 0) return;
  OpContext ctx(dx);
  STRATA_DISPATCH_FLOAT(x.dtype(), "layer_norm_backward", [&] {
    using T = scalar_t;
    if (rows == 0) {
      for (Tensor* t : {&dw, &db})
        if (t->defined()) fill_kernel(*t, 0.0);
      return;
    }
    ln_bwd_dx_k<<<block_grid(rows), pow2_threads(C, 32, 512), 0, ctx.stream>>>(
        rows, C, dptr<T>(dy), dptr<T>(x), dptr<T>(mean), dptr<T>(rstd), cptr<T>(w), dptr<T>(dx));
    STRATA_CUDA_CHECK_LAUNCH("layer_norm_backward");
    if (!dw.defined() && !db.defined()) return;
    const int64_t chunks = column_chunks(rows, C);
    const int64_t chunk_len = (rows + chunks - 1) / chunks;
    Tensor pw, pb;
    if (chunks > 1) {
      if (dw.defined()) pw = Tensor::empty({chunks * C}, DType::f64, dx.device());
      if (db.defined()) pb = Tensor::empty({chunks * C}, DType::f64, dx.device());
    }
    const dim3 grid(grid_for(C), unsigned(chunks));
    ln_bwd_params_k<<<grid, kThreads, 0, ctx.stream>>>(rows, C, chunk_len, dptr<T>(dy), dptr<T>(x), dptr<T>(mean),
                                                       dptr<T>(rstd), dw.defined(), db.defined(), mptr<double>(pw),
                                                       mptr<double>(pb), mptr<T>(dw), mptr<T>(db), chunks);
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
  STRATA_DISPATCH_FLOAT(x.dtype(), "rms_norm", [&] {
    rms_fwd_k<<<block_grid(rows), pow2_threads(C, 32, 512), 0, ctx.stream>>>(
        rows, C, dptr<scalar_t>(x), cptr<scalar_t>(w), dptr<scalar_t>(y), dptr<scalar_t>(rstd), eps);
  });
  STRATA_CUDA_CHECK_LAUNCH("rms_norm");
}

void rms_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& rstd, const Tensor& w, Tensor& dx,
                              Tensor& dw, int64_t rows, int64_t C) {
  if (C == 0) return;
  OpContext ctx(dx);
  STRATA_DISPATCH_FLOAT(x.dtype(), "rms_norm_backward", [&] {
    using T = scalar_t;
    if (rows == 0) {
      if (dw.defined()) fill_kernel(dw, 0.0);
      return;
    }
    rms_bwd_dx_k<<<block_grid(rows), pow2_threads(C, 32, 512), 0, ctx.stream>>>(
        rows, C, dptr<T>(dy), dptr<T>(x), dptr<T>(rstd), cptr<T>(w), dptr<T>(dx));
    STRATA_CUDA_CHECK_LAUNCH("rms_norm_backward");
    if (!dw.defined()) return;
    const int64_t chunks = column_chunks(rows, C), chunk_len = (rows + chunks - 1) / chunks;
    Tensor pw = chunks > 1 ? Tensor::empty({chunks * C}, DType::f64, dx.device()) : Tensor();
    rms_bwd_w_k<<<dim3(grid_for(C), unsigned(chunks)), kThreads, 0, ctx.stream>>>(
        rows, C, chunk_len, dptr<T>(dy), dptr<T>(x), dptr<T>(rstd), mptr<double>(pw), dptr<T>(dw), chunks);
    STRATA_CUDA_CHECK_LAUNCH("rms_norm_backward");
    if (chunks > 1) {
      column_finish_k<<<grid_for(C), kThreads, 0, ctx.stream>>>(C, chunks, dptr<double>(pw), dptr<T>(dw));
      STRATA_CUDA_CHECK_LAUNCH("rms_norm_backward");
    }
  });
}

void batch_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& running_mean, Tensor& running_var,
                       Tensor& y, Tensor& save_mean, Tensor& save_invstd, int64_t N, int64_t C, int64_t S,
                       bool training, double momentum, double eps) {
  if (C == 0) return;
  OpContext ctx(y);
  STRATA_DISPATCH_FLOAT(x.dtype(), "batch_norm", [&] {
    using T = scalar_t;
    Tensor coef = Tensor::empty({2 * C}, x.dtype(), x.device());
    bn_stats_k<<<block_grid(C), kThreads, 0, ctx.stream>>>(N, C, S, dptr<T>(x), cptr<T>(w), cptr<T>(b),
                                                           mptr<T>(running_mean), mptr<T>(running_var),
                                                           dptr<T>(save_mean), dptr<T>(save_invstd), dptr<T>(coef),
                                                           training, momentum, eps);
    STRATA_CUDA_CHECK_LAUNCH("batch_norm");
    const int64_t n = N * C * S;
    if (n == 0) return;
    bn_apply_k<<<grid_for(n), kThreads, 0, ctx.stream>>>(n, C, S, dptr<T>(x), dptr<T>(coef), dptr<T>(y));
    STRATA_CUDA_CHECK_LAUNCH("batch_norm");
  });
}

void batch_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& save_mean,
                                const Tensor& save_invstd, Tensor& dx, Tensor& dw, Tensor& db, int64_t N, int64_t C,
                                int64_t S, bool training) {
  if (C == 0) return;
  OpContext ctx(dw);
  STRATA_DISPATCH_FLOAT(x.dtype(), "batch_norm_backward", [&] {
    using T = scalar_t;
    Tensor coef = Tensor::empty({3 * C}, x.dtype(), x.device());
    bn_bwd_stats_k<<<block_grid(C), kThreads, 0, ctx.stream>>>(N, C, S, dptr<T>(dy), dptr<T>(x), cptr<T>(w),
                                                               dptr<T>(save_mean), dptr<T>(save_invstd), dptr<T>(dw),
                                                               dptr<T>(db), dptr<T>(coef));
    STRATA_CUDA_CHECK_LAUNCH("batch_norm_backward");
    const int64_t n = N * C * S;
    if (n == 0) return;
    bn_bwd_dx_k<<<grid_for(n), kThreads, 0, ctx.stream>>>(n, C, S, dptr<T>(dy), dptr<T>(x), dptr<T>(save_mean),
                                                          dptr<T>(coef), training, dptr<T>(dx));
    STRATA_CUDA_CHECK_LAUNCH("batch_norm_backward");
  });
}

}  // namespace strata::cuda
