// The tp regions as LambdaNodes: forward runs the collective (or none), backward the
// conjugate one, on the caller's thread (waits are bounded by comm.timeout_s).
#include "parallel/tp_regions.h"

#include "autograd/functions.h"
#include "autograd/lambda_node.h"

namespace strata::parallel {
namespace {

// In-place all-reduce of a fresh copy of t (t itself is left unchanged).
Tensor summed(const Tensor& t, comm::ProcessGroup& tp) {
  Tensor out = ops::clone(t);
  tp.all_reduce(out).wait();
  return out;
}

}  // namespace

Tensor all_gather_last_dim(const Tensor& x, comm::ProcessGroup& tp) {
  const int n = tp.size();
  if (n == 1) return ops::clone(x);
  Tensor in = x.is_contiguous() ? x : ops::contiguous(x);
  Shape stacked = x.shape();
  stacked.insert(stacked.begin(), int64_t(n));  // (tp, ..., c): block j = rank j's x
  Tensor buf = ops::empty(stacked, x.dtype(), x.device());
  tp.all_gather(in, buf).wait();
  // (tp, d0, ..., dk, c) -> (d0, ..., dk, tp, c) -> (d0, ..., dk, tp * c)
  const int64_t nd = int64_t(stacked.size());
  std::vector<int64_t> perm;
  for (int64_t d = 1; d < nd - 1; ++d) perm.push_back(d);
  perm.push_back(0);
  perm.push_back(nd - 1);
  Shape out = x.shape();
  out.back() *= n;
  return ops::reshape(ops::contiguous(ops::permute(buf, perm)), out);
}

Tensor last_dim_chunk(const Tensor& x, comm::ProcessGroup& tp) {
  const int64_t c = x.size(-1), n = tp.size();
  STRATA_CHECK(c % n == 0, "[tp] the last dimension ", c, " of ", shape_str(x.shape()),
               " does not split into ", n, " tensor-parallel chunks");
  return ops::contiguous(ops::narrow(x, x.dim() - 1, tp.rank() * (c / n), c / n));
}

Tensor copy_to_tp(const Tensor& x, comm::ProcessGroup& tp) {
  if (tp.size() == 1) return x;
  comm::ProcessGroup* g = &tp;
  return record_fn("CopyToTensorParallelBackward", x.detach(), {x},
                   [g](const Tensor& grad) { return std::vector<Tensor>{summed(grad, *g)}; });
}

Tensor reduce_from_tp(const Tensor& x, comm::ProcessGroup& tp) {
  if (tp.size() == 1) return x;
  return record_fn("ReduceFromTensorParallelBackward", summed(x.detach(), tp), {x},
                   [](const Tensor& grad) { return std::vector<Tensor>{grad}; });
}

Tensor scatter_to_tp(const Tensor& x, comm::ProcessGroup& tp) {
  if (tp.size() == 1) return x;
  comm::ProcessGroup* g = &tp;
  return record_fn("ScatterToTensorParallelBackward", last_dim_chunk(x.detach(), tp), {x},
                   [g](const Tensor& grad) { return std::vector<Tensor>{all_gather_last_dim(grad, *g)}; });
}

Tensor gather_from_tp(const Tensor& x, comm::ProcessGroup& tp) {
  if (tp.size() == 1) return x;
  comm::ProcessGroup* g = &tp;
  return record_fn("GatherFromTensorParallelBackward", all_gather_last_dim(x.detach(), tp), {x},
                   [g](const Tensor& grad) { return std::vector<Tensor>{last_dim_chunk(grad, *g)}; });
}

}  // namespace strata::parallel
