// parallelize(): the one place a layout is composed. It applies the strategies in a
// fixed order (tensor parallel, the pipeline split, context and expert parallel, then DDP
// or ZeRO on the mesh's dp dimension) and returns one handle that a training loop drives without knowing which
// strategies are inside (torchtitan's parallelize_* functions, as a C++ API).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <strata/comm/device_mesh.h>
#include <strata/nn/module.h>
#include <strata/optim/grad_scaler.h>
#include <strata/optim/optimizer.h>
#include <strata/parallel/checkpoint/layout_io.h>
#include <strata/parallel/context/context_parallel.h>
#include <strata/parallel/data/data_parallel.h>
#include <strata/parallel/data/ddp.h>
#include <strata/parallel/data/grad_sync.h>
#include <strata/parallel/data/zero.h>
#include <strata/parallel/expert/expert_parallel.h>
#include <strata/parallel/model_split.h>
#include <strata/parallel/parallel_dims.h>
#include <strata/parallel/pipeline/executor.h>
#include <strata/parallel/tensor/plan.h>

namespace strata::parallel {

/// Everything parallelize() needs besides the model and the mesh.
struct ParallelizeOptions {
  ParallelDims dims{};      ///< resolved degrees (dims.resolve(world)); must match the mesh
  DDPOptions ddp{};         ///< DDP's buckets (also ZeRO-1/2's unit size: ddp.bucket_cap_mb)
  bool fsdp_prefetch = true;  ///< ZeRO-3: gather the next unit while this one computes
  std::vector<std::string> fsdp_wrap{};  ///< ZeRO-3 units (module paths); empty: default_wrap_policy
  /// The model's tensor-parallel plan (built where the model is known, e.g. apps/);
  /// needed when dims.tp > 1, ignored at tp 1.
  TpPlan tp_plan{};
  /// The pipeline's schedule (parallel.{pp_schedule, microbatches, pp_virtual}); used when dims.pp > 1.
  PipelineOptions pipeline{};
  /// The model's pipeline split (built where the model is known, e.g. apps/; its
  /// `layers` is parallel.pp_layers); needed when dims.pp > 1, ignored at pp 1.
  PipelinePlan pp_plan{};
  /// How context parallelism cuts each sequence (parallel.cp_split); used when dims.cp > 1.
  CpSplit cp_split = CpSplit::zigzag;
  /// Builds the optimizer over the parameters it is given (the model's, or ZeRO's 1-D
  /// slices of this rank's shard, with the same names).
  OptimizerFactory make_optimizer{};
  /// The mean loss of a batch (train_step, forward_backward and eval_batch of a layout
  /// without pipeline stages; a pipeline's last stage uses pp_plan.loss).
  LossFn loss{};
  /// Thread replicas in this one process (DataParallel; parallel.replicas): replicas.replicas
  /// > 0 turns them on, make_replica builds each replica k > 0. Only at a world of one rank.
  DataParallelOptions replicas{};
  ReplicaFactory make_replica{};
  /// The training setup the layout is checked against before anything is built.
  LayoutChecks checks{};
};

/// RAII: while alive, backward accumulates gradients locally with no communication
/// (DDP's and ZeRO's no_sync). Obtain from ParallelModel::no_sync().
using NoSync = Scoped;

/// What one training step is run with.
struct StepOptions {
  double grad_clip = 0;                 ///< > 0: the global gradient norm is clipped to it
  optim::GradScaler* scaler = nullptr;  ///< f16: dynamic loss scaling (steps skipped on overflow)
  std::optional<DType> autocast{};      ///< forward and loss under autocast to this dtype
  int64_t step = 0;                     ///< the step's number, for messages
  /// Runs after the forward, backward and gradient reduction, before the optimizer changes
  /// any parameter or state (a background checkpoint's snapshot completes there).
  std::function<void()> before_update{};
};

/// What one training step did.
struct StepResult {
  double loss = 0;                 ///< mean loss over the step's batches (every rank)
  std::optional<double> grad_norm{};  ///< before clipping, when clipped
};

/// The handle parallelize() returns; a training loop drives it without knowing which
/// strategies are inside. One optimizer step on every rank of the mesh, for every layout:
///   optimizer().set_lr(lr);
///   StepResult r = pm->train_step(batches, {.grad_clip = 1.0});  // accumulation over `batches`
/// or, in pieces (a layout without pipeline stages, as with DDP in PyTorch):
///   Tensor loss = pm->forward_with([&] { return loss_fn(pm->module(), x, y); });
///   backward(loss);             // micro-batches before the last one: inside pm->no_sync()
///   pm->finalize();             // gradients reduced over dp (average)
///   pm->clip_grad_norm(1.0);    // optional: the norm of the whole model's gradient
///   pm->step();                 // the optimizer (and ZeRO's parameter all-gather)
///   pm->zero_grad();
/// Evaluation: pm->evaluate([&] { ... pm->eval_batch(b, classify) ... }).
/// Every call is collective over the mesh where the layout communicates. The model and
/// the mesh's groups must outlive the handle. Not thread-safe.
class ParallelModel {
 public:
  /// What parallelize() composed (the model split, the gradient sync and the shardings).
  struct Parts {
    std::unique_ptr<ModelSplit> split;
    std::unique_ptr<GradSync> sync;
    std::shared_ptr<comm::ProcessGroup> replica;  ///< the group sync reduces over (dp, or dp x cp)
    std::optional<TpLayout> tp;
    std::optional<CpLayout> cp;
    std::shared_ptr<const EpLayout> ep;  ///< expert parallelism (null at ep 1)
  };
  ParallelModel(std::shared_ptr<nn::Module> model, comm::DeviceMesh mesh, ParallelDims dims, Parts parts);
  ~ParallelModel();
  ParallelModel(const ParallelModel&) = delete;
  ParallelModel& operator=(const ParallelModel&) = delete;

