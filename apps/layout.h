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

/// parallel.{dp, tp, pp, zero_stage} resolved for `world` ranks and checked against the
/// model and the batch (train.batch_size divisible by dp). ConfigError naming the key.
parallel::ParallelDims resolve_dims(const TrainConfig& cfg, int world);

/// The composed model: the mesh of `dims` over `world`, then parallelize() with the
/// config's DDP/FSDP options and optimizer. Collective over `world`.
std::unique_ptr<parallel::ParallelModel> build_parallel_model(const TrainConfig& cfg,
                                                              std::shared_ptr<comm::ProcessGroup> world,
                                                              const parallel::ParallelDims& dims,
                                                              std::shared_ptr<nn::Module> model);

/// True when this rank consumes batches. Every rank does: under pipeline parallelism
/// the middle stages read the same batches as the first (for the shapes and the epoch
/// counters; the token batches are small beside the activations they receive).
bool needs_data(const parallel::ParallelModel& pm);

/// This rank's training sampler: its dp share of the shuffled training set (every rank
/// of one dp index sees the same samples).
std::shared_ptr<data::Sampler> build_sampler(const parallel::ParallelModel& pm, int64_t train_size, uint64_t seed);

/// DataParallel over `model` (replica 0) with parallel.replicas thread replicas: replicas
/// k > 0 are built by build_model with their own seeds (their weights are replaced by
/// replica 0's before every forward; their dropout streams stay their own).
std::shared_ptr<parallel::DataParallel> build_replicas(const TrainConfig& cfg, std::shared_ptr<nn::Module> model);

/// The mean loss of one batch through `replicas` (each replica runs a slice of the
/// batch, the loss is taken on the gathered output), as batch_loss() is through the model.
Tensor replicated_batch_loss(parallel::DataParallel& replicas, const data::Batch& batch);

}  // namespace strata::apps
