// CUDA kernels of the Llama family's rotary embedding and SwiGLU, the twins of
// tensor/cpu/rotary.cpp and swiglu.cpp: the rotary's (T, hd/2) cos/sin table in f64 first
// (angles of large positions keep their digits), then one thread per rotated pair; SwiGLU
// one thread per element. f32, f64, and f16/bf16 (16-bit model states) computed in f32
// with the cos/sin table in f32, as the CPU (widen.h).
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/cuda/op_math.h>
#include <strata/tensor/cuda/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cuda {
namespace {

template <class T>
__global__ void rotary_table_k(int64_t T_, int64_t half, const int64_t* pos, const double* inv_freq, double sign,
                               T* cos_t, T* sin_t) {
  for (int64_t k = global_index(); k < T_ * half; k += grid_stride()) {
    const double a = double(pos[k / half]) * inv_freq[k % half];
    cos_t[k] = T(::cos(a));
    sin_t[k] = T(sign * ::sin(a));
  }
}

// x, y (B, T, H, hd) of storage S; pair (i, i + hd/2) of row (b, t, h) turns by the
// table's angle (t, i) (table in A = acc_t<S>) for h < rotated, and is copied for the
// other heads.
template <class S, class A = acc_t<S>>
__global__ void rotary_k(int64_t pairs, int64_t T_, int64_t H, int64_t half, int64_t rotated, const S* x,
                         const A* cos_t, const A* sin_t, S* y) {
  for (int64_t k = global_index(); k < pairs; k += grid_stride()) {
    const int64_t i = k % half, row = k / half;  // row = ((b * T + t) * H + h)
    const int64_t t = (row / H) % T_;
    const int64_t base = row * 2 * half;
    if (row % H >= rotated) {
      y[base + i] = x[base + i];
      y[base + half + i] = x[base + half + i];
      continue;
    }
    const A a = ld(x[base + i]), b = ld(x[base + half + i]);
    const A c = cos_t[t * half + i], s = sin_t[t * half + i];
    y[base + i] = st<S>(a * c - b * s);
    y[base + half + i] = st<S>(b * c + a * s);
  }
}

template <class T>
__device__ __forceinline__ T sigmoid_(T z) {
  return T(1) / (T(1) + math::exp_(-z));
}

template <class S, class A = acc_t<S>>
__global__ void swiglu_k(int64_t n, const S* g, const S* u, S* y) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const A z = ld(g[i]);
    y[i] = st<S>(z * sigmoid_(z) * ld(u[i]));
  }
}

template <class S, class A = acc_t<S>>
__global__ void swiglu_bwd_k(int64_t n, const S* dy, const S* g, const S* u, S* dg, S* du) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const A z = ld(g[i]), d = ld(dy[i]), s = sigmoid_(z);
    dg[i] = st<S>(d * ld(u[i]) * s * (A(1) + z * (A(1) - s)));
    du[i] = st<S>(d * z * s);
  }
}

}  // namespace

void rotary_kernel(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& y, int64_t B, int64_t T,
                   int64_t H, int64_t hd, bool inverse, int64_t rotated) {
  const int64_t half = hd / 2, pairs = B * T * H * half;
  if (pairs == 0) return;
  OpContext ctx(y);
  STRATA_DISPATCH_FLOAT16(x.dtype(), "rotary", [&] {
    using S = scalar_t;
    using A = acc_t<S>;
    const DType adt = dtype_v<A>;
    Tensor cos_t = Tensor::empty({T, half}, adt, y.device()), sin_t = Tensor::empty({T, half}, adt, y.device());
    rotary_table_k<<<grid_for(T * half), kThreads, 0, ctx.stream>>>(T, half, dptr<int64_t>(positions),
                                                                   dptr<double>(inv_freq), inverse ? -1.0 : 1.0,
                                                                   dptr<A>(cos_t), dptr<A>(sin_t));
    STRATA_CUDA_CHECK_LAUNCH("rotary");
    rotary_k<<<grid_for(pairs), kThreads, 0, ctx.stream>>>(pairs, T, H, half, rotated, dptr<S>(x), dptr<A>(cos_t),
                                                          dptr<A>(sin_t), dptr<S>(y));
  });
  STRATA_CUDA_CHECK_LAUNCH("rotary");
}

void swiglu_kernel(const Tensor& g, const Tensor& u, Tensor& y, int64_t n) {
  if (n == 0) return;
  OpContext ctx(y);
  STRATA_DISPATCH_FLOAT16(g.dtype(), "swiglu", [&] {
    swiglu_k<<<grid_for(n), kThreads, 0, ctx.stream>>>(n, dptr<scalar_t>(g), dptr<scalar_t>(u), dptr<scalar_t>(y));
  });
  STRATA_CUDA_CHECK_LAUNCH("swiglu");
}

void swiglu_backward_kernel(const Tensor& dy, const Tensor& g, const Tensor& u, Tensor& dg, Tensor& du, int64_t n) {
  if (n == 0) return;
  OpContext ctx(dg);
  STRATA_DISPATCH_FLOAT16(g.dtype(), "swiglu_backward", [&] {
    swiglu_bwd_k<<<grid_for(n), kThreads, 0, ctx.stream>>>(n, dptr<scalar_t>(dy), dptr<scalar_t>(g), dptr<scalar_t>(u),
                                                          dptr<scalar_t>(dg), dptr<scalar_t>(du));
  });
  STRATA_CUDA_CHECK_LAUNCH("swiglu_backward");
}

}  // namespace strata::cuda
