// CUDA fused optimizer updates, the twins of tensor/cpu/optim.cpp: the step's scalars
// are folded on the host in double exactly as there, one thread per element.
#include <cmath>

#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/cuda/op_math.h>
#include <strata/tensor/dispatch.h>

namespace strata::cuda {
namespace {

template <class T>
struct AdamScalars {
  T b1, b2, omb1, omb2, step_size, inv_bc2_sqrt, eps, l2, decay;
};

template <class T>
__global__ void adam_k(int64_t n, T* w, const T* g, T* m, T* v, AdamScalars<T> s) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const T gi = g[i] + s.l2 * w[i];
    const T mi = s.b1 * m[i] + s.omb1 * gi;
    const T vi = s.b2 * v[i] + s.omb2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] = w[i] * s.decay - s.step_size * mi / (math::sqrt_(vi) * s.inv_bc2_sqrt + s.eps);
  }
}

template <class T>
__global__ void sgd_k(int64_t n, T* w, const T* g, T* buf, T lr, T wd, T mom, T damp, bool first, bool nesterov) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const T gi = g[i] + wd * w[i];
    if (!buf) {
      w[i] -= lr * gi;
      continue;
    }
    const T bi = first ? gi : mom * buf[i] + damp * gi;
    buf[i] = bi;
    w[i] -= lr * (nesterov ? gi + mom * bi : bi);
  }
}

}  // namespace

void adam_kernel(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const ops::AdamParams& p) {
  const int64_t n = param.numel();
  if (n == 0) return;
  OpContext ctx(param);
  const double bc1 = 1.0 - std::pow(p.beta1, double(p.step));
  const double bc2 = 1.0 - std::pow(p.beta2, double(p.step));
  STRATA_DISPATCH_FLOAT(param.dtype(), "adam_step_", [&] {
    using T = scalar_t;
    const AdamScalars<T> s{T(p.beta1),
                           T(p.beta2),
                           T(1 - p.beta1),
                           T(1 - p.beta2),
                           T(p.lr / bc1),
                           T(1.0 / std::sqrt(bc2)),
                           T(p.eps),
                           p.decoupled ? T(0) : T(p.weight_decay),
                           p.decoupled ? T(1.0 - p.lr * p.weight_decay) : T(1)};
    adam_k<<<grid_for(n), kThreads, 0, ctx.stream>>>(n, dptr<T>(param), dptr<T>(grad), dptr<T>(m), dptr<T>(v), s);
  });
  STRATA_CUDA_CHECK_LAUNCH("adam_step_");
}

void sgd_kernel(Tensor& param, const Tensor& grad, Tensor& buf, const ops::SgdParams& p) {
  const int64_t n = param.numel();
  if (n == 0) return;
  OpContext ctx(param);
  STRATA_DISPATCH_FLOAT(param.dtype(), "sgd_step_", [&] {
    using T = scalar_t;
    sgd_k<<<grid_for(n), kThreads, 0, ctx.stream>>>(n, dptr<T>(param), dptr<T>(grad),
                                                    p.momentum != 0 ? dptr<T>(buf) : nullptr, T(p.lr),
                                                    T(p.weight_decay), T(p.momentum), T(1 - p.dampening),
                                                    p.first_step, p.nesterov);
  });
  STRATA_CUDA_CHECK_LAUNCH("sgd_step_");
}

}  // namespace strata::cuda
