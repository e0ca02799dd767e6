// Building the layout `strata train` runs on: the degrees resolved against the world and
// checked against the model and the training setup, the mesh, the model composed by
// parallel::parallelize() (thread replicas included), and this rank's data share.
#pragma once
#include <functional>
#include <memory>

#include "apps/config.h"
#include <strata/comm/process_group.h>
#include <strata/data/dataloader.h>
#include <strata/data/sampler.h>
#include <strata/nn/module.h>
#include <strata/parallel/parallelize.h>

namespace strata::apps {

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
