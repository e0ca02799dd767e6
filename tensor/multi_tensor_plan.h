// Launch plans for multi-tensor kernels: an optimizer step, a gradient norm or a clip over
// every parameter in a few kernel launches instead of one (or several) per tensor.
//
// A launch covers up to `max_tensors` tensors (their addresses travel in the kernel's
// argument block, whose size is bounded) and up to `max_blocks` blocks; block b of a
// launch processes chunk `blocks[b].chunk` (elements [chunk * chunk_size, +chunk_size))
// of tensor `tensors[blocks[b].slot]`. A tensor whose chunks do not fit in one launch
// continues in the next, where it takes slot 0 again. Empty tensors are skipped. The plan
// is a pure function of the sizes (PyTorch's multi_tensor_apply splits the same way), so
// a kernel that reduces per block reduces in the same order every call: deterministic.
// Host-only and header-only: the CUDA kernels and the CPU tests share it.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include <strata/core/error.h>

namespace strata::detail {

struct MultiTensorBlock {
  int slot;       ///< index into the launch's `tensors`
  int64_t chunk;  ///< which chunk of that tensor
};

struct MultiTensorLaunch {
  std::vector<int> tensors;  ///< indices into the caller's tensor list
  std::vector<MultiTensorBlock> blocks;
};

inline std::vector<MultiTensorLaunch> plan_multi_tensor(std::span<const int64_t> numels, int max_tensors,
                                                        int max_blocks, int64_t chunk_size) {
  STRATA_CHECK(max_tensors >= 1 && max_blocks >= 1 && chunk_size >= 1,
               "[plan_multi_tensor] limits must be positive, got max_tensors ", max_tensors, ", max_blocks ",
               max_blocks, ", chunk_size ", chunk_size);
  std::vector<MultiTensorLaunch> plan;
  MultiTensorLaunch cur;
  const auto flush = [&] {
    if (!cur.blocks.empty()) plan.push_back(std::move(cur));
    cur = MultiTensorLaunch{};
  };
  for (int i = 0; i < int(numels.size()); ++i) {
    const int64_t n = numels[size_t(i)];
    STRATA_CHECK(n >= 0, "[plan_multi_tensor] tensor ", i, " has negative size ", n);
    if (n == 0) continue;
    if (int(cur.tensors.size()) == max_tensors) flush();
    cur.tensors.push_back(i);
    const int64_t chunks = (n + chunk_size - 1) / chunk_size;
    for (int64_t c = 0; c < chunks; ++c) {
      if (int(cur.blocks.size()) == max_blocks) {
        flush();
        cur.tensors.push_back(i);  // the tensor continues in the next launch
      }
      cur.blocks.push_back({int(cur.tensors.size()) - 1, c});
    }
  }
  flush();
  return plan;
}

/// Blocks over the whole plan (a reduction's partial sums: one per block).
inline int64_t multi_tensor_blocks(const std::vector<MultiTensorLaunch>& plan) {
  int64_t n = 0;
  for (const auto& l : plan) n += int64_t(l.blocks.size());
  return n;
}

}  // namespace strata::detail
