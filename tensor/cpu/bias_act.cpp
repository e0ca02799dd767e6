// Bias + GELU in one pass over (rows, n), forward and backward. The pre-activation
// h = y + b is never stored: backward recomputes it from y and b (one add per element,
// b stays in L1), which saves the broadcast copy of the bias before the GEMM and, in
// backward, the second read of dh that a separate column sum would make.
#include <strata/tensor/cpu/bias_act.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include <strata/tensor/cpu/isa_dispatch.h>
#include <strata/tensor/cpu/prefetch.h>
#include <strata/tensor/cpu/elementwise.h>
#include <strata/tensor/cpu/act_avx512.h>
#include <strata/tensor/cpu/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {

template <bool Tanh, class A>
[[gnu::always_inline]] inline A gelu_fn(A h) {
  if constexpr (Tanh) return gelu_tanh_of(h);
  else return gelu_erf_of(h);
}
template <bool Tanh, class A>
[[gnu::always_inline]] inline A gelu_grad_fn(A h) {
  if constexpr (Tanh) return gelu_tanh_grad_of(h);
  else return gelu_erf_grad_of(h);
}

// The f32 tanh form at x86-64-v4 runs the intrinsics rows (act_avx512.h), forward and
// backward.
template <class T, bool Tanh>
bool use_avx512() {
  return std::is_same_v<T, float> && Tanh && avx512_rows();
}

template <class T, bool Tanh, class A = acc_t<T>>
void forward_impl(const T* y, const T* b, T* out, int64_t rows, int64_t n) {
  if constexpr (std::is_same_v<T, float> && Tanh) {
    if (use_avx512<T, Tanh>()) {
      parallel_for(rows, std::max<int64_t>(1, 16384 / n), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) gelu_tanh_row_avx512(y + r * n, b, out + r * n, n);
      });
      return;
    }
  }
  parallel_for_simd(rows, std::max<int64_t>(1, 16384 / n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* yr = y + r * n;
      T* o = out + r * n;
      prefetch_row_ahead(y, r, rows, n);
      prefetch_row_ahead<true>(out, r, rows, n);
      if (b) {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) o[j] = st<T>(gelu_fn<Tanh>(A(ld(yr[j]) + ld(b[j]))));
      } else {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) o[j] = st<T>(gelu_fn<Tanh>(ld(yr[j])));
      }
    }
  });
}

// Rows in blocks whose size depends only on the row count (as layer_norm_backward): each
// block sums its db partial, the partials are added in block order afterwards.
constexpr int64_t kMinRowBlock = 32, kMaxBlocks = 256;

// db = the blocks' partials (blocks, n) added in block order (null db: nothing).
template <class T, class A>
void sum_partials(std::vector<A>& part, T* db, int64_t blocks, int64_t n) {
  if (!db) return;
  for (int64_t blk = 1; blk < blocks; ++blk) {
    const A* p = part.data() + blk * n;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) part[size_t(j)] += p[j];
  }
  for (int64_t j = 0; j < n; ++j) db[j] = st<T>(blocks > 0 ? part[size_t(j)] : A(0));
}

