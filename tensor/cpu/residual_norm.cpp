// Residual add + LayerNorm in one pass per row (llm.c's fused_residual_forward). Forward:
// the row of s = r + (y + b) is written over y and, still in L1, normalised: the separate
// ops read s back from memory once more. Backward: the gradient s receives is that of the
// LayerNorm plus what s's other consumers (the next residual add) sent; one pass writes
// their sum, where layer_norm_backward followed by the engine's add would write dx and
// read it back. The residual loop is bias_act.cpp's and the LayerNorm loops are norm.cpp's
// own (norm_rows.h), so the results equal the separate ops' bit for bit (the tests compare
// them), dw / db partials in the same blocks, summed in block order.
#include <strata/tensor/cpu/residual_norm.h>

#include <algorithm>

#include <strata/tensor/cpu/isa_dispatch.h>
#include <strata/tensor/cpu/norm.h>
#include <strata/tensor/cpu/norm_rows.h>
#include <strata/tensor/cpu/prefetch.h>
#include <strata/tensor/cpu/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {


// T storage, A = acc_t<T> arithmetic (f16/bf16 widened in registers, statistics in f32).
template <class T, class A = acc_t<T>>
void forward_impl(T* y, const T* b, const T* r, const T* w, const T* lb, T* z, A* mean, A* rstd, int64_t rows,
                  int64_t C, double eps) {
  const bool avx512 = norm_rows::use_avx512<T>();
  parallel_for_simd(rows, std::max<int64_t>(1, 8192 / C), [&](int64_t r0, int64_t r1) {
    // blocks of a few rows: each row's s, then the block's LayerNorm (its rows' statistics
    // overlap: norm_avx512.cpp's forward_rows)
    constexpr int64_t kRows = 4;
    for (int64_t i0 = r0; i0 < r1; i0 += kRows) {
      const int64_t i1 = std::min(r1, i0 + kRows);
      for (int64_t i = i0; i < i1; ++i) {
        T* xr = y + i * C;  // (C): y in, s out
        const T* rr = r + i * C;
        prefetch_row_ahead(y, i, rows, C);
        prefetch_row_ahead(r, i, rows, C);
        prefetch_row_ahead<true>(z, i, rows, C);
        // s = r + (y + b), rounded to T (bias_act.cpp's residual_impl)
        if (b) {
#pragma omp simd
          for (int64_t j = 0; j < C; ++j) xr[j] = st<T>(ld(rr[j]) + A(ld(xr[j]) + ld(b[j])));
        } else {
#pragma omp simd
          for (int64_t j = 0; j < C; ++j) xr[j] = st<T>(ld(rr[j]) + ld(xr[j]));
        }
      }
      // layer_norm(s) on the rows just written (norm.cpp's row loops)
      if constexpr (std::is_same_v<T, float>) {
        if (avx512) {
          layer_norm_rows_avx512(y + i0 * C, w, lb, z + i0 * C, mean + i0, rstd + i0, i1 - i0, C, float(eps));
          continue;
        }
      }
      for (int64_t i = i0; i < i1; ++i)
        norm_rows::layer_norm_row(static_cast<const T*>(y + i * C), w, lb, z + i * C, mean[i], rstd[i], C, eps);
    }
  });
}

}  // namespace

void bias_residual_layer_norm_kernel(Tensor& y, const Tensor& b, const Tensor& r, const Tensor& w, const Tensor& lb,
                                     Tensor& z, Tensor& mean, Tensor& rstd, int64_t rows, int64_t C, double eps) {
  if (rows == 0 || C == 0) return;
  STRATA_DISPATCH_FLOAT16(y.dtype(), "bias_residual_layer_norm_", [&] {
    using A = acc_t<scalar_t>;
    forward_impl<scalar_t>(y.data<scalar_t>(), b.data_or_null<scalar_t>(), r.data<scalar_t>(),
                           w.data_or_null<scalar_t>(), lb.data_or_null<scalar_t>(), z.data<scalar_t>(), mean.data<A>(),
                           rstd.data<A>(), rows, C, eps);
  });
}

void layer_norm_backward_add_kernel(const Tensor& dz, const Tensor& s, const Tensor& mean, const Tensor& rstd,
                                    const Tensor& w, const Tensor& g, Tensor& ds, Tensor& dw, Tensor& db,
                                    int64_t rows, int64_t C) {
  layer_norm_backward_into("layer_norm_backward_add", dz, s, mean, rstd, w, g, ds, dw, db, rows, C);
}

}  // namespace strata::cpu
