// Residual add + LayerNorm in one pass per row (llm.c's fused_residual_forward). Forward:
// the row of s = r + (y + b) is written over y and, still in L1, normalised: the separate
// ops read s back from memory once more. Backward: the gradient s receives is that of the
// LayerNorm plus what s's other consumers (the next residual add) sent; one pass writes
// their sum, where layer_norm_backward followed by the engine's add would write dx and
// read it back. The arithmetic is that of bias_act.cpp and norm.cpp, loop for loop, so the
// results equal the separate ops' bit for bit (the tests compare them); the rows' dw / db
// partials use norm.cpp's blocks, summed in block order (thread-count independent).
#include <strata/tensor/cpu/residual_norm.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <strata/tensor/cpu/isa_dispatch.h>
#include <strata/tensor/cpu/prefetch.h>
#include <strata/tensor/cpu/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {

template <class T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
template <class T>
T* mut_ptr_or_null(Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// T storage, A = acc_t<T> arithmetic (f16/bf16 widened in registers, statistics in f32).
template <class T, class A = acc_t<T>>
void forward_impl(T* y, const T* b, const T* r, const T* w, const T* lb, T* z, A* mean, A* rstd, int64_t rows,
                  int64_t C, double eps) {
  parallel_for_simd(rows, std::max<int64_t>(1, 8192 / C), [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      T* xr = y + i * C;  // (C): y in, s out
      const T* rr = r + i * C;
      T* zr = z + i * C;
      prefetch_row_ahead(y, i, rows, C);
      prefetch_row_ahead(r, i, rows, C);
      // s = r + (y + b), rounded to T (bias_act.cpp's residual_impl)
      if (b) {
#pragma omp simd
        for (int64_t j = 0; j < C; ++j) xr[j] = st<T>(ld(rr[j]) + A(ld(xr[j]) + ld(b[j])));
      } else {
#pragma omp simd
        for (int64_t j = 0; j < C; ++j) xr[j] = st<T>(ld(rr[j]) + ld(xr[j]));
      }
      // layer_norm(s) on the row just written (norm.cpp's layer_norm_impl)
      A s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < C; ++j) s += ld(xr[j]);
      const A mu = s / A(C);
      A v = 0;
#pragma omp simd reduction(+ : v)
      for (int64_t j = 0; j < C; ++j) v += (ld(xr[j]) - mu) * (ld(xr[j]) - mu);
      const A rs = A(1) / std::sqrt(v / A(C) + A(eps));
      mean[i] = mu;
      rstd[i] = rs;
      if (w && lb) {
#pragma omp simd
        for (int64_t j = 0; j < C; ++j) zr[j] = st<T>((ld(xr[j]) - mu) * rs * ld(w[j]) + ld(lb[j]));
      } else if (w) {
#pragma omp simd
        for (int64_t j = 0; j < C; ++j) zr[j] = st<T>((ld(xr[j]) - mu) * rs * ld(w[j]));
      } else {
#pragma omp simd
        for (int64_t j = 0; j < C; ++j) zr[j] = st<T>((ld(xr[j]) - mu) * rs + (lb ? ld(lb[j]) : A(0)));
      }
    }
  });
}

// Rows r0..r1 of the backward: norm.cpp's layer_norm_backward_rows, its dx rounded to T
// into the row scratch tmp (C), then ds = tmp + g. The add reads tmp from memory, so the
// compiler cannot contract it with dx's last multiply into an FMA (the separate ops round
// dx first); ds may alias g (each element of g is read before ds overwrites it).
template <class T, bool kHasW, class A = acc_t<T>>
void backward_rows(const T* dy, const T* x, const A* mean, const A* rstd, const T* w, const T* g, T* ds, T* tmp,
                   A* dwp, A* dbp, int64_t r0, int64_t r1, int64_t C) {
  const A inv_c = A(1) / A(C);
  for (int64_t r = r0; r < r1; ++r) {
    const T* gr = dy + r * C;
    const T* xr = x + r * C;
    const T* or_ = g + r * C;
    T* dsr = ds + r * C;
    prefetch_row_ahead(dy, r, r1, C);
    prefetch_row_ahead(x, r, r1, C);
    prefetch_row_ahead(g, r, r1, C);
    const A mu = mean[r], rs = rstd[r];
    A sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
    for (int64_t i = 0; i < C; ++i) {
      const A gi = kHasW ? ld(gr[i]) * ld(w[i]) : ld(gr[i]);
      sg += gi;
      sgx += gi * ((ld(xr[i]) - mu) * rs);
    }
    sg *= inv_c;
    sgx *= inv_c;
#pragma omp simd
    for (int64_t i = 0; i < C; ++i) {
      const A gi = kHasW ? ld(gr[i]) * ld(w[i]) : ld(gr[i]);
      tmp[i] = st<T>(rs * (gi - sg - (ld(xr[i]) - mu) * rs * sgx));
    }
#pragma omp simd
    for (int64_t i = 0; i < C; ++i) dsr[i] = st<T>(ld(or_[i]) + ld(tmp[i]));
    if (dwp) {
#pragma omp simd
      for (int64_t i = 0; i < C; ++i) dwp[i] += ld(gr[i]) * ((ld(xr[i]) - mu) * rs);
    }
    if (dbp) {
#pragma omp simd
      for (int64_t i = 0; i < C; ++i) dbp[i] += ld(gr[i]);
    }
  }
}

