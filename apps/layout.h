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

/// What the model allows tp and pp to be (heads, vocabulary, layers of a GPT).
parallel::ModelLimits model_limits(const TrainConfig& cfg);

/// The tensor-parallel plan of a built model (empty for a model without one: a CNN):
///   MLP: its hidden Linears in pairs, the first colwise, the second rowwise, the dropout
///        between them parallel_rng (an odd last hidden layer and the output layer stay
///        replicated);
///   GPT: per block attn.c_attn colwise by whole q|k|v heads, attn.c_proj rowwise,
///        mlp.c_fc colwise, mlp.c_proj rowwise, the attention dropout parallel_rng; wte
///        (the tied head) and an untied lm_head vocab_parallel; with sequence_parallel
///        every LayerNorm sequence_norm and the dropouts on the residual stream parallel_rng.
parallel::TpPlan model_tp_plan(const nn::Module& model, bool sequence_parallel = false);

/// The pipeline split of a built model (empty for a model without one: MLP, CNN):
///   GPT: blocks "h"; wte, wpe, drop on the first stage; ln_f and the head (wte itself
///        when tied, summed over the embedding group) on the last; a stage sends
///        (B, T, n_embd) f32 activations. `layers` is parallel.pp_layers. `seq_shards`:
///        parallel.tp under sequence parallelism (a stage sends its sequence shard
///        (B, T/tp, n_embd)), else 1. The loss is GPT::stage_loss (vocabulary-parallel
///        under tp): the plan refers to `model`, which must outlive it. `cp`:
///        parallel.cp; while context parallelism is applied (the GPT's shard_sequence
///        hook set) a stage sends this rank's part of the sequences (B, T/cp, n_embd),
///        and whole ones while it is suspended (evaluation).
parallel::PipelinePlan model_pp_plan(const nn::Module& model, const std::vector<int64_t>& layers,
                                     int64_t seq_shards = 1, int64_t cp = 1);

/// What the config's layout is checked against (parallel::ParallelDims::validate): the
/// model's limits and the training setup.
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
