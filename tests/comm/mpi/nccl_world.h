// What every mpirun test of the nccl backend asks before it creates the nccl world: does
// each rank have a GPU of its own? (tests/comm/mpi/nccl_collectives_test.cpp,
// tests/parallel/mpi/nccl/nccl_parallel_test.cpp; the job reports SKIPPED when not.)
#pragma once
#include <string>

#include <strata/comm/mpi.h>
#include <strata/comm/nccl.h>
#include <strata/tensor/ops.h>

namespace strata::comm::testing {

/// Why this job cannot run on the nccl backend (a build without it, or some rank with
/// no GPU of its own: cuda:local_rank()), or "" when every rank has one. Collective over
/// `mpi`: every rank gets the same answer, so all of them skip together.
inline std::string gpu_shortage(ProcessGroup& mpi) {
  const int have = nccl_device_count();
  Tensor bad = ops::full({1}, have > local_rank() ? -1.0 : double(mpi.rank()), DType::i32);
  mpi.all_reduce(bad, ReduceOp::max).wait();
  const int r = int(bad.item<double>());
  if (!nccl_available()) return "this build has no nccl backend";
  if (r < 0) return "";
  return "rank " + std::to_string(r) + " has no GPU of its own (" + std::to_string(have) + " visible on rank " +
         std::to_string(mpi.rank()) + "'s node, local rank " + std::to_string(local_rank()) + ")";
}

}  // namespace strata::comm::testing
