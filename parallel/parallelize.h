// parallelize(): the one place a layout is composed. It applies the strategies in a
// fixed order (tensor parallel, then the pipeline split, then DDP or ZeRO on the mesh's
// dp dimension) and returns one handle that a training loop drives without knowing which
// strategies are inside (torchtitan's parallelize_* functions, as a C++ API).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <strata/comm/device_mesh.h>
#include <strata/nn/module.h>
#include <strata/optim/grad_scaler.h>
#include <strata/optim/optimizer.h>
#include <strata/parallel/checkpoint/layout_io.h>
#include <strata/parallel/context/context_parallel.h>
#include <strata/parallel/data/ddp.h>
#include <strata/parallel/parallel_dims.h>
#include <strata/parallel/pipeline/executor.h>
#include <strata/parallel/tensor/plan.h>
#include <strata/parallel/data/zero.h>

namespace strata::parallel {

/// Everything parallelize() needs besides the model and the mesh.
struct ParallelizeOptions {
  ParallelDims dims;        ///< resolved degrees (dims.resolve(world)); must match the mesh
  DDPOptions ddp;           ///< DDP's buckets (also ZeRO-1/2's unit size: ddp.bucket_cap_mb)
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
  OptimizerFactory make_optimizer;
};

/// RAII: while alive, backward accumulates gradients locally with no communication
/// (DDP's and ZeRO's no_sync). Obtain from ParallelModel::no_sync().
class NoSync {
 public:
  NoSync() = default;
  explicit NoSync(NoSyncGuard g) : g_(std::move(g)) {}
  explicit NoSync(ZeroNoSyncGuard g) : g_(std::move(g)) {}

 private:
  std::variant<std::monostate, NoSyncGuard, ZeroNoSyncGuard> g_;
};

/// The handle parallelize() returns. One optimizer step on every rank of the mesh:
///   Tensor loss = pm->forward_with([&] { return loss_fn(pm->module(), x, y); });
///   backward(loss);             // micro-batches before the last one: inside pm->no_sync()
///   pm->finalize();             // gradients reduced over dp (average)
///   pm->clip_grad_norm(1.0);    // optional: the norm of the whole model's gradient
///   pm->step();                 // the optimizer (and ZeRO's parameter all-gather)
///   pm->zero_grad();
/// Every call is collective over the mesh where the layout communicates. The model and
/// the mesh's groups must outlive the handle. Not thread-safe.
class ParallelModel {
 public:
  ParallelModel(std::shared_ptr<nn::Module> model, comm::DeviceMesh mesh, ParallelDims dims,
                std::unique_ptr<DistributedDataParallel> ddp, std::unique_ptr<ZeroDataParallel> zero,
                std::unique_ptr<optim::Optimizer> optimizer, std::optional<TpLayout> tp = std::nullopt);
  ~ParallelModel();
  ParallelModel(const ParallelModel&) = delete;
  ParallelModel& operator=(const ParallelModel&) = delete;

  /// Runs fn() (forward and loss) between the strategies' pre/post-forward work.
  Tensor forward_with(const std::function<Tensor()>& fn);
  /// After backward: waits for the gradient reduction. No-op inside no_sync().
  void finalize();
  /// Scales the gradients so that their global norm (every parameter counted once, as
  /// one process computes it) is at most max_norm; returns the norm before clipping.
  double clip_grad_norm(double max_norm);
  /// scaler.unscale_ of optimizer(); under ZeRO (each rank holds a gradient shard) the
  /// found-inf flag is agreed over the data-parallel ranks (all-reduce max), so every
  /// rank skips the same steps. Collective under ZeRO.
  void unscale_(optim::GradScaler& scaler);
  /// The optimizer step (ZeRO: on this rank's slice, then the all-gather of stages 1-2).
  /// With a scaler (f16): GradScaler::step (skipped on non-finite gradients, on any rank
  /// under ZeRO: call unscale_(scaler) first) and update().
  void step(optim::GradScaler* scaler = nullptr);
  void zero_grad();
  [[nodiscard]] NoSync no_sync();

  /// RAII: the full parameters are materialised on every rank while it lives (ZeRO-3
  /// all-gathers them, tensor parallelism gathers its shards; collective); a no-op for
  /// every other layout.
  /// Under tensor parallelism the sharded Linears are swapped for whole ones (gathered
  /// over tp) while it lives, so one rank can evaluate the model alone -- except under
  /// pp > 1, where a rank holds only its stages: there only ZeRO-3 gathers, and the
  /// stages evaluate together (PipelineExecutor::eval_loss) on their tp shards.
  class FullParams {
   public:
    FullParams() = default;
    FullParams(std::optional<ZeroDataParallel::FullParams> g, std::unique_ptr<TpWholeModules> tp,
               std::unique_ptr<CpSuspended> cp = nullptr)
        : cp_(std::move(cp)), g_(std::move(g)), tp_(std::move(tp)) {}

   private:
    std::unique_ptr<CpSuspended> cp_;  // context parallelism: whole sequences, the model's own attention
    std::optional<ZeroDataParallel::FullParams> g_;
    std::unique_ptr<TpWholeModules> tp_;  // destroyed first: shards back before ZeRO releases
  };
  [[nodiscard]] FullParams summon_full_params();

  /// This rank's checkpoint pieces: parameters, buffers and optimizer state, each a piece
  /// of a globally named tensor (replicated tensors come from mesh rank 0 only). Views:
  /// save before changing the model.
  std::vector<ShardPiece> state_pieces() const;
  /// Loads a checkpoint of any layout and world size (every rank reads only what it
  /// holds; everything is checked before anything changes). Collective.
  void load_state(const ShardedCheckpointReader& ck, bool with_optimizer);

