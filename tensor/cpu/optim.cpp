// Fused optimizer updates: per-element math with the step's scalars folded
// in advance, chunks of elements in parallel.
#include <strata/tensor/cpu/optim.h>

#include <cmath>

#include <strata/tensor/cpu/isa_dispatch.h>
#include <strata/tensor/cpu/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {

// T: the weights and state being updated (f32/f64; the f32 master weights in mixed
// precision). G: the gradient's storage (T, or f16/bf16 widened per element). P: when not
// T, the 16-bit parameter written in the same pass, the new weight rounded to nearest even.
template <class T, class G = T, class P = T>
void adam_impl(T* w, const G* g, T* m, T* v, int64_t n, const ops::AdamParams& p, P* out = nullptr) {
  const double bc1 = 1.0 - std::pow(p.beta1, double(p.step));
  const double bc2 = 1.0 - std::pow(p.beta2, double(p.step));
  const T b1 = T(p.beta1), b2 = T(p.beta2), omb1 = T(1 - p.beta1), omb2 = T(1 - p.beta2);
  const T step_size = T(p.lr / bc1), inv_bc2_sqrt = T(1.0 / std::sqrt(bc2)), eps = T(p.eps);
  const T l2 = p.decoupled ? T(0) : T(p.weight_decay);                 // Adam: g += wd * w
  const T decay = p.decoupled ? T(1.0 - p.lr * p.weight_decay) : T(1);  // AdamW: w *= 1 - lr * wd
  parallel_for_simd(n, 32768, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const T gi = T(ld(g[i])) + l2 * w[i];
      const T mi = b1 * m[i] + omb1 * gi;
      const T vi = b2 * v[i] + omb2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      const T wi = w[i] * decay - step_size * mi / (std::sqrt(vi) * inv_bc2_sqrt + eps);
      w[i] = wi;
      if constexpr (kIs16<P>) out[i] = st<P>(wi);
    }
  });
}

// T, G, P as adam_impl.
template <class T, class G = T, class P = T>
void sgd_impl(T* w, const G* g, T* buf, int64_t n, const ops::SgdParams& p, P* out = nullptr) {
  const T lr = T(p.lr), wd = T(p.weight_decay), mom = T(p.momentum), damp = T(1 - p.dampening);
  const bool first = p.first_step, nesterov = p.nesterov;
  parallel_for_simd(n, 32768, [&](int64_t b, int64_t e) {
    if (!buf) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) {
        w[i] -= lr * (T(ld(g[i])) + wd * w[i]);
        if constexpr (kIs16<P>) out[i] = st<P>(w[i]);
      }
      return;
    }
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const T gi = T(ld(g[i])) + wd * w[i];
      const T bi = first ? gi : mom * buf[i] + damp * gi;  // torch: buf = clone(g) on the first step
      buf[i] = bi;
      w[i] -= lr * (nesterov ? gi + mom * bi : bi);
      if constexpr (kIs16<P>) out[i] = st<P>(w[i]);
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

// Calls f(G{}, P{}) with the grad's and the 16-bit parameter's storage types.
template <class F>
void with_mixed_types(const Tensor& grad, const Tensor& param16, const char* op, F&& f) {
  const auto on_param = [&](auto gtag) {
    switch (param16.dtype()) {
      case DType::bf16: return f(gtag, BFloat16{});
      case DType::f16: return f(gtag, Half{});
      default: STRATA_THROW(Error, "[", op, "] param16 must be bf16 or f16, got ", param16.str());
    }
  };
  switch (grad.dtype()) {
    case DType::bf16: return on_param(BFloat16{});
    case DType::f16: return on_param(Half{});
    case DType::f32: return on_param(float{});
    default: STRATA_THROW(Error, "[", op, "] grad must be bf16, f16 or f32, got ", grad.str());
  }
}

void adam_mixed_kernel(Tensor& master, Tensor& param16, const Tensor& grad, Tensor& m, Tensor& v,
                       const ops::AdamParams& p) {
  if (master.numel() == 0) return;
  with_mixed_types(grad, param16, "adam_step_mixed_", [&](auto gtag, auto ptag) {
    using G = decltype(gtag);
    using P = decltype(ptag);
    adam_impl<float, G, P>(master.data<float>(), grad.data<G>(), m.data<float>(), v.data<float>(), master.numel(),
                           p, param16.data<P>());
  });
}

void sgd_mixed_kernel(Tensor& master, Tensor& param16, const Tensor& grad, Tensor& buf, const ops::SgdParams& p) {
  if (master.numel() == 0) return;
  with_mixed_types(grad, param16, "sgd_step_mixed_", [&](auto gtag, auto ptag) {
    using G = decltype(gtag);
    using P = decltype(ptag);
    sgd_impl<float, G, P>(master.data<float>(), grad.data<G>(), p.momentum != 0 ? buf.data<float>() : nullptr,
                          master.numel(), p, param16.data<P>());
  });
}

}  // namespace strata::cpu
