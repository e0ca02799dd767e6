// ZeRO stages 1-3 (stage 3 = FSDP) as one sharded data-parallel component: the model's
// parameters are flattened into units padded to a multiple of the world size, each rank
// owns one contiguous 1/N slice of every unit and keeps the optimizer state (stage >= 1),
// the gradients (stage >= 2) and the parameters (stage 3) of its slice only. With a
// replicate group (hybrid sharding, HSDP) N is the shard group, and the R replicas of
// each slice average their gradients over the replicate group before the step.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <strata/comm/process_group.h>
#include <strata/nn/module.h>
#include <strata/optim/optimizer.h>
#include <strata/parallel/data/flat_shard.h>
#include <strata/parallel/checkpoint/reader.h>
#include <strata/parallel/checkpoint/writer.h>
#include <strata/parallel/data/zero_plan.h>

namespace strata::parallel {

/// The ZeRO keys of the `parallel:` config section.
struct ZeroOptions {
  int stage = 1;               ///< parallel.zero_stage: 1 optimizer state, 2 + gradients, 3 + parameters
  double bucket_cap_mb = 25.0; ///< stages 1-2: MiB per flat unit (one reduce-scatter / all-gather each)
  bool prefetch = true;        ///< stage 3: all-gather the next unit while the current one computes
  bool broadcast_buffers = true;  ///< rank 0's buffers (BatchNorm statistics) before each forward
  /// Stage 3 wrap policy: module paths that become units ("h.0", "h.1", ...). Empty:
  /// default_wrap_policy(). Parameters outside every listed module form the root unit.
  std::vector<std::string> wrap{};
  /// Stages 1-2: cap of the first unit backward completes (its reduce-scatter starts
  /// while the rest of backward runs; DDP's first_bucket_mb) and of the last one (the
  /// first-registered parameters, reduced only after backward ends: keep it small).
  double first_unit_mb = 1.0;
  double last_unit_mb = 1.0;
};

/// FSDP's transformer-style auto wrap: every child with parameters of a ModuleList or
/// Sequential becomes a unit (GPT: each block "h.i"; MLP: each Linear), depth first, outer
/// containers first (a module inside an already wrapped one is not wrapped again).
std::vector<std::string> default_wrap_policy(nn::Module& model);

/// Builds the optimizer over the shard pieces it is given (names are parameter names,
/// tensors 1-D slices of this rank's shard with .grad set). Optimizers must be
/// elementwise (SGD, Adam, AdamW): each rank steps only its slice.
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(optim::NamedTensors)>;

/// Per unit, what one synchronized step moved (for tests and `strata bench zero`).
struct ZeroStepStats {
  int64_t reduce_scatters = 0;
  int64_t all_gathers = 0;
  int64_t replicate_all_reduces = 0;  ///< HSDP: gradient slices averaged over the replicas
  double wait_s = 0;  ///< time finalize()/step() blocked on communication
};

namespace detail {
struct ZeroState;
}

class ZeroNoSyncGuard;

/// The handle apply_zero() returns. One training step on every rank:
///   Tensor loss = zero->forward_with([&] { return loss_fn(model, x_shard, y_shard); });
///   backward(loss);
///   zero->finalize();          // waits for the gradient reduce-scatters (rank average)
///   zero->clip_grad_norm(1.0); // optional: the norm of the full, unsharded gradient
///   zero->step();              // optimizer on this rank's slice; stages 1-2 all-gather the parameters
///   zero->zero_grad();
/// Gradient accumulation: the first k-1 micro-batches inside `auto g = zero->no_sync();`.
///
/// What lives where (Ψ parameters, N ranks, fp32 + Adam):
///   stage 1: full parameters (4Ψ) and gradients (4Ψ, .grad are views of the flat grad
///            units), optimizer state of the slice (8Ψ/N);
///   stage 2: full parameters, gradient slice (4Ψ/N; the full .grad exists only during
///            backward until its unit is reduce-scattered: at any moment at most the
///            unit being filled and the one being sent), optimizer state slice;
///   stage 3: parameter slice (4Ψ/N): a unit's full parameters are all-gathered before
///            its forward and freed after it, gathered again for its backward and freed
///            when its gradients are in (gathered: the root unit, the current one and
///            the prefetched next one); gradient and optimizer slices as stage 2.
/// Per step each rank sends (N-1)/N of the padded flat size once for the reduce-scatter
/// and once per all-gather: 2 units' worth for stages 1-2, 3 for stage 3.
///
/// Hybrid sharding (HSDP): `group` is this rank's shard group (N ranks) and `replicate`
/// the R ranks at the same position of every shard group. Everything above happens
/// within the shard group; finalize() then all-reduces (averages) each unit's gradient
/// slice over the replicate group, so every replica steps the same slice with the
/// gradient averaged over all N x R ranks: on a ring that sends 2(R-1)/R of the slice,
/// (padded / N) elements per unit, per rank per step. The replicas' slices stay equal,
/// so only replica 0's are checkpointed (state_pieces()).
///
/// Stage 3: parameters of the model are usable only inside forward_with/backward; use
/// summon_full_params() around evaluation or a full state_dict (collective). Not thread-safe.
class ZeroDataParallel {
 public:
  /// `replicate` (HSDP; null: plain ZeRO) must outlive this object, as `group` must.
  ZeroDataParallel(std::shared_ptr<nn::Module> module, comm::ProcessGroup& group, const ZeroOptions& opts,
                   const OptimizerFactory& make_optimizer, comm::ProcessGroup* replicate = nullptr);
  ~ZeroDataParallel();
  ZeroDataParallel(const ZeroDataParallel&) = delete;
  ZeroDataParallel& operator=(const ZeroDataParallel&) = delete;

