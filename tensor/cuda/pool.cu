// CUDA 2-d max and average pooling over contiguous (N*C, H, W) planes: a thread per
// output for the forward passes; max backward scatters with atomics (windows may
// overlap), average backward gathers each input's windows (deterministic). Semantics as
// tensor/cpu/pool.cpp: first max on ties, NaN wins, padding never wins nor is read,
// average divisor = window clipped to the padded input (count_include_pad). f16/bf16
// planes compare / sum in f32 (widen.h); the max backward scatters into an f32 scratch
// rounded once (the CPU rounds after each add; they differ only where windows overlap).
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/cuda/op_math.h>
#include <strata/tensor/cuda/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cuda {
namespace {

struct Geom {
  int64_t planes, H, W, Ho, Wo, kh, kw, sh, sw, ph, pw;
};

Geom geom(const Tensor& x, const Tensor& y, const ops::Pool2dParams& p) {
  return {x.size(0) * x.size(1), x.size(2), x.size(3), y.size(2), y.size(3), p.kernel_h, p.kernel_w,
          p.stride_h,          p.stride_w, p.pad_h,  p.pad_w};
}

template <class S, class A = acc_t<S>>
__global__ void max_pool_k(Geom g, const S* x, S* y, int64_t* idx) {
  const int64_t n = g.planes * g.Ho * g.Wo;
  for (int64_t t = global_index(); t < n; t += grid_stride()) {
    const int64_t pl = t / (g.Ho * g.Wo), oh = (t / g.Wo) % g.Ho, ow = t % g.Wo;
    const S* xs = x + pl * g.H * g.W;
    const int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
    const int64_t h0 = max(hs, int64_t(0)), h1 = min(hs + g.kh, g.H);
    const int64_t w0 = max(ws, int64_t(0)), w1 = min(ws + g.kw, g.W);
    A best = A(0);
    int64_t arg = -1;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) {
        const A v = ld(xs[h * g.W + w]);
        if (arg < 0 || v > best || (math::is_nan(v) && !math::is_nan(best))) {
          best = v;
          arg = h * g.W + w;
        }
      }
    if (arg >= 0) y[t] = xs[arg];  // the element itself (16-bit: its bits)
    else y[t] = st<S>(A(0));
    idx[t] = arg;
  }
}

// dx (A: the gradient's dtype, or an f32 scratch for f16/bf16 dy) += dy at the argmax.
template <class S, class A>
__global__ void max_pool_bwd_k(int64_t planes, int64_t HW, int64_t HoWo, const S* dy, const int64_t* idx, A* dx) {
  for (int64_t t = global_index(); t < planes * HoWo; t += grid_stride())
    atomicAdd(dx + (t / HoWo) * HW + idx[t], A(ld(dy[t])));
}

__device__ __forceinline__ int64_t pool_divisor(int64_t start, int64_t k, int64_t size, int64_t pad) {
  return min(start + k, size + pad) - start;
}

template <class S, class T = acc_t<S>>
__global__ void avg_pool_k(Geom g, const S* x, S* y) {
  const int64_t n = g.planes * g.Ho * g.Wo;
  for (int64_t t = global_index(); t < n; t += grid_stride()) {
    const int64_t pl = t / (g.Ho * g.Wo), oh = (t / g.Wo) % g.Ho, ow = t % g.Wo;
    const S* xs = x + pl * g.H * g.W;
    const int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
    const int64_t hd = pool_divisor(hs, g.kh, g.H, g.ph), wd = pool_divisor(ws, g.kw, g.W, g.pw);
    const int64_t h0 = max(hs, int64_t(0)), h1 = min(hs + g.kh, g.H);
    const int64_t w0 = max(ws, int64_t(0)), w1 = min(ws + g.kw, g.W);
    T s = 0;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) s += ld(xs[h * g.W + w]);
    y[t] = st<S>(s / T(hd * wd));
  }
}