  /// One optimizer step on this rank's batches (one per accumulated micro-batch; a
  /// pipeline takes one and cuts it into parallel.microbatches): forward, loss and
  /// backward, the gradient reduction, unscaling and the skip decision under a scaler,
  /// clipping, the optimizer step and zero_grad. Error "training diverged" when a loss is
  /// not finite.
  StepResult train_step(std::span<const Batch> batches, const StepOptions& opts = {});
  StepResult train_step(const Batch& batch, const StepOptions& opts = {}) { return train_step({&batch, 1}, opts); }
  /// Forward, loss and backward of `batches`, the gradient reduction finished (the first
  /// part of train_step). Returns the mean loss on every rank.
  double forward_backward(std::span<const Batch> batches, const StepContext& ctx = {});
  double forward_backward(const Batch& batch, const StepContext& ctx = {}) { return forward_backward({&batch, 1}, ctx); }

  /// Runs `body` on the ranks that evaluate (every rank of a pipeline, rank 0 otherwise)
  /// with the parameters whole where it needs them (summon_full_params); collective.
  void evaluate(const std::function<void()>& body);
  /// One batch without autograd, inside evaluate(): see ModelSplit::eval_batch.
  EvalSums eval_batch(const Batch& batch, bool classify);

  /// Runs fn() (forward and loss) between the strategies' pre/post-forward work.
  Tensor forward_with(const std::function<Tensor()>& fn);
  /// After backward: waits for the gradient reduction. No-op inside no_sync().
  void finalize();
  /// Scales the gradients so that their global norm (every parameter counted once, as
  /// one process computes it) is at most max_norm; returns the norm before clipping.
  double clip_grad_norm(double max_norm);
  /// scaler.unscale_ of optimizer(); the found-inf flag is agreed over every rank of the
  /// run (all-reduce max), so where a rank holds a gradient shard (ZeRO, tensor
  /// parallelism) every rank still skips the same steps. Collective.
  void unscale_(optim::GradScaler& scaler);
  /// The optimizer step (ZeRO: on this rank's slice, then the all-gather of stages 1-2).
  /// With a scaler (f16): GradScaler::step (skipped on non-finite gradients on any rank:
  /// call unscale_(scaler) first) and update().
  void step(optim::GradScaler* scaler = nullptr);
  void zero_grad();
  [[nodiscard]] NoSync no_sync();

  /// RAII: the full parameters are materialised while it lives (ZeRO-3 all-gathers them,
  /// tensor parallelism swaps its sharded Linears for whole ones, context parallelism
  /// runs whole sequences), so one rank can evaluate the model alone; collective. A
  /// pipeline's stages evaluate together on their tp shards: there only ZeRO-3 gathers.
  class FullParams {
   public:
    FullParams() = default;
    FullParams(Scoped cp, Scoped gathered, Scoped experts, Scoped tp)
        : cp_(std::move(cp)), gathered_(std::move(gathered)), experts_(std::move(experts)), tp_(std::move(tp)) {}

   private:
    Scoped cp_;        // context parallelism suspended
    Scoped gathered_;  // ZeRO-3's units
    Scoped experts_;   // expert parallelism: every expert whole here
    Scoped tp_;        // destroyed first: shards back before ZeRO releases
  };
  [[nodiscard]] FullParams summon_full_params();

  /// This rank's checkpoint pieces: parameters, buffers and optimizer state, each a piece
  /// of a globally named tensor (replicated tensors from one rank only). Views: save
  /// before changing the model. Call sync_generators() first (collective).
  std::vector<ShardPiece> state_pieces() const;
  /// Loads a checkpoint of any layout and world size, or any other source of the model's
  /// global tensors (every rank reads only what it holds; everything is checked before
  /// anything changes). Without the optimizer, 16-bit parameters' masters take the loaded
  /// values. Collective.
  void load_state(const TensorSource& ck, bool with_optimizer);
  /// Collective: every rank's model generators take the state of the rank that runs them
  /// (pipeline stages), so that rank 0's checkpoint state is the whole model's.
  void sync_generators() { split_->sync_generators(); }
  /// Checkpoint state of the layout beyond the model's (thread replicas' dropout streams).
  nlohmann::json extra_state() const { return split_->extra_state(); }
  void load_extra_state(const nlohmann::json& extra) { split_->load_extra_state(extra); }

