// Strided N-D iteration for CPU kernels. Dimensions that are contiguous in every
// operand are coalesced, so a contiguous tensor becomes one flat inner loop that
// the compiler vectorises; only the outer index is computed per run.
#pragma once
#include <array>
#include <cstdint>

#include <strata/tensor/cpu/isa_dispatch.h>
#include <strata/tensor/tensor.h>

namespace strata::cpu {

/// Iteration plan over `shape` for N operands with element strides.
template <int N>
struct StridedPlan {
  Shape shape;                         // coalesced, innermost last
  std::array<Shape, N> strides;        // per operand, same rank as shape
  int64_t inner() const { return shape.empty() ? 1 : shape.back(); }
  int64_t outer() const {
    int64_t n = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) n *= shape[i];
    return shape.empty() ? 1 : n;
  }
};

template <int N>
StridedPlan<N> make_plan(const Shape& shape, const std::array<Shape, N>& strides) {
  StridedPlan<N> p;
  // drop size-1 dims, then merge dim i into i+1 when every operand is contiguous across them
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!p.shape.empty()) {
      bool merge = true;
      for (int k = 0; k < N; ++k) merge &= p.strides[k].back() == strides[k][d] * shape[d];
      if (merge) {
        p.shape.back() *= shape[d];
        for (int k = 0; k < N; ++k) p.strides[k].back() = strides[k][d];
        continue;
      }
    }
    p.shape.push_back(shape[d]);
    for (int k = 0; k < N; ++k) p.strides[k].push_back(strides[k][d]);
  }
  if (p.shape.empty()) {
    p.shape.push_back(1);
    for (int k = 0; k < N; ++k) p.strides[k].push_back(1);
  }
  return p;
}

/// Calls fn(offsets, n, inner_strides) for each inner run, where offsets[k] is the
/// element offset of operand k at the start of the run. Runs are split over threads
/// when the total is at least `grain` elements (pass a huge grain for serial). With Simd,
/// each chunk of runs is compiled per ISA level and dispatched at run time (isa_dispatch.h).
template <int N, bool Simd = false, class F>
void for_each_run(const StridedPlan<N>& p, F&& fn, int64_t grain = 32768) {
  const int64_t inner = p.inner();
  const int64_t outer = p.outer();
  const int nd = int(p.shape.size());
  std::array<int64_t, N> istr;
  for (int k = 0; k < N; ++k) istr[k] = p.strides[k][nd - 1];
  const int64_t rows_grain = std::max<int64_t>(1, grain / std::max<int64_t>(inner, 1));
  auto chunk = [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      std::array<int64_t, N> off{};
      int64_t rem = r;
      for (int d = nd - 2; d >= 0; --d) {
        const int64_t i = rem % p.shape[d];
        rem /= p.shape[d];
        for (int k = 0; k < N; ++k) off[k] += i * p.strides[k][d];
      }
      fn(off, inner, istr);
    }
  };
  if constexpr (Simd) parallel_for_simd(outer, rows_grain, chunk);
  else parallel_for(outer, rows_grain, chunk);
}

/// Strides of t broadcast to `shape` (0 on broadcast dims, leading dims added).
inline Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  Shape s(shape.size(), 0);
  const int64_t lead = int64_t(shape.size()) - t.dim();
  for (int64_t i = 0; i < t.dim(); ++i) s[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return s;
}

}  // namespace strata::cpu