template <class T, bool Tanh, class A = acc_t<T>>
void backward_impl(const T* g, const T* y, const T* b, T* dh, T* db, int64_t rows, int64_t n) {
  const int64_t block = std::max(kMinRowBlock, (rows + kMaxBlocks - 1) / kMaxBlocks);
  const int64_t blocks = (rows + block - 1) / block;
  std::vector<A> part(db ? size_t(blocks * n) : 0, A(0));
  const int64_t grain = std::max<int64_t>(1, 16384 / (block * n));
  if constexpr (std::is_same_v<T, float> && Tanh) {
    if (use_avx512<T, Tanh>()) {
      parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
        for (int64_t blk = b0; blk < b1; ++blk) {
          const int64_t r0 = blk * block, r1 = std::min(rows, r0 + block);
          float* p = db ? part.data() + blk * n : nullptr;
          for (int64_t r = r0; r < r1; ++r) gelu_tanh_grad_row_avx512(g + r * n, y + r * n, b, dh + r * n, p, n);
        }
      });
      sum_partials(part, db, blocks, n);
      return;
    }
  }
  parallel_for_simd(blocks, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t r0 = blk * block, r1 = std::min(rows, r0 + block);
      A* p = db ? part.data() + blk * n : nullptr;
      for (int64_t r = r0; r < r1; ++r) {
        const T* gr = g + r * n;
        const T* yr = y + r * n;
        T* d = dh + r * n;
        prefetch_row_ahead(g, r, rows, n);
        prefetch_row_ahead(y, r, rows, n);
        prefetch_row_ahead<true>(dh, r, rows, n);
        if (b && p) {
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) {
            const A v = ld(gr[j]) * gelu_grad_fn<Tanh>(A(ld(yr[j]) + ld(b[j])));
            d[j] = st<T>(v);
            p[j] += v;
          }
        } else if (b) {
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) d[j] = st<T>(ld(gr[j]) * gelu_grad_fn<Tanh>(A(ld(yr[j]) + ld(b[j]))));
        } else {
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) d[j] = st<T>(ld(gr[j]) * gelu_grad_fn<Tanh>(ld(yr[j])));
        }
      }
    }
  });
  sum_partials(part, db, blocks, n);
}

template <class T, class A = acc_t<T>>
void residual_impl(T* y, const T* b, const T* r, int64_t rows, int64_t n) {
  parallel_for_simd(rows, std::max<int64_t>(1, 16384 / n), [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      T* yr = y + i * n;
      const T* rr = r + i * n;
      prefetch_row_ahead(r, i, rows, n);
      if (b) {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) yr[j] = st<T>(ld(rr[j]) + A(ld(yr[j]) + ld(b[j])));
      } else {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) yr[j] = st<T>(ld(rr[j]) + ld(yr[j]));
      }
    }
  });
}


}  // namespace

void bias_gelu_kernel(const Tensor& y, const Tensor& b, Tensor& out, bool tanh_approx) {
  const int64_t n = y.size(-1), rows = n > 0 ? y.numel() / n : 0;
  if (rows == 0 || n == 0) return;
  STRATA_DISPATCH_FLOAT16(y.dtype(), "bias_gelu", [&] {
    const scalar_t* bp = b.data_or_null<scalar_t>();
    if (tanh_approx) forward_impl<scalar_t, true>(y.data<scalar_t>(), bp, out.data<scalar_t>(), rows, n);
    else forward_impl<scalar_t, false>(y.data<scalar_t>(), bp, out.data<scalar_t>(), rows, n);
  });
}

void bias_gelu_backward_kernel(const Tensor& dout, const Tensor& y, const Tensor& b, Tensor& dh, Tensor& db,
                               bool tanh_approx) {
  const int64_t n = y.size(-1), rows = n > 0 ? y.numel() / n : 0;
  STRATA_DISPATCH_FLOAT16(y.dtype(), "bias_gelu_backward", [&] {
    scalar_t* dbp = db.data_or_null<scalar_t>();
    if (n == 0) return;
    if (tanh_approx)
      backward_impl<scalar_t, true>(dout.data<scalar_t>(), y.data<scalar_t>(), b.data_or_null<scalar_t>(),
                                    dh.data<scalar_t>(), dbp, rows, n);
    else
      backward_impl<scalar_t, false>(dout.data<scalar_t>(), y.data<scalar_t>(), b.data_or_null<scalar_t>(),
                                     dh.data<scalar_t>(), dbp, rows, n);
  });
}

void bias_residual_kernel(Tensor& y, const Tensor& b, const Tensor& r) {
  const int64_t n = y.size(-1), rows = n > 0 ? y.numel() / n : 0;
  if (rows == 0 || n == 0) return;
  STRATA_DISPATCH_FLOAT16(y.dtype(), "bias_residual", [&] {
    residual_impl<scalar_t>(y.data<scalar_t>(), b.data_or_null<scalar_t>(), r.data<scalar_t>(), rows, n);
  });
}

}  // namespace strata::cpu
