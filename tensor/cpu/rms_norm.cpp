// RMSNorm over rows (in parallel). Its backward reads each row once, writing dx and its row
// block's weight-gradient partial; the partials are summed in block order, so the result
// does not depend on the thread count (norm_rows.h's row blocks, as layer norm's).
#include <strata/tensor/cpu/rms_norm.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <strata/tensor/cpu/isa_dispatch.h>
#include <strata/tensor/cpu/norm_rows.h>
#include <strata/tensor/cpu/prefetch.h>
#include <strata/tensor/cpu/widen.h>

namespace strata::cpu {
namespace {

// T is the storage type, A = acc_t<T> the arithmetic and statistics type.
template <class T, class A = acc_t<T>>
void rms_norm_impl(const T* x, const T* w, T* y, A* rstd, int64_t rows, int64_t C, double eps) {
  parallel_for_simd(rows, std::max<int64_t>(1, 8192 / C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * C;
      T* yr = y + r * C;
      prefetch_row_ahead(x, r, rows, C);
      prefetch_row_ahead<true>(y, r, rows, C);
      A ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < C; ++i) ss += ld(xr[i]) * ld(xr[i]);
      const A rs = A(1) / std::sqrt(ss / A(C) + A(eps));
      rstd[r] = rs;
      if (w) {
#pragma omp simd
        for (int64_t i = 0; i < C; ++i) yr[i] = st<T>(ld(xr[i]) * rs * ld(w[i]));
      } else {
#pragma omp simd
        for (int64_t i = 0; i < C; ++i) yr[i] = st<T>(ld(xr[i]) * rs);
      }
    }
  });
}

// Rows of the backward in blocks of kStatRows: each row's reduction first, then each row's
// outputs (from L1), so that the rows' reduction chains overlap instead of each row's dx
// waiting on its own (as norm_avx512.cpp's LayerNorm rows); each row's arithmetic is the
// one-row form's. (The forward measured slower so: 0.29 -> 0.36 ms in the Llama T64 step.)
constexpr int64_t kStatRows = 4;

// One block of rows of the backward:
//   dx = rstd * (g - xhat * mean(g * xhat)),  g = dy * w,  xhat = x * rstd
// and, when dwp is given, this block's column sums dw += dy * xhat (in A). With `pending`
// (rows, C), the gradient x already received from its other consumers, dx goes through the
// row scratch tmp (C) and is added to it (norm_rows::add_pending_row). kStatRows rows at a
// time: each row's mean(g * xhat), then each row's dx and dw terms.
template <class T, bool kHasW, class A = acc_t<T>>
void rms_norm_backward_rows(const T* dy, const T* x, const A* rstd, const T* w, T* dx, A* dwp, int64_t r0,
                            int64_t r1, int64_t C, const T* pending, T* tmp) {
  const A inv_c = A(1) / A(C);
  A mgx[kStatRows];
  for (int64_t b0 = r0; b0 < r1; b0 += kStatRows) {
    const int64_t b1 = std::min(r1, b0 + kStatRows);
    for (int64_t r = b0; r < b1; ++r) {
      const T* gr = dy + r * C;
      const T* xr = x + r * C;
      prefetch_row_ahead(dy, r, r1, C);
      prefetch_row_ahead(x, r, r1, C);
      const A rs = rstd[r];
      A sgx = 0;
#pragma omp simd reduction(+ : sgx)
      for (int64_t i = 0; i < C; ++i) {
        const A g = kHasW ? ld(gr[i]) * ld(w[i]) : ld(gr[i]);
        sgx += g * (ld(xr[i]) * rs);
      }
      mgx[r - b0] = sgx * inv_c;
    }
    for (int64_t r = b0; r < b1; ++r) {
      const T* gr = dy + r * C;
      const T* xr = x + r * C;
      T* dxr = dx + r * C;
      if (pending) prefetch_row_ahead(pending, r, r1, C);
      prefetch_row_ahead<true>(dx, r, r1, C);
      T* out = pending ? tmp : dxr;
      const A rs = rstd[r], sgx = mgx[r - b0];
#pragma omp simd
      for (int64_t i = 0; i < C; ++i) {
        const A g = kHasW ? ld(gr[i]) * ld(w[i]) : ld(gr[i]);
        out[i] = st<T>(rs * (g - ld(xr[i]) * rs * sgx));
      }
      if (pending) norm_rows::add_pending_row(pending + r * C, tmp, dxr, C);
      if (dwp) {
#pragma omp simd
        for (int64_t i = 0; i < C; ++i) dwp[i] += ld(gr[i]) * (ld(xr[i]) * rs);
      }
    }
  }
}

