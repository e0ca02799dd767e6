// Broadcasting many small tensors (parameters at wrap time, BatchNorm buffers before
// every forward) as one message per dtype instead of one per tensor.
#pragma once
#include <vector>

#include <strata/comm/process_group.h>

namespace strata::parallel {

/// Every tensor becomes root's value on every rank of `group`. Tensors are packed into
/// one flat staging buffer per dtype (MemCategory::comm), broadcast, and unpacked; the
/// call returns once all are done. Collective: every rank passes tensors of the same
/// shapes and dtypes in the same order. Tensors may be non-contiguous views.
void broadcast_coalesced(comm::ProcessGroup& group, const std::vector<Tensor>& tensors, int root = 0);

}  // namespace strata::parallel