  nn::Module& module() { return *model_; }
  optim::Optimizer& optimizer() { return sync_->optimizer(); }
  const comm::DeviceMesh& mesh() const { return mesh_; }
  const ParallelDims& dims() const { return dims_; }
  /// True when parameters, gradients or optimizer state are sharded (ZeRO) or split into
  /// pipeline stages: checkpoints are written by every rank.
  bool sharded() const { return sync_->shards_state() || split_->holds_part(); }
  /// Element counts of the flat units (ZeRO), for the memory planner; empty otherwise.
  std::vector<int64_t> flat_unit_sizes() const { return sync_->flat_unit_sizes(); }
  /// True when DDP keeps bucket buffers beside the gradients (memory planner).
  bool holds_buckets() const { return sync_->holds_buckets(); }
  /// The group the gradients are averaged over and replicated state is shared by: the dp
  /// group, or at cp > 1 the dp x cp ranks of this rank's (pp, tp) coordinate.
  comm::ProcessGroup& replica_group() const { return *replica_; }
  /// The data-parallel strategy: "single process", "DDP", "ZeRO-2", "DataParallel".
  std::string strategy() const;
  /// "DDP over 2 dp rank(s) (mpi backend, comm.algorithm ring)": for logs.
  std::string describe() const;
  /// Extra lines for a run's log under its layout line (thread replicas' split).
  std::vector<std::string> notes(int64_t batch) const { return split_->notes(batch); }
  /// Extra lines for the memory report (bytes per thread replica), "" when none.
  std::string memory_detail() const { return split_->memory_detail(sync_->optimizer()); }
  /// Forward/backward streams this process runs at once (thread replicas), for the MFU.
  int compute_streams() const { return split_->compute_streams(); }

  /// The strategies inside, for tests and benchmarks that inspect them (null when not applied).
  DistributedDataParallel* ddp() const { return ddp_of(*sync_); }
  ZeroDataParallel* zero() const { return zero_of(*sync_); }
  const TpLayout* tp() const { return tp_ ? &*tp_ : nullptr; }
  const CpLayout* cp() const { return cp_ ? &*cp_ : nullptr; }
  PipelineExecutor* pipeline() const;
  DataParallel* data_parallel() const;

 private:
  std::shared_ptr<nn::Module> model_;
  comm::DeviceMesh mesh_;
  ParallelDims dims_;
  std::unique_ptr<ModelSplit> split_;
  std::unique_ptr<GradSync> sync_;
  std::shared_ptr<comm::ProcessGroup> replica_;
  std::optional<TpLayout> tp_;
  std::optional<CpLayout> cp_;
  std::shared_ptr<const EpLayout> ep_;
};

/// Composes the layout `opts.dims` over `mesh` (dimensions pp, dp, tp, and cp when
/// cp > 1; collective over the mesh's world: every rank calls it with the same
/// architecture):
///   0. opts.dims.validate(opts.checks) and the thread replicas' world: ConfigError naming
///      the parallel.* key before anything is built,
///   1. tensor parallel on mesh["tp"] when tp > 1: apply_tp(model, opts.tp_plan) (ConfigError
///      naming parallel.tp when the plan is empty: the model has none),
///   2. the pipeline split on mesh["pp"] when pp > 1: the stages of opts.pp_plan, this
///      rank's kept (keep_stages) and run by a PipelineExecutor (ConfigError naming
///      parallel.pp without a plan). With tp > 1 each stage runs its tp shards (the
///      embedding group of a tied head is the first and last stage at one tp coordinate);
///      with ZeRO-3 a stage's units stay gathered for the whole pipeline step (forward_backward),
///   2b. context parallel on mesh["cp"] when cp > 1: apply_cp(model, ...) on the attention
///      this rank holds (ring attention, sequences split by opts.cp_split; under pp the
///      first stage splits the tokens, the last the targets, and stages pass (B, T/cp, C):
///      opts.pp_plan's activation must say so),
///   2c. expert parallel when dims.ep > 1: apply_ep keeps this rank's experts / ep of every
///      MoE layer (ep groups of consecutive dp ranks) and dispatches tokens by all-to-all
///      (ConfigError naming parallel.ep when the model has no MoE layer),
///   3. on mesh["dp"] (at cp > 1 on the dp x cp ranks, which all hold the same parameters
///      and see different tokens): ZeRO stage dims.zero_stage when > 0, else DDP when
///      that group has more than one rank, else nothing (one process); with
///      opts.replicas, thread replicas (DataParallel) run each forward in this process.
///      Under expert parallelism that sync never sees the experts: ExpertSync wraps it and
///      reduces them over the ranks holding the same experts.
/// Rank 0's parameters and buffers are broadcast over dp. The optimizer is built by
/// opts.make_optimizer after the model is split and sharded.
std::unique_ptr<ParallelModel> parallelize(std::shared_ptr<nn::Module> model, const comm::DeviceMesh& mesh,
                                           const ParallelizeOptions& opts);

}  // namespace strata::parallel
