// ParallelDims: the degrees of every parallel dimension of one run (dp, tp, pp) and the
// ZeRO stage, checked in one place against the world size and the model, and turned
// into the device mesh every strategy takes its groups from (torchtitan's ParallelDims).
#pragma once
#include <optional>
#include <string>

#include <strata/comm/device_mesh.h>
#include <strata/core/precision.h>
#include <strata/nn/parallel_plan.h>

namespace strata::parallel {

/// What the degrees must divide in the model, given by its family (nn/parallel_plan.h).
using nn::ModelLimits;

/// What a layout is checked against besides the world size: the model and the training
/// setup (filled by whoever knows them, the CLI from its config; defaults check nothing).
struct LayoutChecks {
  ModelLimits model{};                    ///< what tp, pp and cp must divide
  std::string model_type{};               ///< model.type, for messages ("" : unnamed)
  /// The model's sequence splits (nn::SequenceSplits); unset: unchecked.
  std::optional<bool> context_parallel{};    ///< its sequences split over cp ranks (ring attention)
  std::optional<bool> sequence_parallel_ok{};  ///< Megatron-SP under tp
  std::optional<int64_t> global_batch{};  ///< train.batch_size: divisible by dp, per dp rank by the micro-batches
  int grad_accum_steps = 1;               ///< train.grad_accum_steps: 1 under pp (the micro-batches accumulate)
  Precision precision = Precision::f32;   ///< run.precision: no f16 under pp, f32 only under cp
  bool cuda = false;                      ///< run.device is a GPU: MoE has no CUDA path
  bool sequence_parallel = false;         ///< parallel.sequence_parallel (at tp > 1)
  int microbatches = 1;                   ///< parallel.microbatches
  int virtual_stages = 1;                 ///< parallel.pp_virtual
  int replicas = 0;                       ///< parallel.replicas: thread replicas, one process only
  int world = 1;                          ///< the ranks the layout runs on
};

/// The degrees of a layout. Config keys: parallel.{dp, cp, tp, pp, zero_stage, dp_shard,
/// dp_replicate}.
///
/// Hybrid sharding (HSDP; FSDP2's HSDP, DeepSpeed's MiCS/hpZ): under ZeRO the dp ranks
/// are cut into dp_replicate = dp / dp_shard replicas of dp_shard ranks each. A shard
/// group is a run of consecutive dp ranks (dp rank d is in shard group d / S at position
/// d % S), so with tp fastest and dp next it stays inside a node when ranks fill nodes in
/// order. ZeRO shards within a shard group; the replicate group (the ranks at the same
/// position of every shard group) averages the gradient slices. dp_shard 0 or dp is plain
/// ZeRO over all dp ranks; dp_shard 1 keeps the whole state on every rank and all-reduces
/// the flat gradient units over dp (replication through ZeRO's flat units). With cp > 1 a
/// shard group is its dp ranks' dp_shard x cp ranks (they hold the same parameters and see
/// different tokens; torchtitan's dp_shard_cp), and the replicas average over dp_replicate.
struct ParallelDims {
  static constexpr int kAuto = 0;
  int dp = kAuto;      ///< data-parallel degree; kAuto = world / (cp * tp * pp)
  int tp = 1;          ///< tensor-parallel degree
  int pp = 1;          ///< pipeline stages
  int zero_stage = 0;  ///< 0 DDP (or nothing at dp 1), 1-3 ZeRO on the dp dimension
  int cp = 1;          ///< context-parallel degree (every sequence split over cp ranks)
  int dp_shard = 0;    ///< HSDP: ranks per shard group; 0 = all dp ranks (plain ZeRO)
  int dp_replicate = 0;  ///< HSDP: shard groups (= dp / dp_shard); 0 = derived. resolve() fills
                         ///<   dp_shard from it when only it is given
  /// Expert parallelism: each MoE layer's experts sharded over groups of ep consecutive dp
  /// ranks (carved out of dp, as torchtitan and Megatron-LM do), tokens dispatched to their
  /// experts' ranks by all-to-all. Expert weights are replicated over the dp / ep ranks at
  /// the same position of every ep group (x cp), which average their gradients.
  int ep = 1;

  /// Ranks per ZeRO shard group (dp when not hybrid; dp must be resolved).
  int shard_size() const { return dp_shard > 0 ? dp_shard : dp; }
  /// Replicas of the sharded state: dp / shard_size() (1 when not hybrid).
  int replicate_size() const { return dp / shard_size(); }
  /// True when ZeRO shards over fewer ranks than dp (HSDP): a replicate group exists.
  bool hybrid() const { return zero_stage > 0 && shard_size() < dp; }

  /// The same degrees with dp resolved for `world` ranks. ConfigError naming the
  /// parallel.* key: a degree < 1, a product that is not the world size (with the
  /// mpirun hint). tp > 1 and pp > 1 are accepted here; parallelize() refuses a model
  /// without a tensor-parallel or pipeline plan.
  ParallelDims resolve(int world) const;
  /// ConfigError naming parallel.tp / parallel.pp and the model key when the model cannot
  /// be split this way (heads or vocab not divisible by tp, fewer layers than pp).
  void check_model(const ModelLimits& m) const;
  /// check_model(c.model) and every constraint between the degrees and the training
  /// setup (pipeline: micro-batches, accumulation, f16, enough blocks; context parallel:
  /// a sequence model, f32, CPU, no sequence parallelism; sequence parallelism: a
  /// sequence model with a length divisible by tp; thread replicas: one process, no
  /// other dimension). ConfigError naming the key; dp must be resolved.
  void validate(const LayoutChecks& c) const;
  int world() const { return dp * cp * tp * pp; }
  /// The mesh layout, slowest first: pp x dp x tp (tp fastest, so a tp group is
  /// consecutive ranks on one node), with cp between dp and tp when cp > 1 (pp x dp x
  /// cp x tp, Megatron-LM's order). dp must be resolved.
  comm::MeshShape mesh_shape() const;
  /// "dp 4 x tp 1 x pp 1, zero_stage 2" (", ep 2" when ep > 1) (" x cp 2" after dp when cp > 1; ", dp_shard 2
  /// x dp_replicate 2" under HSDP)
  std::string str() const;
  /// The strategy on the dp dimension (at cp > 1 on dp x cp): "single process", "DDP", "ZeRO-N" or "HSDP ZeRO-N".
  std::string dp_strategy() const;
  bool operator==(const ParallelDims&) const = default;
};

}  // namespace strata::parallel
