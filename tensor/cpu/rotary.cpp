// Rotary embedding: the (T, hd/2) cos/sin table is computed once per call in f64 (angles
// of positions up to 10^5 and more keep their digits), then rows (b, t) run in parallel,
// each head's two halves in one vectorised loop.
#include <strata/tensor/cpu/rotary.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <strata/tensor/cpu/isa_dispatch.h>
#include <strata/tensor/cpu/prefetch.h>
#include <strata/tensor/cpu/widen.h>

namespace strata::cpu {
namespace {

template <class T, class A = acc_t<T>>
void rotary_impl(const T* x, const int64_t* pos, const double* inv_freq, T* y, int64_t B, int64_t T_, int64_t H,
                 int64_t hd, bool inverse, int64_t rotated) {
  const int64_t half = hd / 2;
  std::vector<A> cos_t(size_t(T_ * half)), sin_t(size_t(T_ * half));  // (T, hd/2)
  const double sign = inverse ? -1.0 : 1.0;
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double a = double(pos[t]) * inv_freq[i];
      cos_t[size_t(t * half + i)] = A(std::cos(a));
      sin_t[size_t(t * half + i)] = A(sign * std::sin(a));
    }
  const int64_t row = H * hd;  // one (b, t)
  parallel_for_simd(B * T_, std::max<int64_t>(1, 8192 / row), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      prefetch_row_ahead(x, r, r1, row);
      prefetch_row_ahead<true>(y, r, r1, row);
      const A* c = cos_t.data() + (r % T_) * half;
      const A* s = sin_t.data() + (r % T_) * half;
      for (int64_t h = 0; h < rotated; ++h) {
        const T* x1 = x + r * row + h * hd;
        const T* x2 = x1 + half;
        T* y1 = y + r * row + h * hd;
        T* y2 = y1 + half;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const A a = ld(x1[i]), b = ld(x2[i]);
          y1[i] = st<T>(a * c[i] - b * s[i]);
          y2[i] = st<T>(b * c[i] + a * s[i]);
        }
      }
      std::copy(x + r * row + rotated * hd, x + (r + 1) * row, y + r * row + rotated * hd);
    }
  });
}

}  // namespace

void rotary_kernel(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& y, int64_t B, int64_t T,
                   int64_t H, int64_t hd, bool inverse, int64_t rotated) {
  if (B * T * H * hd == 0) return;
  STRATA_DISPATCH_FLOAT16(x.dtype(), "rotary", [&] {
    rotary_impl<scalar_t>(x.data<scalar_t>(), positions.data<int64_t>(), inv_freq.data<double>(), y.data<scalar_t>(),
                          B, T, H, hd, inverse, rotated);
  });
}

}  // namespace strata::cpu