  nn::Module& module() { return *model_; }
  optim::Optimizer& optimizer();
  const comm::DeviceMesh& mesh() const { return mesh_; }
  const ParallelDims& dims() const { return dims_; }
  /// True when parameters, gradients or optimizer state are sharded (ZeRO) or split into
  /// pipeline stages: checkpoints are written by every rank.
  bool sharded() const { return zero_ != nullptr || pipeline_ != nullptr; }
  /// Element counts of the flat units (ZeRO), for the memory planner; empty otherwise.
  std::vector<int64_t> flat_unit_sizes() const;
  /// Context parallelism (cp > 1): what apply_cp replaced (null at cp 1).
  const CpLayout* cp() const { return cp_ ? &*cp_ : nullptr; }
  /// The group the gradients are averaged over and replicated state is shared by: the dp
  /// group, or at cp > 1 the dp x cp ranks of this rank's (pp, tp) coordinate.
  comm::ProcessGroup& replica_group() const { return replica_ ? *replica_ : *mesh_["dp"]; }
  /// Used by parallelize(): context parallelism's layout and the dp x cp group.
  void set_context_parallel(CpLayout cp, std::shared_ptr<comm::ProcessGroup> replica);
  /// "DDP over 2 dp rank(s) (mpi backend, comm.algorithm ring)": for logs.
  std::string describe() const;
  /// The strategies inside, for tests and benchmarks (null when not applied).
  DistributedDataParallel* ddp() const { return ddp_.get(); }
  ZeroDataParallel* zero() const { return zero_.get(); }
  /// What tensor parallelism sharded (null at tp 1).
  const TpLayout* tp() const { return tp_ ? &*tp_ : nullptr; }

  /// Pipeline parallelism (pp > 1): the executor of this rank's stages (null at pp 1).
  PipelineExecutor* pipeline() const { return pipeline_.get(); }
  /// One pipeline step's forwards and backwards (replaces forward_with + backward at
  /// pp > 1; collective over the mesh): the schedule over this rank's stages, the tied
  /// parameters' gradients summed between the first and last stage, then the dp
  /// reduction started. Call finalize(), clip_grad_norm(), step() after it as usual.
  /// Under ZeRO-3 the rank's units are gathered for the whole step (one all-gather per
  /// unit, not one per micro-batch and pass) and reduce-scattered by finalize().
  /// Returns the batch's mean loss on every rank of the pipeline.
  double pipeline_step(const Tensor& input, const Tensor& target, const Shape& batch_shape);
  /// pp > 1: every rank's model generators take the state of the rank that runs them
  /// (collective over pp; before saving, so that rank 0's checkpoint state is the
  /// whole model's). No-op at pp 1.
  void sync_pipeline_generators();
  /// Used by parallelize(): this rank's pipeline and, with tied parameters, the group of
  /// the first and last stage's ranks (null on the others).
  void set_pipeline(std::unique_ptr<PipelineExecutor> exec, std::shared_ptr<comm::ProcessGroup> embed_group);

 private:
  std::shared_ptr<nn::Module> model_;
  comm::DeviceMesh mesh_;
  ParallelDims dims_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<ZeroDataParallel> zero_;
  std::unique_ptr<optim::Optimizer> optimizer_;  // null under ZeRO (it owns its sharded one)
  std::vector<Tensor> params_;                   // for clipping outside ZeRO
  std::optional<TpLayout> tp_;
  std::unique_ptr<PipelineExecutor> pipeline_;
  std::shared_ptr<comm::ProcessGroup> embed_group_;  // first + last stage (tied parameters)
  std::optional<CpLayout> cp_;
  std::shared_ptr<comm::ProcessGroup> replica_;  // dp x cp (null at cp 1: the dp group)
  /// Parameter names this rank holds but does not own for norms and checkpoints (the
  /// last stage's copy of a tied parameter).
  std::vector<std::string> copies_;
  double pp_norm_sq(double local) const;
};

/// Composes the layout `opts.dims` over `mesh` (dimensions pp, dp, tp, and cp when
/// cp > 1; collective over the mesh's world: every rank calls it with the same
/// architecture):
///   1. tensor parallel on mesh["tp"] when tp > 1: apply_tp(model, opts.tp_plan) (ConfigError
///      naming parallel.tp when the plan is empty: the model has none),
///   2. the pipeline split on mesh["pp"] when pp > 1: the stages of opts.pp_plan, this
///      rank's kept (keep_stages) and run by a PipelineExecutor (ConfigError naming
///      parallel.pp without a plan). With tp > 1 each stage runs its tp shards (the
///      embedding group of a tied head is the first and last stage at one tp coordinate);
///      with ZeRO-3 a stage's units stay gathered for the whole pipeline step (pipeline_step),
///   2b. context parallel on mesh["cp"] when cp > 1: apply_cp(model, ...) on the attention
///      this rank holds (ring attention, sequences split by opts.cp_split; under pp the
///      first stage splits the tokens, the last the targets, and stages pass (B, T/cp, C):
///      opts.pp_plan's activation must say so),
///   3. on mesh["dp"] (at cp > 1 on the dp x cp ranks, which all hold the same parameters
///      and see different tokens): ZeRO stage dims.zero_stage when > 0, else DDP when
///      that group has more than one rank, else nothing (one process).
/// Rank 0's parameters and buffers are broadcast over dp. The optimizer is built by
/// opts.make_optimizer after the model is split and sharded.
std::unique_ptr<ParallelModel> parallelize(std::shared_ptr<nn::Module> model, const comm::DeviceMesh& mesh,
                                           const ParallelizeOptions& opts);

}  // namespace strata::parallel
