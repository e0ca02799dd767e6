// Index validation for CUDA kernels that take indices (embedding, cross-entropy targets,
// index_select/gather/scatter): the check runs on the device and the host waits for its
// one-word answer, so an out-of-range index throws the CPU kernel's error instead of
// reading or writing out of bounds. Implemented in index.cu.
#pragma once
#include <cstdint>
#include <optional>

#include <strata/tensor/tensor.h>

namespace strata::cuda {

struct BadIndex {
  int64_t position;  // row-major position in the index tensor
  int64_t value;
};

/// The first element of `idx` (i64 or i32, any strides, on a CUDA device) outside
/// [0, bound) that is not `skip`; nullopt when there is none. Blocks until known.
std::optional<BadIndex> find_bad_index(const Tensor& idx, int64_t bound, std::optional<int64_t> skip, const char* op);

}  // namespace strata::cuda
