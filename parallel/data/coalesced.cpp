// Packed broadcast of a tensor list (see coalesced.h).
#include <strata/parallel/data/coalesced.h>

#include <strata/core/memory.h>
#include <strata/tensor/ops.h>

namespace strata::parallel {

void broadcast_coalesced(comm::ProcessGroup& group, const std::vector<Tensor>& tensors, int root) {
  if (group.size() == 1 || tensors.empty()) return;
  std::vector<DType> dtypes;
  for (const auto& t : tensors) {
    STRATA_CHECK(t.defined(), "[broadcast_coalesced] an undefined tensor was passed");
    bool seen = false;
    for (DType d : dtypes) seen |= d == t.dtype();
    if (!seen) dtypes.push_back(t.dtype());
  }
  std::vector<Tensor> flats;
  std::vector<comm::Work> works;
  for (DType d : dtypes) {
    int64_t n = 0;
    for (const auto& t : tensors)
      if (t.dtype() == d) n += t.numel();
    Tensor flat;
    {
      MemoryScope scope(MemCategory::comm);
      flat = ops::empty({n}, d, tensors[0].device());
    }
    if (group.rank() == root) {
      int64_t off = 0;
      for (const auto& t : tensors) {
        if (t.dtype() != d) continue;
        Tensor dst = ops::view(ops::narrow(flat, 0, off, t.numel()), t.shape());
        ops::copy_(dst, t);
        off += t.numel();
      }
    }
    works.push_back(group.broadcast(flat, root));
    flats.push_back(flat);
  }
  for (size_t k = 0; k < dtypes.size(); ++k) {
    works[k].wait();
    if (group.rank() == root) continue;
    int64_t off = 0;
    for (const auto& t : tensors) {
      if (t.dtype() != dtypes[k]) continue;
      Tensor dst = t;
      ops::copy_(dst, ops::view(ops::narrow(flats[k], 0, off, t.numel()), t.shape()));
      off += t.numel();
    }
  }
}

}  // namespace strata::parallel