  /// Runs fn() (the model's forward and loss) between the pre/post forward work:
  /// buffer broadcast, and for stage 3 the root unit's gather and the backward hook.
  Tensor forward_with(const std::function<Tensor()>& fn);
  Tensor forward(const Tensor& x);
  /// After backward: launches what is still pending, waits for every reduce-scatter and
  /// leaves this rank's gradient slice = average over ranks. No-op inside no_sync().
  void finalize();
  /// Launches the reduce-scatter of every unit's gradients accumulated so far (under
  /// no_sync, e.g. by a pipeline's micro-batches) as a synchronized backward would have,
  /// without another backward; then finalize(). Call outside no_sync.
  void reduce_accumulated();
  /// Scales the gradient slices so that the global norm (all ranks, all parameters, as
  /// an unsharded run computes it) is at most max_norm; returns that norm. Collective.
  double clip_grad_norm(double max_norm);
  /// Optimizer step on this rank's slice; stages 1-2 then all-gather the parameters. Collective.
  void step();
  /// Clears the gradients (stage 1: zeroes the flat gradient units and keeps .grad on them).
  void zero_grad();
  [[nodiscard]] ZeroNoSyncGuard no_sync();

  /// Stage 3: gathers every unit's full parameters (collective); they stay until the
  /// guard dies (then freed again, collective). Stages 1-2: a no-op guard.
  class FullParams {
   public:
    explicit FullParams(ZeroDataParallel* z) : z_(z) {}
    ~FullParams();
    FullParams(FullParams&& o) noexcept : z_(o.z_) { o.z_ = nullptr; }
    FullParams(const FullParams&) = delete;
    FullParams& operator=(const FullParams&) = delete;
    FullParams& operator=(FullParams&&) = delete;

   private:
    ZeroDataParallel* z_;
  };
  [[nodiscard]] FullParams summon_full_params();

  /// The full model state (parameters, and buffers as rank 0 has them; clones) on every
  /// rank. Collective.
  nn::NamedTensors full_state_dict();

  /// This rank's parameter slices, optimizer state slices ("exp_avg.<param>", ...) and,
  /// on rank 0, the buffers whole. Under HSDP only replica 0 contributes (the other
  /// replicas hold the same slices and return nothing), so the pieces of all ranks tile
  /// every tensor exactly once. With the optimizer scalars (state_dict().scalars of
  /// rank 0; per-parameter steps are equal on every rank) this is a complete checkpoint
  /// for save_sharded(). Pieces are views: save before changing the model.
  std::vector<ShardPiece> state_pieces() const;
  /// Reads elements [begin, end) of a checkpoint tensor (any layout it was saved in).
  using RangeReader = std::function<Tensor(const std::string& name, int64_t begin, int64_t end)>;
  /// Loads parameters (and optimizer state when `optimizer_scalars` is not null) from a
  /// checkpoint of any world size / stage: every rank reads its slices; stages 1-2
  /// all-gather the parameters. Everything is read before anything changes. Collective.
  /// The reads run first; with `agree_over` its ranks then agree on their outcome before
  /// anything changes or any rank enters the parameter all-gather, so one rank's read
  /// error ends every rank with its cause (comm::run_agreed; ParallelModel::load_state
  /// passes the world). Without it a stage-3 load issues no collective at all.
  void load_state(const RangeReader& read, const nlohmann::json* optimizer_scalars,
                  comm::ProcessGroup* agree_over = nullptr);

  optim::Optimizer& optimizer();
  nn::Module& module() { return *module_; }
  comm::ProcessGroup& group() { return group_; }
  /// HSDP's replicate group; null under plain ZeRO.
  comm::ProcessGroup* replicate_group() { return replicate_; }
  const ZeroOptions& options() const { return opts_; }
  int stage() const { return opts_.stage; }
  /// The flat units, in registration order (stage 3: root first).
  std::vector<FlatUnit> units() const;
  const ZeroStepStats& last_stats() const;

 private:
  friend class ZeroNoSyncGuard;
  std::shared_ptr<nn::Module> module_;
  comm::ProcessGroup& group_;
  comm::ProcessGroup* replicate_ = nullptr;
  ZeroOptions opts_;
  std::shared_ptr<detail::ZeroState> s_;
};

/// RAII: while alive, backward accumulates full gradients locally (no communication).
class ZeroNoSyncGuard {
 public:
  explicit ZeroNoSyncGuard(ZeroDataParallel& z);
  ~ZeroNoSyncGuard();
  ZeroNoSyncGuard(ZeroNoSyncGuard&& o) noexcept : z_(o.z_), prev_(o.prev_) { o.z_ = nullptr; }
  ZeroNoSyncGuard(const ZeroNoSyncGuard&) = delete;
  ZeroNoSyncGuard& operator=(const ZeroNoSyncGuard&) = delete;
  ZeroNoSyncGuard& operator=(ZeroNoSyncGuard&&) = delete;

 private:
  ZeroDataParallel* z_;
  bool prev_;
};

/// Shards `module` over `group` at ZeRO stage opts.stage (collective: every rank calls it
/// with the same architecture). Broadcasts rank 0's parameters and buffers, flattens the
/// parameters into units (their tensors become views of the flat buffers: build nothing
/// that holds the old parameter tensors before this), and builds the optimizer over this
/// rank's slices with `make_optimizer`. With `replicate` (HSDP), `group` is the shard
/// group and rank 0's weights are those of replica 0's rank 0.
std::unique_ptr<ZeroDataParallel> apply_zero(std::shared_ptr<nn::Module> module, comm::ProcessGroup& group,
                                             const ZeroOptions& opts, const OptimizerFactory& make_optimizer,
                                             comm::ProcessGroup* replicate = nullptr);

}  // namespace strata::parallel
