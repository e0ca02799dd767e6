// The LayerNorm row loops shared by layer_norm (norm.cpp) and the residual add fused with
// it (residual_norm.cpp), so that both give the same bits. T is the storage type, A =
// acc_t<T> the arithmetic and statistics type: f16/bf16 rows are widened element by element
// in registers, mean and rstd are f32. Called inside parallel_for_simd's chunks (compiled
// for every SIMD level there). f32 rows at x86-64-v4 run the AVX-512 twins of the row loops
// (norm_avx512.h) instead, chosen once per call (use_avx512) so that every caller of a row
// loop takes the same one and the fused and separate ops keep equal bits.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <strata/tensor/cpu/act_avx512.h>
#include <strata/tensor/cpu/isa_dispatch.h>
#include <strata/tensor/cpu/norm_avx512.h>
#include <strata/tensor/cpu/prefetch.h>
#include <strata/tensor/cpu/widen.h>

namespace strata::cpu::norm_rows {

/// dx = pending + tmp over one row of C: the normalisation's dx rounded into the row
/// scratch tmp first, so that the add reads it back from memory and is not contracted with
/// dx's last multiply into an FMA: bit for bit the dx added to pending as the engine's add_
/// would (dx may be pending itself: each element is read before it is overwritten).
template <class T>
[[gnu::always_inline]] inline void add_pending_row(const T* pending, const T* tmp, T* dx, int64_t C) {
#pragma omp simd
  for (int64_t i = 0; i < C; ++i) dx[i] = st<T>(ld(pending[i]) + ld(tmp[i]));
}

/// Whether T's rows run the AVX-512 row loops (f32 at SIMD level x86-64-v4).
template <class T>
bool use_avx512() {
  if constexpr (std::is_same_v<T, float>)
    return avx512_rows();
  else
    return false;
}

/// yr = layer_norm(xr) over C elements, its mean and rstd returned.
template <class T, class A = acc_t<T>>
[[gnu::always_inline]] inline void layer_norm_row(const T* xr, const T* w, const T* b, T* yr, A& mean, A& rstd,
                                                  int64_t C, double eps) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < C; ++i) s += ld(xr[i]);
  const A mu = s / A(C);
  A v = 0;
#pragma omp simd reduction(+ : v)
  for (int64_t i = 0; i < C; ++i) v += (ld(xr[i]) - mu) * (ld(xr[i]) - mu);
  const A rs = A(1) / std::sqrt(v / A(C) + A(eps));
  mean = mu;
  rstd = rs;
  if (w && b) {
#pragma omp simd
    for (int64_t i = 0; i < C; ++i) yr[i] = st<T>((ld(xr[i]) - mu) * rs * ld(w[i]) + ld(b[i]));
  } else if (w) {
#pragma omp simd
    for (int64_t i = 0; i < C; ++i) yr[i] = st<T>((ld(xr[i]) - mu) * rs * ld(w[i]));
  } else {
#pragma omp simd
    for (int64_t i = 0; i < C; ++i) yr[i] = st<T>((ld(xr[i]) - mu) * rs + (b ? ld(b[i]) : A(0)));
  }
}

