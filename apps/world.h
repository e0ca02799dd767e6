// Where a `strata train` run lives: its device (run.device resolved, the local rank's GPU
// under mpirun) and its world group (mpi or nccl under an MPI launcher, one local rank otherwise).
#pragma once
#include <memory>

#include "apps/config.h"
#include <strata/comm/process_group.h>

namespace strata::apps {

/// run.device as a Device: "cuda" under mpirun is the local rank's GPU. ConfigError naming
/// run.device when that GPU is not visible.
Device resolve_device(const RunSection& run);

/// The world group of a run: under an MPI launcher every process is a rank (nccl for CUDA
/// tensors when comm.backend is auto or nccl, else mpi); otherwise a 1-rank local world.
std::shared_ptr<comm::ProcessGroup> init_world(const TrainConfig& cfg, Device device);

}  // namespace strata::apps
