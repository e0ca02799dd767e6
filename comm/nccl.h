// The nccl backend's entry point: ProcessGroups whose collectives run as NCCL kernels
// on CUDA tensors, one process per GPU under `mpirun` (MPI only carries the NCCL
// unique id at start-up). In a build without CUDA/NCCL the entry point throws.
//
// How an op runs (comm/nccl_backend.cpp; the communicator in nccl_comm.*, one launch in
// nccl_launch.*; a build without the backend compiles nccl_unavailable.cpp). The group's
// comm thread takes the op, makes the group's own CUDA stream wait for an event recorded
// on the device's compute stream (cuda::compute_stream), so the collective reads what the
// kernels issued before it wrote; launches it; and records an event on the group's stream. The Work completes
// when that event has completed (polled with cudaEventQuery), so once wait() returns
// the result is in device memory and any later kernel may read it. Each communicator
// has its own stream rather than sharing cuda::comm_stream: two groups' comm threads may
// enqueue in different orders on different ranks, and NCCL kernels of two groups queued
// on one stream would then wait for each other forever.
//
// Failures: communicators are non-blocking (ncclConfig_t.blocking = 0), so every wait
// (init, split, launch, completion, teardown) is a poll bounded by comm.timeout_s. On
// expiry the group fails with a CommError naming op, group, rank and size, the
// communicator is aborted with ncclCommAbort (the stuck kernels exit) and the MPI job
// is torn down at exit. NCCL errors, local or remote (ncclCommGetAsyncError), become
// CommErrors carrying ncclGetErrorString and ncclGetLastError; so do CUDA errors met by
// the backend (the cuda::CudaError text after "[nccl] ").
//
// Semantics that differ from the cpu backends:
//  - Tensors must be on the group's device (ProcessGroup::device(), this rank's GPU):
//    a CPU tensor or one on another GPU is refused on the calling thread before the op is
//    queued. Reductions run in NCCL in the tensor's dtype (f16/bf16 are not widened to
//    f32 as on the cpu backends).
//  - comm.algorithm is ignored: every op is NCCL's own (gather, scatter, all_to_all are
//    grouped ncclSend/ncclRecv). The group's algorithm is pinned to `native`.
//  - send/recv sizes are not checked against each other: a mismatch times out.
#pragma once
#include <memory>

#include <strata/comm/process_group.h>

namespace strata::comm {

/// True when this build has the nccl backend (CUDA and NCCL >= 2.18 at configure time).
bool nccl_available();

/// CUDA devices this process can use for the nccl backend: 0 in a build without it or
/// when no GPU (or no driver) is visible. Never throws.
int nccl_device_count();

/// Creates this rank's world group on the nccl backend. Every rank of the MPI job calls
/// it once (mpi world = nccl world, same ranks); without a launcher it makes a 1-rank
/// world. Rank 0 creates the ncclUniqueId and broadcasts it over MPI (init_mpi_world,
/// which this initialises if needed; MPI stays alive while any nccl group lives).
///
/// device: this rank's CUDA device, or -1 for its local rank on the node
/// (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID or LOCAL_RANK; 0 if none),
/// which must be below the number of visible devices: one GPU per rank.
///
/// Throws strata::Error "strata was built without CUDA/NCCL ..." in a CPU-only build;
/// Error naming the rank when no usable GPU is visible (every rank of the job learns
/// which rank lacked one); CommError when the communicator cannot be created within
/// options.timeout_s. Sub-groups: ProcessGroup::split / new_group (ncclCommSplit).
std::shared_ptr<ProcessGroup> init_nccl_world(const CommOptions& options = {}, int device = -1,
                                              int* argc = nullptr, char*** argv = nullptr);

}  // namespace strata::comm