/// One block of rows of the layer norm backward, in one pass per row:
///   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * w,  xhat = (x - mean) * rstd
/// and, when dwp/dbp are given, this block's column sums dw += dy * xhat, db += dy (in A).
/// With `pending` (rows, C) the gradient x already received from its other consumers, dx goes
/// through the row scratch tmp (C) and is added to it (add_pending_row).
template <class T, bool kHasW, class A = acc_t<T>>
[[gnu::always_inline]] inline void layer_norm_backward_rows(const T* dy, const T* x, const A* mean, const A* rstd,
                                                            const T* w, T* dx, A* dwp, A* dbp, int64_t r0,
                                                            int64_t r1, int64_t C, const T* pending, T* tmp) {
  const A inv_c = A(1) / A(C);
  for (int64_t r = r0; r < r1; ++r) {
    const T* gr = dy + r * C;
    const T* xr = x + r * C;
    T* dxr = dx + r * C;
    prefetch_row_ahead(dy, r, r1, C);
    prefetch_row_ahead(x, r, r1, C);
    if (pending) prefetch_row_ahead(pending, r, r1, C);
    const A mu = mean[r], rs = rstd[r];
    A sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
    for (int64_t i = 0; i < C; ++i) {
      const A g = kHasW ? ld(gr[i]) * ld(w[i]) : ld(gr[i]);
      sg += g;
      sgx += g * ((ld(xr[i]) - mu) * rs);
    }
    sg *= inv_c;
    sgx *= inv_c;
    T* out = pending ? tmp : dxr;
#pragma omp simd
    for (int64_t i = 0; i < C; ++i) {
      const A g = kHasW ? ld(gr[i]) * ld(w[i]) : ld(gr[i]);
      out[i] = st<T>(rs * (g - sg - (ld(xr[i]) - mu) * rs * sgx));
    }
    if (pending) add_pending_row(pending + r * C, tmp, dxr, C);
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

/// Rows in blocks (in parallel) whose size depends only on the row count: at least
/// kMinRowBlock rows, at most kMaxBlocks blocks (bounding the partials' memory). Each block
/// writes its own dw/db partial sums, added up in block order afterwards (reduce_partials),
/// so the result does not depend on the thread count and dy and x are read once.
inline constexpr int64_t kMinRowBlock = 32, kMaxBlocks = 256;
struct RowBlocks {
  int64_t block, blocks;
  explicit RowBlocks(int64_t rows)
      : block(std::max(kMinRowBlock, (rows + kMaxBlocks - 1) / kMaxBlocks)), blocks((rows + block - 1) / block) {}
  /// Blocks per parallel chunk for rows of C elements (~8192 elements a chunk).
  int64_t grain(int64_t C) const { return std::max<int64_t>(1, 8192 / (block * std::max<int64_t>(C, 1))); }
};

/// out (C) = the blocks' partials (blocks x C) added in block order, rounded to T.
template <class A, class T>
void reduce_partials(std::vector<A>& part, int64_t blocks, int64_t C, T* out) {
  for (int64_t blk = 1; blk < blocks; ++blk) {
    const A* p = part.data() + blk * C;
#pragma omp simd
    for (int64_t i = 0; i < C; ++i) part[size_t(i)] += p[i];
  }
  for (int64_t i = 0; i < C; ++i) out[i] = st<T>(part[size_t(i)]);
}

/// The whole backward over (rows, C): dx (plus `pending` when given, see
/// layer_norm_backward_rows), and dw, db (C) when not null.
template <class T, class A = acc_t<T>>
void layer_norm_backward(const T* dy, const T* x, const A* mean, const A* rstd, const T* w, T* dx, T* dw, T* db,
                         int64_t rows, int64_t C, const T* pending = nullptr) {
  const RowBlocks rb(rows);
  const int64_t block = rb.block, blocks = rb.blocks;
  std::vector<A> part_w(dw ? size_t(blocks * C) : 0, A(0)), part_b(db ? size_t(blocks * C) : 0, A(0));
  const int64_t grain = rb.grain(C);
  const bool avx512 = use_avx512<T>();
  parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    if constexpr (std::is_same_v<T, float>) {
      if (avx512) {
        for (int64_t blk = b0; blk < b1; ++blk) {
          const int64_t r0 = blk * block, r1 = std::min(rows, r0 + block);
          layer_norm_backward_rows_avx512(dy, x, mean, rstd, w, dx, dw ? part_w.data() + blk * C : nullptr,
                                          db ? part_b.data() + blk * C : nullptr, r0, r1, C, pending);
        }
        return;
      }
    }
    std::vector<T> tmp(pending ? size_t(C) : 0);  // this chunk's row scratch (L1)
    const auto run = [&](int64_t c0, int64_t c1) {
      for (int64_t blk = c0; blk < c1; ++blk) {
        const int64_t r0 = blk * block, r1 = std::min(rows, r0 + block);
        A* pw = dw ? part_w.data() + blk * C : nullptr;
        A* pb = db ? part_b.data() + blk * C : nullptr;
        if (w)
          layer_norm_backward_rows<T, true>(dy, x, mean, rstd, w, dx, pw, pb, r0, r1, C, pending, tmp.data());
        else
          layer_norm_backward_rows<T, false>(dy, x, mean, rstd, w, dx, pw, pb, r0, r1, C, pending, tmp.data());
      }
    };
    simd_call(run, b0, b1);
  });
  if (dw) reduce_partials(part_w, blocks, C, dw);
  if (db) reduce_partials(part_b, blocks, C, db);
}

}  // namespace strata::cpu::norm_rows
