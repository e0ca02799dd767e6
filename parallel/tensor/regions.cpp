// The tp regions as LambdaNodes: forward runs the collective (or none), backward the
// conjugate one, on the caller's thread (waits are bounded by comm.timeout_s).
#include <strata/parallel/tensor/regions.h>

#include <strata/autograd/functions.h>
#include <strata/autograd/lambda_node.h>

namespace strata::parallel {
namespace {

// In-place all-reduce of a fresh copy of t (t itself is left unchanged).
Tensor summed(const Tensor& t, comm::ProcessGroup& tp) {
  Tensor out = ops::clone(t);
  tp.all_reduce(out).wait();
  return out;
}

}  // namespace

Tensor all_gather_dim(const Tensor& x, int64_t dim, comm::ProcessGroup& tp) {
  const int n = tp.size();
  if (n == 1) return ops::clone(x);
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  Shape stacked = x.shape();
  stacked.insert(stacked.begin(), int64_t(n));  // (tp, ...): block j = rank j's x
  Tensor buf = ops::empty(stacked, x.dtype(), x.device());
  tp.all_gather(ops::contiguous(x), buf).wait();
  // Move the tp axis in front of `dim`: (tp, d0, .., dk, ..) -> (d0, .., tp, dk, ..),
  // one copy, then merge it with dk.
  std::vector<int64_t> perm;
  for (int64_t i = 1; i <= d; ++i) perm.push_back(i);
  perm.push_back(0);
  for (int64_t i = d + 1; i < int64_t(stacked.size()); ++i) perm.push_back(i);
  Shape out = x.shape();
  out[size_t(d)] *= n;
  return ops::reshape(ops::contiguous(ops::permute(buf, perm)), out);
}

Tensor dim_chunk(const Tensor& x, int64_t dim, comm::ProcessGroup& tp) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim, c = x.size(d), n = tp.size();
  STRATA_CHECK(c % n == 0, "[tp] dimension ", d, " (", c, ") of ", shape_str(x.shape()), " does not split into ", n,
               " tensor-parallel chunks");
  return ops::contiguous(ops::narrow(x, d, tp.rank() * (c / n), c / n));
}

Tensor reduce_scatter_dim(const Tensor& x, int64_t dim, comm::ProcessGroup& tp) {
  const int64_t n = tp.size();
  if (n == 1) return ops::clone(x);
  const int64_t d = dim < 0 ? dim + x.dim() : dim, c = x.size(d);
  STRATA_CHECK(c % n == 0, "[tp] dimension ", d, " (", c, ") of ", shape_str(x.shape()), " does not split into ", n,
               " tensor-parallel chunks");
  // (d0, .., dk, ..) viewed as (d0, .., tp, dk/tp, ..) and permuted to (tp, d0, .., dk/tp, ..)
  // (one copy), so that block j is what rank j keeps.
  Shape split = x.shape();
  split[size_t(d)] = c / n;
  split.insert(split.begin() + d, n);
  std::vector<int64_t> perm{d};
  for (int64_t i = 0; i < int64_t(split.size()); ++i)
    if (i != d) perm.push_back(i);
  Tensor blocks = ops::contiguous(ops::permute(ops::reshape(ops::contiguous(x), split), perm));
  Shape out = x.shape();
  out[size_t(d)] = c / n;
  Tensor result = ops::empty(out, x.dtype(), x.device());
  tp.reduce_scatter(blocks, result).wait();
  return result;
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
  return record_fn("ScatterToTensorParallelBackward", dim_chunk(x.detach(), -1, tp), {x},
                   [g](const Tensor& grad) { return std::vector<Tensor>{all_gather_dim(grad, -1, *g)}; });
}

Tensor gather_from_tp(const Tensor& x, comm::ProcessGroup& tp) {
  if (tp.size() == 1) return x;
  comm::ProcessGroup* g = &tp;
  return record_fn("GatherFromTensorParallelBackward", all_gather_dim(x.detach(), -1, tp), {x},
                   [g](const Tensor& grad) { return std::vector<Tensor>{dim_chunk(grad, -1, *g)}; });
}

Tensor all_gather_seq(const Tensor& x, comm::ProcessGroup& tp) {
  if (tp.size() == 1) return x;
  comm::ProcessGroup* g = &tp;
  return record_fn("AllGatherSeqBackward", all_gather_dim(x.detach(), 1, tp), {x},
                   [g](const Tensor& grad) { return std::vector<Tensor>{reduce_scatter_dim(grad, 1, *g)}; });
}

Tensor scatter_to_seq(const Tensor& x, comm::ProcessGroup& tp) {
  if (tp.size() == 1) return x;
  comm::ProcessGroup* g = &tp;
  return record_fn("ScatterToSeqBackward", dim_chunk(x.detach(), 1, tp), {x},
                   [g](const Tensor& grad) { return std::vector<Tensor>{all_gather_dim(grad, 1, *g)}; });
}

Tensor reduce_scatter_seq(const Tensor& x, comm::ProcessGroup& tp) {
  if (tp.size() == 1) return x;
  comm::ProcessGroup* g = &tp;
  return record_fn("ReduceScatterSeqBackward", reduce_scatter_dim(x.detach(), 1, tp), {x},
                   [g](const Tensor& grad) { return std::vector<Tensor>{all_gather_dim(grad, 1, *g)}; });
}

}  // namespace strata::parallel