template <class T, class A = acc_t<T>>
void rms_norm_backward_impl(const T* dy, const T* x, const A* rstd, const T* w, T* dx, T* dw, int64_t rows,
                            int64_t C, const T* pending) {
  const norm_rows::RowBlocks rb(rows);
  std::vector<A> part(dw ? size_t(rb.blocks * C) : 0, A(0));
  parallel_for_simd(rb.blocks, rb.grain(C), [&](int64_t b0, int64_t b1) {
    std::vector<T> tmp(pending ? size_t(C) : 0);  // this chunk's row scratch (L1)
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t r0 = blk * rb.block, r1 = std::min(rows, r0 + rb.block);
      A* pw = dw ? part.data() + blk * C : nullptr;
      if (w)
        rms_norm_backward_rows<T, true>(dy, x, rstd, w, dx, pw, r0, r1, C, pending, tmp.data());
      else
        rms_norm_backward_rows<T, false>(dy, x, rstd, w, dx, pw, r0, r1, C, pending, tmp.data());
    }
  });
  if (dw) norm_rows::reduce_partials(part, rb.blocks, C, dw);
}

}  // namespace

void rms_norm_kernel(const Tensor& x, const Tensor& w, Tensor& y, Tensor& rstd, int64_t rows, int64_t C,
                     double eps) {
  if (rows == 0 || C == 0) return;
  STRATA_DISPATCH_FLOAT16(x.dtype(), "rms_norm", [&] {
    using A = acc_t<scalar_t>;
    rms_norm_impl<scalar_t>(x.data<scalar_t>(), w.data_or_null<scalar_t>(), y.data<scalar_t>(),
                            rstd.data<A>(), rows, C, eps);
  });
}

namespace {
void rms_norm_backward_into(const char* op, const Tensor& dy, const Tensor& x, const Tensor& rstd, const Tensor& w,
                            const Tensor& pending, Tensor& dx, Tensor& dw, int64_t rows, int64_t C) {
  if (C == 0) return;
  STRATA_DISPATCH_FLOAT16(x.dtype(), op, [&] {
    using A = acc_t<scalar_t>;
    scalar_t* dwp = dw.data_or_null<scalar_t>();
    if (rows == 0) {
      if (dwp) std::fill(dwp, dwp + C, st<scalar_t>(0.0f));
      return;
    }
    rms_norm_backward_impl<scalar_t>(dy.data<scalar_t>(), x.data<scalar_t>(), rstd.data<A>(),
                                     w.data_or_null<scalar_t>(), dx.data<scalar_t>(), dwp, rows, C,
                                     pending.data_or_null<scalar_t>());
  });
}
}  // namespace

void rms_norm_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& rstd, const Tensor& w, Tensor& dx,
                              Tensor& dw, int64_t rows, int64_t C) {
  rms_norm_backward_into("rms_norm_backward", dy, x, rstd, w, Tensor(), dx, dw, rows, C);
}

void rms_norm_backward_add_kernel(const Tensor& dy, const Tensor& x, const Tensor& rstd, const Tensor& w,
                                  const Tensor& pending, Tensor& dx, Tensor& dw, int64_t rows, int64_t C) {
  rms_norm_backward_into("rms_norm_backward_add", dy, x, rstd, w, pending, dx, dw, rows, C);
}

}  // namespace strata::cpu
