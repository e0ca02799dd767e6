// SwiGLU: one pass over the gate and up projections forward, one backward, each a flat
// vectorised loop (the f32 sigmoid through the clamped polynomial exp of the GELU kernels);
// f32 at x86-64-v4 runs the AVX-512 rows of act_avx512.h.
#include <strata/tensor/cpu/swiglu.h>

#include <algorithm>
#include <type_traits>

#include <strata/tensor/cpu/act_avx512.h>
#include <strata/tensor/cpu/elementwise.h>
#include <strata/tensor/cpu/isa_dispatch.h>
#include <strata/tensor/cpu/prefetch.h>
#include <strata/tensor/cpu/widen.h>

namespace strata::cpu {
namespace {

constexpr int64_t kGrain = 16384;

template <class A>
[[gnu::always_inline]] inline A sigmoid_a(A z) {
  return A(1) / (A(1) + detail::gelu_exp(-z));
}

// Chunks are walked in pieces of kPiece elements, each prefetching the next piece of the
// inputs and outputs (cpu/prefetch.h).
constexpr int64_t kPiece = 1024;

template <class F>
[[gnu::always_inline]] inline void for_pieces(int64_t b, int64_t e, int64_t n, F&& f) {
  for (int64_t s = b; s < e; s += kPiece) f(s, std::min(e, s + kPiece), std::min(kPiece, n - std::min(n, s + kPiece)));
}

template <class T>
bool use_avx512() {
  return std::is_same_v<T, float> && avx512_rows();
}

template <class T, class A = acc_t<T>>
void swiglu_impl(const T* g, const T* u, T* y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (use_avx512<T>()) {
      parallel_for(n, kGrain, [&](int64_t b, int64_t e) { swiglu_row_avx512(g + b, u + b, y + b, e - b); });
      return;
    }
  }
  parallel_for_simd(n, kGrain, [&](int64_t b, int64_t e) {
    for_pieces(b, e, n, [&](int64_t s, int64_t t, int64_t next) {
      prefetch_lines(g + t, next * int64_t(sizeof(T)));
      prefetch_lines(u + t, next * int64_t(sizeof(T)));
      prefetch_lines<true>(y + t, next * int64_t(sizeof(T)));
#pragma omp simd
      for (int64_t i = s; i < t; ++i) {
        const A z = ld(g[i]);
        y[i] = st<T>(z * sigmoid_a(z) * ld(u[i]));
      }
    });
  });
}

template <class T, class A = acc_t<T>>
void swiglu_backward_impl(const T* dy, const T* g, const T* u, T* dg, T* du, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (use_avx512<T>()) {
      parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
        swiglu_grad_row_avx512(dy + b, g + b, u + b, dg + b, du + b, e - b);
      });
      return;
    }
  }
  parallel_for_simd(n, kGrain, [&](int64_t b, int64_t e) {
    for_pieces(b, e, n, [&](int64_t s0, int64_t t, int64_t next) {
      prefetch_lines(g + t, next * int64_t(sizeof(T)));
      prefetch_lines(u + t, next * int64_t(sizeof(T)));
      prefetch_lines(dy + t, next * int64_t(sizeof(T)));
      prefetch_lines<true>(dg + t, next * int64_t(sizeof(T)));
      prefetch_lines<true>(du + t, next * int64_t(sizeof(T)));
#pragma omp simd
      for (int64_t i = s0; i < t; ++i) {
        const A z = ld(g[i]), d = ld(dy[i]), s = sigmoid_a(z);
        dg[i] = st<T>(d * ld(u[i]) * s * (A(1) + z * (A(1) - s)));
        du[i] = st<T>(d * z * s);
      }
    });
  });
}

}  // namespace

void swiglu_kernel(const Tensor& g, const Tensor& u, Tensor& y, int64_t n) {
  if (n == 0) return;
  STRATA_DISPATCH_FLOAT16(g.dtype(), "swiglu", [&] {
    swiglu_impl<scalar_t>(g.data<scalar_t>(), u.data<scalar_t>(), y.data<scalar_t>(), n);
  });
}

void swiglu_backward_kernel(const Tensor& dy, const Tensor& g, const Tensor& u, Tensor& dg, Tensor& du, int64_t n) {
  if (n == 0) return;
  STRATA_DISPATCH_FLOAT16(g.dtype(), "swiglu_backward", [&] {
    swiglu_backward_impl<scalar_t>(dy.data<scalar_t>(), g.data<scalar_t>(), u.data<scalar_t>(), dg.data<scalar_t>(),
                                   du.data<scalar_t>(), n);
  });
}

}  // namespace strata::cpu
