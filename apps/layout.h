// Building the layout `strata train` runs on: the world group (mpi or nccl under mpirun,
// one local rank otherwise), the degrees resolved against it and the model, the mesh, the
// model composed by parallel::parallelize(), this rank's data share, and DataParallel's
// thread replicas when parallel.replicas asks for them.
#pragma once
#include <functional>
#include <memory>

#include "apps/config.h"
#include <strata/comm/process_group.h>
#include <strata/data/dataloader.h>
#include <strata/data/sampler.h>
#include <strata/nn/module.h>
#include <strata/parallel/data/data_parallel.h>
#include <strata/parallel/parallelize.h>

namespace strata::apps {

/// run.device as a Device: "cuda" under mpirun is the local rank's GPU. ConfigError naming
/// run.device when that GPU is not visible.
Device resolve_device(const RunSection& run);

/// The world group of a run: under an MPI launcher every process is a rank (nccl for CUDA
/// tensors when comm.backend is auto or nccl, else mpi); otherwise a 1-rank local world.
std::shared_ptr<comm::ProcessGroup> init_world(const TrainConfig& cfg, Device device);

/// What the config's layout is checked against (parallel::ParallelDims::validate): the
/// model family's limits and sequence splits, and the training setup.
parallel::LayoutChecks layout_checks(const TrainConfig& cfg, int world);

/// parallel.{dp, tp, pp, zero_stage} resolved for `world` ranks and validated against the
/// model and the training setup (layout_checks). ConfigError naming the key.
parallel::ParallelDims resolve_dims(const TrainConfig& cfg, int world);

/// The composed model: the mesh of `dims` over `world`, then parallelize() with the
/// config's DDP/FSDP options, optimizer, loss and thread replicas (replica k > 0 built by
/// build_model with a seed of its own; its weights are replaced by replica 0's before
/// every forward, its dropout stream stays its own). Collective over `world`.
std::unique_ptr<parallel::ParallelModel> build_parallel_model(const TrainConfig& cfg,
                                                              std::shared_ptr<comm::ProcessGroup> world,
                                                              const parallel::ParallelDims& dims,
                                                              std::shared_ptr<nn::Module> model);

/// This rank's training sampler: its dp share of the shuffled training set (every rank
/// of one dp index sees the same samples). Every rank reads batches: under pipeline
/// parallelism the middle stages read the same ones as the first (for the shapes and the
/// epoch counters; the token batches are small beside the activations they receive).
std::shared_ptr<data::Sampler> build_sampler(const parallel::ParallelModel& pm, int64_t train_size, uint64_t seed);

}  // namespace strata::apps
