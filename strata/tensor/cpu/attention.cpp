// Fused causal self-attention, one (batch, head) pair per iteration with the pairs
// split over the threads (OpenBLAS single-threaded meanwhile: the GEMMs are T x T x hd,
// far too small to split). Per pair, with S = scale * q k^T and P = causal_softmax(S):
//   forward:  P = softmax_{j<=i}(scale * q k^T),  y = P v
//   backward: dP = dy v^T,  dS = P * (dP - rowsum(dP * P)),
//             dq = scale * dS k,  dk = scale * dS^T q,  dv = P^T dy
#include <strata/tensor/cpu/attention.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <strata/core/threads.h>
#include <strata/tensor/cpu/blocks.h>
#include <strata/tensor/cpu/gemm.h>
#include <strata/tensor/cpu/softmax.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {

struct Dims {
  int64_t B, T, H, hd, C, W;  // C = H*hd (y width), W = 3*C (qkv width)
};

Dims dims_of(const Tensor& qkv, int64_t head_dim) {
  const int64_t W = qkv.size(2), C = W / 3;
  return {qkv.size(0), qkv.size(1), C / head_dim, head_dim, C, W};
}

// Rows of the n x n scores are processed up to m = the end of the 16-element block that
// holds the diagonal (a multiple of the f32 vector width): the loops stay branch-free
// and mostly full-width, and skip the blocks that lie wholly above the diagonal.
constexpr int64_t kRowBlock = 16;
inline int64_t causal_extent(int64_t i, int64_t n) { return std::min(n, (i / kRowBlock + 1) * kRowBlock); }

// Row i: softmax over [0, i], zero after. Entries in (i, m) are set to -inf first, so
// exp gives exactly 0 there without a mask in the loops.
template <class T>
void causal_softmax_rows(T* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T* row = p + i * n;
    const int64_t m = causal_extent(i, n);
    std::fill(row + i + 1, row + m, -std::numeric_limits<T>::infinity());
    std::fill(row + m, row + n, T(0));
    T mx = row[0];
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < m; ++j) mx = row[j] > mx ? row[j] : mx;
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < m; ++j) {
      const T e = vexp(row[j] - mx);  // exp(-inf) = 0 above the diagonal
      row[j] = e;
      s += e;
    }
    const T inv = T(1) / s;
#pragma omp simd
    for (int64_t j = 0; j < m; ++j) row[j] *= inv;
  }
}

// dP (in place) -> dS = P * (dP - rowsum(dP * P)). P is zero above the diagonal, so the
// loops over [0, m) give zeros in (i, m) with no mask; [m, n) is zeroed.
template <class T>
void causal_softmax_backward_rows(const T* p, T* dp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T* pr = p + i * n;
    T* dr = dp + i * n;
    const int64_t m = causal_extent(i, n);
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < m; ++j) s += dr[j] * pr[j];
#pragma omp simd
    for (int64_t j = 0; j < m; ++j) dr[j] = pr[j] * (dr[j] - s);
    std::fill(dr + m, dr + n, T(0));
  }
}

// dst (cols x rows, contiguous) = src^T for src (rows x cols) with row stride ld: the
// k / v head turned around so the score GEMMs run as NN (OpenBLAS's small-matrix NT
// path is ~20% slower at these sizes than a transpose plus NN).
template <class T>
void transpose_head(const T* src, int64_t ld, int64_t rows, int64_t cols, T* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * ld + c];
}

// Prefetches `rows` rows of `cols` elements at row stride ld into the cache. A head's
// q, k, v (and dy) are T rows of hd elements spread over the packed (B, T, 3C) tensor at a
// row stride of 3C: a stride the hardware prefetcher does not follow across pages, so
// without this each (batch, head) pair starts with ~T * 6 cold cache misses, which left
// the per-head GEMMs at ~0.45x of their warm speed in a training step (docs/performance.md,
// "Where a GPT step's time goes"). Issued for the next pair while the current one computes.
// kWrite: rows about to be written (the next pair's output rows, same stride).
template <bool kWrite = false, class T>
inline void prefetch_rows(const T* p, int64_t ld, int64_t rows, int64_t cols) {
  constexpr int64_t kLine = 64 / int64_t(sizeof(T));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; c += kLine) __builtin_prefetch(p + r * ld + c, kWrite ? 1 : 0, 3);
}

