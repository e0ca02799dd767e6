// Fused optimizer updates: per-element math with the step's scalars folded
// in advance, chunks of elements in parallel.
#include <strata/tensor/cpu/optim.h>

#include <cmath>

#include <strata/tensor/cpu/clones.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {

template <class T>
void adam_impl(T* w, const T* g, T* m, T* v, int64_t n, const ops::AdamParams& p) {
  const double bc1 = 1.0 - std::pow(p.beta1, double(p.step));
  const double bc2 = 1.0 - std::pow(p.beta2, double(p.step));
  const T b1 = T(p.beta1), b2 = T(p.beta2), omb1 = T(1 - p.beta1), omb2 = T(1 - p.beta2);
  const T step_size = T(p.lr / bc1), inv_bc2_sqrt = T(1.0 / std::sqrt(bc2)), eps = T(p.eps);
  const T l2 = p.decoupled ? T(0) : T(p.weight_decay);                 // Adam: g += wd * w
  const T decay = p.decoupled ? T(1.0 - p.lr * p.weight_decay) : T(1);  // AdamW: w *= 1 - lr * wd
  parallel_for_simd(n, 32768, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const T gi = g[i] + l2 * w[i];
      const T mi = b1 * m[i] + omb1 * gi;
      const T vi = b2 * v[i] + omb2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      w[i] = w[i] * decay - step_size * mi / (std::sqrt(vi) * inv_bc2_sqrt + eps);
    }
  });
}

template <class T>
void sgd_impl(T* w, const T* g, T* buf, int64_t n, const ops::SgdParams& p) {
  const T lr = T(p.lr), wd = T(p.weight_decay), mom = T(p.momentum), damp = T(1 - p.dampening);
  const bool first = p.first_step, nesterov = p.nesterov;
  parallel_for_simd(n, 32768, [&](int64_t b, int64_t e) {
    if (!buf) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) w[i] -= lr * (g[i] + wd * w[i]);
      return;
    }
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const T gi = g[i] + wd * w[i];
      const T bi = first ? gi : mom * buf[i] + damp * gi;  // torch: buf = clone(g) on the first step
      buf[i] = bi;
      w[i] -= lr * (nesterov ? gi + mom * bi : bi);
    }
  });
}

}  // namespace

void adam_kernel(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const ops::AdamParams& p) {
  if (param.numel() == 0) return;
  STRATA_DISPATCH_FLOAT(param.dtype(), "adam_step_", [&] {
    adam_impl<scalar_t>(param.data<scalar_t>(), grad.data<scalar_t>(), m.data<scalar_t>(), v.data<scalar_t>(),
                        param.numel(), p);
  });
}

void sgd_kernel(Tensor& param, const Tensor& grad, Tensor& buf, const ops::SgdParams& p) {
  if (param.numel() == 0) return;
  STRATA_DISPATCH_FLOAT(param.dtype(), "sgd_step_", [&] {
    sgd_impl<scalar_t>(param.data<scalar_t>(), grad.data<scalar_t>(), p.momentum != 0 ? buf.data<scalar_t>() : nullptr,
                       param.numel(), p);
  });
}

}  // namespace strata::cpu
