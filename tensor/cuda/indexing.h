// Strided N-d index math for CUDA kernels: a linear element index -> the element offset
// of each operand. Built on the host by coalescing dims exactly as the CPU's
// cpu::make_plan does (size-1 dims dropped, dims contiguous in every operand merged),
// evaluated on the device. Host-testable (tests/cuda/host/indexing_test.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <strata/core/error.h>
#include <strata/tensor/cuda/hd.h>

namespace strata::cuda {

/// Most dims an operand may have after coalescing (broadcast/permuted views of up to
/// this many non-mergeable dims).
inline constexpr int kMaxDims = 10;

/// Offsets of N operands over one iteration shape. Trivially copyable: passed to
/// kernels by value.
template <int N>
struct OffsetCalc {
  int ndim = 0;                         // after coalescing; >= 1
  bool contiguous = false;              // ndim == 1 and every operand has stride 1
  bool index32 = false;                 // the shape has < 2^31 elements: 32-bit div/mod
  int64_t sizes[kMaxDims] = {};         // innermost last
  int64_t strides[N][kMaxDims] = {};    // element strides per operand (0 = broadcast)

  /// off[k] = element offset of operand k for row-major linear index i of the shape.
  STRATA_HD void get(int64_t i, int64_t (&off)[N]) const {
STRATA_UNROLL
    for (int k = 0; k < N; ++k) off[k] = 0;
    if (contiguous) {
STRATA_UNROLL
      for (int k = 0; k < N; ++k) off[k] = i;
      return;
    }
    if (index32) {  // a 32-bit division is a few instructions on a GPU, a 64-bit one dozens
      uint32_t j = uint32_t(i);
      for (int d = ndim - 1; d >= 0; --d) {
        const uint32_t sz = uint32_t(sizes[d]);
        const uint32_t c = j % sz;
        j /= sz;
STRATA_UNROLL
        for (int k = 0; k < N; ++k) off[k] += int64_t(c) * strides[k][d];
      }
      return;
    }
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t sz = sizes[d];
      const int64_t c = i % sz;
      i /= sz;
STRATA_UNROLL
      for (int k = 0; k < N; ++k) off[k] += c * strides[k][d];
    }
  }
};

/// Coalesced OffsetCalc for iterating `shape` with N operands' element strides (each
/// of shape.size() entries). Throws when more than kMaxDims dims remain.
template <int N>
OffsetCalc<N> make_offset_calc(const std::vector<int64_t>& shape, const std::array<std::vector<int64_t>, N>& strides,
                               const char* op) {
  for (int k = 0; k < N; ++k)
    STRATA_CHECK(strides[k].size() == shape.size(), "[", op, "] operand ", k, " has ", strides[k].size(),
                 " strides for a ", shape.size(), "-d iteration");
  OffsetCalc<N> c;
  std::vector<int64_t> sz;
  std::array<std::vector<int64_t>, N> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!sz.empty()) {
      bool merge = true;
      for (int k = 0; k < N; ++k) merge = merge && st[k].back() == strides[k][d] * shape[d];
      if (merge) {
        sz.back() *= shape[d];
        for (int k = 0; k < N; ++k) st[k].back() = strides[k][d];
        continue;
      }
    }
    sz.push_back(shape[d]);
    for (int k = 0; k < N; ++k) st[k].push_back(strides[k][d]);
  }
  if (sz.empty()) {
    sz.push_back(1);
    for (int k = 0; k < N; ++k) st[k].push_back(1);
  }
  STRATA_CHECK(int(sz.size()) <= kMaxDims, "[", op, "] iteration over ", sz.size(),
               " non-mergeable dims exceeds the CUDA kernels' limit of ", kMaxDims,
               "; make the operands contiguous first");
  c.ndim = int(sz.size());
  c.contiguous = c.ndim == 1;
  int64_t numel = 1;
  for (int64_t n : sz) numel *= n;
  c.index32 = numel < (int64_t(1) << 31);
  for (int d = 0; d < c.ndim; ++d) {
    c.sizes[d] = sz[size_t(d)];
    for (int k = 0; k < N; ++k) {
      c.strides[k][d] = st[k][size_t(d)];
      if (c.ndim == 1 && st[k][size_t(d)] != 1) c.contiguous = false;
    }
  }
  return c;
}

/// Strides of a tensor of `tshape`/`tstrides` broadcast to `shape` (0 on broadcast and
/// new leading dims), as cpu::broadcast_strides.
inline std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& tshape, const std::vector<int64_t>& tstrides,
                                              const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 0);
  const size_t lead = shape.size() - tshape.size();
  for (size_t i = 0; i < tshape.size(); ++i) s[lead + i] = tshape[i] == 1 ? 0 : tstrides[i];
  return s;
}

}  // namespace strata::cuda