template <class T>
void forward_impl(const T* qkv, T* y, T* probs, const Dims& d) {
  const DType dt = dtype_v<T>;
  const double scale = 1.0 / std::sqrt(double(d.hd));
  const int nt = block_threads(d.B * d.H);
  std::vector<T> scratch(size_t(nt) * size_t(d.hd * d.T));  // k^T per thread
  for_blocks(d.B * d.H, nt, [&](int tid, int64_t bh0, int64_t bh1) {
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / d.H, h = bh % d.H;
      const T* q = qkv + b * d.T * d.W + h * d.hd;  // (T, hd), row stride W
      const T* k = q + d.C;
      const T* v = q + 2 * d.C;
      T* p = probs + bh * d.T * d.T;               // (T, T)
      T* yo = y + b * d.T * d.C + h * d.hd;        // (T, hd), row stride C
      T* kt = scratch.data() + tid * d.hd * d.T;   // (hd, T)
      if (bh + 1 < bh1) {  // the next pair's q, k, v: q k v of head h+1 sit hd further on
        const int64_t nb = (bh + 1) / d.H, nh = (bh + 1) % d.H;
        const T* nq = qkv + nb * d.T * d.W + nh * d.hd;
        for (int part = 0; part < 3; ++part) prefetch_rows(nq + part * d.C, d.W, d.T, d.hd);
        prefetch_rows<true>(y + nb * d.T * d.C + nh * d.hd, d.C, d.T, d.hd);
      }
      transpose_head(k, d.W, d.T, d.hd, kt);
      gemm(dt, d.T, d.T, d.hd, scale, {q, d.W, false}, {kt, d.T, false}, 0.0, p, d.T);
      causal_softmax_rows(p, d.T);
      gemm(dt, d.T, d.hd, d.T, 1.0, {p, d.T, false}, {v, d.W, false}, 0.0, yo, d.C);
    }
  });
}

template <class T>
void backward_impl(const T* dy, const T* qkv, const T* probs, T* dqkv, const Dims& d) {
  const DType dt = dtype_v<T>;
  const double scale = 1.0 / std::sqrt(double(d.hd));
  const int nt = block_threads(d.B * d.H);
  const int64_t per_thread = d.T * d.T + d.hd * d.T;                   // dP / dS and v^T
  std::vector<T> scratch(size_t(nt) * size_t(per_thread));
  for_blocks(d.B * d.H, nt, [&](int tid, int64_t bh0, int64_t bh1) {
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / d.H, h = bh % d.H;
      const int64_t at = b * d.T * d.W + h * d.hd;
      const T* q = qkv + at;
      const T* k = q + d.C;
      const T* v = q + 2 * d.C;
      T* dq = dqkv + at;
      T* dk = dq + d.C;
      T* dv = dq + 2 * d.C;
      const T* p = probs + bh * d.T * d.T;
      const T* g = dy + b * d.T * d.C + h * d.hd;  // (T, hd), row stride C
      T* ds = scratch.data() + tid * per_thread;
      T* vt = ds + d.T * d.T;
      if (bh + 1 < bh1) {  // the next pair's q, k, v and dy (its probabilities are contiguous)
        const int64_t nb = (bh + 1) / d.H, nh = (bh + 1) % d.H;
        const T* nq = qkv + nb * d.T * d.W + nh * d.hd;
        for (int part = 0; part < 3; ++part) prefetch_rows(nq + part * d.C, d.W, d.T, d.hd);
        prefetch_rows(dy + nb * d.T * d.C + nh * d.hd, d.C, d.T, d.hd);
        T* nd = dqkv + nb * d.T * d.W + nh * d.hd;
        for (int part = 0; part < 3; ++part) prefetch_rows<true>(nd + part * d.C, d.W, d.T, d.hd);
      }
      transpose_head(v, d.W, d.T, d.hd, vt);
      gemm(dt, d.T, d.T, d.hd, 1.0, {g, d.C, false}, {vt, d.T, false}, 0.0, ds, d.T);  // dP = dy v^T
      causal_softmax_backward_rows(p, ds, d.T);                                       // dS
      gemm(dt, d.T, d.hd, d.T, scale, {ds, d.T, false}, {k, d.W, false}, 0.0, dq, d.W);  // dq = scale dS k
      gemm(dt, d.T, d.hd, d.T, scale, {ds, d.T, true}, {q, d.W, false}, 0.0, dk, d.W);   // dk = scale dS^T q
      gemm(dt, d.T, d.hd, d.T, 1.0, {p, d.T, true}, {g, d.C, false}, 0.0, dv, d.W);      // dv = P^T dy
    }
  });
}

}  // namespace

void causal_attention_kernel(const Tensor& qkv, Tensor& y, Tensor& probs, int64_t head_dim) {
  if (qkv.numel() == 0) return;
  const Dims d = dims_of(qkv, head_dim);
  STRATA_DISPATCH_FLOAT(qkv.dtype(), "causal_attention", [&] {
    forward_impl(qkv.data<scalar_t>(), y.data<scalar_t>(), probs.data<scalar_t>(), d);
  });
}

void causal_attention_backward_kernel(const Tensor& dy, const Tensor& qkv, const Tensor& probs, Tensor& dqkv,
                                      int64_t head_dim) {
  if (qkv.numel() == 0) return;
  const Dims d = dims_of(qkv, head_dim);
  STRATA_DISPATCH_FLOAT(qkv.dtype(), "causal_attention_backward", [&] {
    backward_impl(dy.data<scalar_t>(), qkv.data<scalar_t>(), probs.data<scalar_t>(), dqkv.data<scalar_t>(), d);
  });
}

}  // namespace strata::cpu