// norm.cpp's row blocks: at least 32 rows, at most 256 blocks, partials added in block order.
constexpr int64_t kMinRowBlock = 32, kMaxBlocks = 256;

template <class T, class A = acc_t<T>>
void backward_impl(const T* dy, const T* x, const A* mean, const A* rstd, const T* w, const T* g, T* ds, T* dw,
                   T* db, int64_t rows, int64_t C) {
  const int64_t block = std::max(kMinRowBlock, (rows + kMaxBlocks - 1) / kMaxBlocks);
  const int64_t blocks = (rows + block - 1) / block;
  std::vector<A> part_w(dw ? size_t(blocks * C) : 0, A(0)), part_b(db ? size_t(blocks * C) : 0, A(0));
  const int64_t grain = std::max<int64_t>(1, 8192 / (block * std::max<int64_t>(C, 1)));
  parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    std::vector<T> tmp(static_cast<size_t>(C));  // this chunk's row scratch (L1)
    const auto run = [&](int64_t c0, int64_t c1) {
      for (int64_t blk = c0; blk < c1; ++blk) {
        const int64_t r0 = blk * block, r1 = std::min(rows, r0 + block);
        A* pw = dw ? part_w.data() + blk * C : nullptr;
        A* pb = db ? part_b.data() + blk * C : nullptr;
        if (w)
          backward_rows<T, true>(dy, x, mean, rstd, w, g, ds, tmp.data(), pw, pb, r0, r1, C);
        else
          backward_rows<T, false>(dy, x, mean, rstd, w, g, ds, tmp.data(), pw, pb, r0, r1, C);
      }
    };
    simd_call(run, b0, b1);
  });
  const auto reduce = [&](std::vector<A>& part, T* out) {
    for (int64_t blk = 1; blk < blocks; ++blk) {
      const A* p = part.data() + blk * C;
#pragma omp simd
      for (int64_t i = 0; i < C; ++i) part[size_t(i)] += p[i];
    }
    for (int64_t i = 0; i < C; ++i) out[i] = st<T>(part[size_t(i)]);
  };
  if (dw) reduce(part_w, dw);
  if (db) reduce(part_b, db);
}

}  // namespace

void bias_residual_layer_norm_kernel(Tensor& y, const Tensor& b, const Tensor& r, const Tensor& w, const Tensor& lb,
                                     Tensor& z, Tensor& mean, Tensor& rstd, int64_t rows, int64_t C, double eps) {
  if (rows == 0 || C == 0) return;
  STRATA_DISPATCH_FLOAT16(y.dtype(), "bias_residual_layer_norm_", [&] {
    using A = acc_t<scalar_t>;
    forward_impl<scalar_t>(y.data<scalar_t>(), ptr_or_null<scalar_t>(b), r.data<scalar_t>(),
                           ptr_or_null<scalar_t>(w), ptr_or_null<scalar_t>(lb), z.data<scalar_t>(), mean.data<A>(),
                           rstd.data<A>(), rows, C, eps);
  });
}

void layer_norm_backward_add_kernel(const Tensor& dz, const Tensor& s, const Tensor& mean, const Tensor& rstd,
                                    const Tensor& w, const Tensor& g, Tensor& ds, Tensor& dw, Tensor& db,
                                    int64_t rows, int64_t C) {
  if (C == 0) return;
  STRATA_DISPATCH_FLOAT16(s.dtype(), "layer_norm_backward_add", [&] {
    using A = acc_t<scalar_t>;
    scalar_t* dwp = mut_ptr_or_null<scalar_t>(dw);
    scalar_t* dbp = mut_ptr_or_null<scalar_t>(db);
    if (rows == 0) {
      if (dwp) std::fill(dwp, dwp + C, st<scalar_t>(0.0f));
      if (dbp) std::fill(dbp, dbp + C, st<scalar_t>(0.0f));
      return;
    }
    backward_impl<scalar_t>(dz.data<scalar_t>(), s.data<scalar_t>(), mean.data<A>(), rstd.data<A>(),
                            ptr_or_null<scalar_t>(w), g.data<scalar_t>(), ds.data<scalar_t>(), dwp, dbp, rows, C);
  });
}

}  // namespace strata::cpu