// dx[h, w] = sum over the outputs whose window holds (h, w) of dy / divisor.
template <class S, class T = acc_t<S>>
__global__ void avg_pool_bwd_k(Geom g, const S* dy, S* dx) {
  const int64_t n = g.planes * g.H * g.W;
  for (int64_t t = global_index(); t < n; t += grid_stride()) {
    const int64_t pl = t / (g.H * g.W), h = (t / g.W) % g.H, w = t % g.W;
    const S* gs = dy + pl * g.Ho * g.Wo;
    // outputs oh with oh*sh - ph <= h < oh*sh - ph + kh
    const int64_t oh0 = max(int64_t(0), (h + g.ph - g.kh + g.sh) / g.sh), oh1 = min(g.Ho - 1, (h + g.ph) / g.sh);
    const int64_t ow0 = max(int64_t(0), (w + g.pw - g.kw + g.sw) / g.sw), ow1 = min(g.Wo - 1, (w + g.pw) / g.sw);
    T s = 0;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      const int64_t hs = oh * g.sh - g.ph;
      if (h < hs || h >= hs + g.kh) continue;
      const int64_t hd = pool_divisor(hs, g.kh, g.H, g.ph);
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t ws = ow * g.sw - g.pw;
        if (w < ws || w >= ws + g.kw) continue;
        s += ld(gs[oh * g.Wo + ow]) / T(hd * pool_divisor(ws, g.kw, g.W, g.pw));
      }
    }
    dx[t] = st<S>(s);
  }
}

}  // namespace

void max_pool2d_kernel(const Tensor& x, Tensor& y, Tensor& idx, const ops::Pool2dParams& p) {
  if (y.numel() == 0) return;
  OpContext ctx(y);
  const Geom g = geom(x, y, p);
  STRATA_DISPATCH_FLOAT16(x.dtype(), "max_pool2d", [&] {
    max_pool_k<<<grid_for(y.numel()), kThreads, 0, ctx.stream>>>(g, dptr<scalar_t>(x), dptr<scalar_t>(y),
                                                                 dptr<int64_t>(idx));
  });
  STRATA_CUDA_CHECK_LAUNCH("max_pool2d");
}

void max_pool2d_backward_kernel(const Tensor& dy, const Tensor& idx, Tensor& dx) {
  if (dx.numel() == 0) return;
  OpContext ctx(dx);
  const int64_t planes = dx.size(0) * dx.size(1);
  STRATA_DISPATCH_FLOAT16(dy.dtype(), "max_pool2d_backward", [&] {
    using A = acc_t<scalar_t>;
    Tensor acc = kIs16<scalar_t> ? Tensor::empty(dx.shape(), DType::f32, dx.device()) : dx;
    STRATA_CUDA_CHECK(cudaMemsetAsync(acc.raw_data(), 0, size_t(acc.nbytes()), ctx.stream), "max_pool2d_backward");
    if (dy.numel() > 0) {
      max_pool_bwd_k<<<grid_for(dy.numel()), kThreads, 0, ctx.stream>>>(
          planes, dx.size(2) * dx.size(3), dy.size(2) * dy.size(3), dptr<scalar_t>(dy), dptr<int64_t>(idx),
          dptr<A>(acc));
      STRATA_CUDA_CHECK_LAUNCH("max_pool2d_backward");
    }
    if constexpr (kIs16<scalar_t>) copy_kernel(dx, acc);  // round to nearest even
  });
}

void avg_pool2d_kernel(const Tensor& x, Tensor& y, const ops::Pool2dParams& p) {
  if (y.numel() == 0) return;
  OpContext ctx(y);
  const Geom g = geom(x, y, p);
  STRATA_DISPATCH_FLOAT16(x.dtype(), "avg_pool2d", [&] {
    avg_pool_k<<<grid_for(y.numel()), kThreads, 0, ctx.stream>>>(g, dptr<scalar_t>(x), dptr<scalar_t>(y));
  });
  STRATA_CUDA_CHECK_LAUNCH("avg_pool2d");
}

void avg_pool2d_backward_kernel(const Tensor& dy, Tensor& dx, const ops::Pool2dParams& p) {
  if (dx.numel() == 0) return;
  OpContext ctx(dx);
  const Geom g = geom(dx, dy, p);
  STRATA_DISPATCH_FLOAT16(dy.dtype(), "avg_pool2d_backward", [&] {
    avg_pool_bwd_k<<<grid_for(dx.numel()), kThreads, 0, ctx.stream>>>(g, dptr<scalar_t>(dy), dptr<scalar_t>(dx));
  });
  STRATA_CUDA_CHECK_LAUNCH("avg_pool2d_backward");
}

}  // namespace strata::cuda
