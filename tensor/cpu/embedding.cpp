// Embedding gather is a parallel row memcpy. The scatter-add runs over column
// blocks (each thread owns a slice of D for every index), so repeated indices never
// race and the sum order does not depend on the thread count.
#include <strata/tensor/cpu/embedding.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <strata/tensor/cpu/isa_dispatch.h>
#include <strata/tensor/cpu/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {

// Calls f with the index data as const int64_t* or const int32_t*.
template <class F>
void with_indices(const Tensor& idx, F&& f) {
  dispatch_index(idx, "embedding", [&](auto tag) { f(idx.data<decltype(tag)>()); });
}

template <class I>
void check_indices(const I* ip, int64_t n, int64_t V) {
  for (int64_t i = 0; i < n; ++i)
    STRATA_CHECK(ip[i] >= 0 && ip[i] < V, "[embedding] index ", int64_t(ip[i]), " at position ", i,
                 " is out of range for ", V, " embeddings");
}

// dw (V,D) = 0; dw[ip[i]] += dy[i]. Threads own column blocks of dw.
template <class T, class I>
void scatter_rows(const T* dy, const I* ip, T* dw, int64_t n, int64_t V, int64_t D) {
  const int64_t grain = std::max<int64_t>(16, 32768 / std::max<int64_t>(n, 1));
  parallel_for_simd(D, grain, [&](int64_t c0, int64_t c1) {
    for (int64_t v = 0; v < V; ++v) std::fill(dw + v * D + c0, dw + v * D + c1, T(0));
    for (int64_t i = 0; i < n; ++i) {
      T* drow = dw + int64_t(ip[i]) * D;
      const T* grow = dy + i * D;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) drow[c] += grow[c];
    }
  });
}

// The same for f16/bf16: each thread sums its column block of dw in an f32 scratch
// (V x block, not the whole table), then rounds it into dw once.
template <class T, class I>
void scatter_rows_16(const T* dy, const I* ip, T* dw, int64_t n, int64_t V, int64_t D) {
  constexpr int64_t kCols = 64;
  const int64_t blocks = (D + kCols - 1) / kCols;
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> acc(size_t(V * kCols));
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t c0 = blk * kCols, w = std::min(kCols, D - c0);
      std::fill(acc.begin(), acc.begin() + V * w, 0.0f);
      for (int64_t i = 0; i < n; ++i) {
        float* arow = acc.data() + int64_t(ip[i]) * w;
        const T* grow = dy + i * D + c0;
#pragma omp simd
        for (int64_t c = 0; c < w; ++c) arow[c] += ld(grow[c]);
      }
      for (int64_t v = 0; v < V; ++v)
        for (int64_t c = 0; c < w; ++c) dw[v * D + c0 + c] = st<T>(acc[size_t(v * w + c)]);
    }
  });
}

}  // namespace

void embedding_kernel(const Tensor& weight, const Tensor& idx, Tensor& out) {
  const int64_t V = weight.size(0), D = weight.size(1), n = idx.numel();
  with_indices(idx, [&](const auto* ip) {
    check_indices(ip, n, V);
    STRATA_DISPATCH_FLOAT16(weight.dtype(), "embedding", [&] {
      const scalar_t* wp = weight.data<scalar_t>();
      scalar_t* op = out.data<scalar_t>();
      parallel_for_simd(n, std::max<int64_t>(1, 16384 / std::max<int64_t>(D, 1)), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          std::memcpy(op + i * D, wp + int64_t(ip[i]) * D, size_t(D) * sizeof(scalar_t));
      });
    });
  });
}

void embedding_backward_kernel(const Tensor& dy, const Tensor& idx, Tensor& dw) {
  const int64_t V = dw.size(0), D = dw.size(1), n = idx.numel();
  with_indices(idx, [&](const auto* ip) {
    check_indices(ip, n, V);
    STRATA_DISPATCH_FLOAT16(dw.dtype(), "embedding_backward", [&] {
      if constexpr (kIs16<scalar_t>)
        scatter_rows_16(dy.data<scalar_t>(), ip, dw.data<scalar_t>(), n, V, D);
      else
        scatter_rows(dy.data<scalar_t>(), ip, dw.data<scalar_t>(), n, V, D);
    });
  });
}

}  // namespace strata::cpu
