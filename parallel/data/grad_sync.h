// GradSync: how a layout's gradients meet over the data-parallel ranks and who steps the
// optimizer: nothing (one replica), DDP (bucketed all-reduce) or ZeRO-1/2/3 (reduce-scatter
// into shards, a sharded optimizer). The handle parallelize() returns drives one of these
// through this interface and never asks which one it holds. HSDP is ZeRO over a shard
// group plus a replicate group (ZeroSync with two groups), not a fourth kind.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <strata/comm/process_group.h>
#include <strata/nn/module.h>
#include <strata/optim/grad_scaler.h>
#include <strata/optim/optimizer.h>
#include <strata/parallel/checkpoint/reader.h>
#include <strata/parallel/checkpoint/writer.h>
#include <strata/parallel/data/ddp.h>
#include <strata/parallel/data/zero.h>
#include <strata/parallel/tensor/plan.h>

namespace strata::parallel {

/// A guard of any kind, released when destroyed (no_sync, gathered parameters).
using Scoped = std::shared_ptr<void>;

/// The gradient synchronisation of a layout over its replica group (the dp ranks, or dp x
/// cp). Owns the optimizer; never null in a ParallelModel. Collective where it
/// communicates; not thread-safe.
class GradSync {
 public:
  virtual ~GradSync() = default;

  /// Runs fn() (forward and loss) between the strategy's pre- and post-forward work
  /// (DDP's buffer broadcast and unused-parameter search, ZeRO-3's gathers).
  virtual Tensor forward_with(const std::function<Tensor()>& fn) { return fn(); }
  /// While the returned guard lives, backward accumulates locally with no communication.
  [[nodiscard]] virtual Scoped no_sync() { return nullptr; }
  /// Starts the reduction of gradients accumulated under no_sync (a pipeline's step).
  virtual void reduce_accumulated() {}
  /// Waits for the gradient reduction (average over the group). No-op inside no_sync.
  virtual void finalize() {}
  /// `local` (a squared norm over this rank's optimizer parameters) summed over the ranks
  /// that hold disjoint slices of the same tensors (ZeRO); unchanged when every rank
  /// holds whole gradients.
  virtual double sum_over_shards(double local) { return local; }
  /// Multiplies every gradient the sync's optimizers step by f (clipping).
  virtual void scale_grads(double f);
  /// scaler.unscale_ of the optimizer, the skip decision agreed through `any_rank` when
  /// given (ParallelModel passes an all-reduce over every rank of the run).
  virtual void unscale_(optim::GradScaler& scaler, const optim::GradScaler::AnyRank& any_rank) {
    if (any_rank) scaler.unscale_(optimizer(), any_rank);
    else scaler.unscale_(optimizer());
  }
  /// The optimizer step (with a scaler: skipped on non-finite gradients, then update()),
  /// and whatever the strategy does after it (ZeRO's all-gather of the updated slices).
  virtual void step(optim::GradScaler* scaler);
  virtual void zero_grad() { optimizer().zero_grad(); }
  virtual optim::Optimizer& optimizer() = 0;

  /// While the returned guard lives the parameters are whole on every rank (ZeRO-3
  /// gathers its units; collective); null where they always are.
  [[nodiscard]] virtual Scoped gather_parameters() { return nullptr; }
  /// This rank's checkpoint pieces in the coordinates of the model it holds (its tp shard):
  /// replicated state from the group's rank 0, sharded state from every rank.
  virtual std::vector<ShardPiece> state_pieces(const nn::Module& model, const comm::ProcessGroup& group);
  /// Loads a checkpoint of any layout into this rank's part, `tp` mapping the model's
  /// shards to global tensors (null at tp 1). Everything is checked before anything
  /// changes, and the ranks of `world` agree on the outcome of the reads before any rank
  /// moves on: one rank's read error ends every rank with its cause (comm::run_agreed).
  virtual void load_state(const TensorSource& ck, nn::Module& model, bool with_optimizer, const TpLayout* tp,
                          comm::ProcessGroup& world);

  /// True when parameters, gradients or optimizer state are split over the group.
  virtual bool shards_state() const { return false; }
  /// True when gradients travel through bucket buffers of their own (DDP's, unless they
  /// are bucket views), for the memory plan.
  virtual bool holds_buckets() const { return false; }
  /// Element counts of the flat units (ZeRO), for the memory plan; empty otherwise.
  virtual std::vector<int64_t> flat_unit_sizes() const { return {}; }
  /// "DDP", "ZeRO-2", "single process".
  virtual std::string name() const = 0;
  /// The sync this one wraps (expert parallelism wraps the sync of the other parameters), or null.
  virtual GradSync* wrapped() { return nullptr; }
};

/// What make_grad_sync builds over `group`.
struct GradSyncOptions {
  int zero_stage = 0;       ///< 1-3: ZeRO; 0: DDP when the group has more than one rank, else none
  /// ZeRO only: ranks per shard group (HSDP) when 0 < dp_shard < the group's size, which
  /// it must divide; the group is then split into shard and replicate groups. 0: plain ZeRO.
  int dp_shard = 0;
  DDPOptions ddp{};         ///< DDP's buckets (ZeRO-1/2's unit sizes too)
  bool fsdp_prefetch = true;
  std::vector<std::string> fsdp_wrap{};
  OptimizerFactory make_optimizer;
};

/// The gradient synchronisation of `model` over `group` (collective: rank 0's parameters
/// and buffers are broadcast where the group has more than one rank). The optimizer is
/// built by opts.make_optimizer over the model's parameters, or ZeRO's slices of them.
std::unique_ptr<GradSync> make_grad_sync(std::shared_ptr<nn::Module> model, comm::ProcessGroup& group,
                                         const GradSyncOptions& opts);

/// The DDP or ZeRO component inside `sync`, or null: for tests and benchmarks that
/// inspect buckets and units.
DistributedDataParallel* ddp_of(GradSync& sync);
ZeroDataParallel* zero_of(GradSync& sync);

}  // namespace strata::parallel
