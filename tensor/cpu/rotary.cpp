// Rotary embedding: the (T, hd/2) cos/sin table (rope_table, rotary.h), then
// rows (b, t) run in parallel, each head's two halves in one vectorised loop.
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
  const RopeTable<A>& table = rope_table<A>(pos, inv_freq, T_, half, inverse);
  const int64_t row = H * hd;  // one (b, t)
  parallel_for_simd(B * T_, std::max<int64_t>(1, 8192 / row), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      prefetch_row_ahead(x, r, r1, row);
      prefetch_row_ahead<true>(y, r, r1, row);
      const A* c = table.cos.data() + (r % T_) * half;
      const A* s = table.sin.data() + (r % T_) * half;
      for (int64_t h = 0; h < rotated; ++h) {
        const T* x1 = x + r * row + h * hd;
        const T* x2 = x1 + half;
        T* y1 = y + r * row + h * hd;
        T* y2 = y1 + half;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          A u, v;
          rope_turn(ld(x1[i]), ld(x2[i]), c[i], s[i], u, v);
          y1[i] = st<T>(u);
          y2[i] = st<T>(v);
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
