// parallelize(): tensor parallel, the model split (whole, thread replicas or pipeline
// stages), context parallel, then the gradient sync on dp, composed once; ParallelModel
// drives them through their interfaces and a placement of every parameter.
#include <strata/parallel/parallelize.h>

#include <algorithm>
#include <cmath>

#include <strata/autograd/grad_mode.h>
#include <strata/core/config.h>
#include <strata/core/trace.h>
#include <strata/optim/clip.h>
#include <strata/parallel/data/replica_split.h>
#include <strata/parallel/expert/expert_parallel.h>
#include <strata/parallel/pipeline/pipeline_split.h>
#include <strata/parallel/tensor/checkpoint.h>
#include <strata/parallel/whole_model.h>
#include <strata/tensor/cpu/op_profile.h>

namespace strata::parallel {

ParallelModel::ParallelModel(std::shared_ptr<nn::Module> model, comm::DeviceMesh mesh, ParallelDims dims, Parts parts)
    : model_(std::move(model)),
      mesh_(std::move(mesh)),
      dims_(dims),
      split_(std::move(parts.split)),
      sync_(std::move(parts.sync)),
      replica_(std::move(parts.replica)),
      tp_(std::move(parts.tp)),
      cp_(std::move(parts.cp)),
      ep_(std::move(parts.ep)) {
  STRATA_CHECK(model_ && split_ && sync_ && replica_, "[parallelize] a ParallelModel needs its model, split, sync and group");
}

ParallelModel::~ParallelModel() = default;

double ParallelModel::forward_backward(std::span<const Batch> batches, const StepContext& ctx) {
  STRATA_CHECK(!batches.empty(), "[train_step] no batch");
  return split_->forward_backward(batches, *sync_, ctx);
}

StepResult ParallelModel::train_step(std::span<const Batch> batches, const StepOptions& o) {
  StepResult r;
  r.loss = forward_backward(batches, {.autocast = o.autocast, .scaler = o.scaler, .step = o.step});
  if (o.scaler) unscale_(*o.scaler);  // clipping sees the true gradients; ZeRO agrees on overflow
  const bool finite = !o.scaler || !o.scaler->found_inf(optimizer());
  if (o.grad_clip > 0 && finite) r.grad_norm = clip_grad_norm(o.grad_clip);
  if (o.before_update) o.before_update();
  {
    trace::Scope slice("optimizer");
    step(o.scaler);
    zero_grad();
  }
  split_->after_step();
  return r;
}

void ParallelModel::evaluate(const std::function<void()>& body) {
  const FullParams full = summon_full_params();
  if (split_->evaluates_together() || mesh_.world()->rank() == 0) body();
}

EvalSums ParallelModel::eval_batch(const Batch& batch, bool classify) {
  NoGradGuard no_grad;
  return split_->eval_batch(batch, classify);
}

Tensor ParallelModel::forward_with(const std::function<Tensor()>& fn) { return sync_->forward_with(fn); }

void ParallelModel::finalize() { sync_->finalize(); }

double ParallelModel::clip_grad_norm(double max_norm) {
  STRATA_CHECK(max_norm > 0, "[clip_grad_norm] max_norm must be > 0, got ", max_norm);
  cpu::op_profile::Phase profile_phase("optimizer");
  // Every parameter counted once, as one process has it: the tp shards of a sharded one
  // summed over tp (a replicated one once), ZeRO's dp slices summed over the replica
  // group, the pipeline stages' parts summed over pp, a stage's tied copy not counted again.
  const optim::NamedTensors& named = optimizer().named_parameters();
  const std::vector<std::string>& copies = split_->copies();
  optim::NamedTensors own;
  for (const auto& [n, p] : named)
    if (std::find(copies.begin(), copies.end(), n) == copies.end()) own.emplace_back(n, p);
  double sq = tp_ ? tp_grad_norm_sq(own, *tp_) : [&] {
    std::vector<Tensor> ts;
    for (const auto& [n, p] : own) ts.push_back(p);
    return optim::grad_norm_sq(ts);
  }();
  sq = split_->sum_over_parts(sync_->sum_over_shards(sq));
  const double total = std::sqrt(sq), f = optim::clip_factor(total, max_norm);
  if (f < 1.0) sync_->scale_grads(f);
  return total;
}

// Every rank's found-inf flag, all-reduced (max) over the whole run: whatever shards the
// gradients (ZeRO over dp, tensor parallelism over tp), every rank skips the same steps
// and moves the scale the same way (FSDP's ShardedGradScaler agrees over its group; this
// agrees over all of them at once). One scalar per step.
void ParallelModel::unscale_(optim::GradScaler& scaler) {
  comm::ProcessGroup& world = *mesh_.world();
  if (world.size() == 1) return sync_->unscale_(scaler, nullptr);
  sync_->unscale_(scaler, [&world](bool found_inf) {
    const Tensor f = ops::full({1}, found_inf ? 1.0 : 0.0, DType::f64);
    return comm::all_reduce_host(world, f, comm::ReduceOp::max).item<double>() > 0;
  });
}

void ParallelModel::step(optim::GradScaler* scaler) { sync_->step(scaler); }

void ParallelModel::zero_grad() { sync_->zero_grad(); }

NoSync ParallelModel::no_sync() { return sync_->no_sync(); }

ParallelModel::FullParams ParallelModel::summon_full_params() {
  Scoped gathered = sync_->gather_parameters();
  // Stages evaluate together with their tp shards in place: only a rank that evaluates the
  // whole model alone swaps in whole Linears.
  Scoped tp = tp_ && !split_->evaluates_together() ? std::make_shared<TpWholeModules>(*model_, *tp_) : nullptr;
  Scoped cp = cp_ ? std::make_shared<CpSuspended>(*model_, *cp_) : nullptr;
  Scoped experts = ep_ ? std::make_shared<EpWholeExperts>(*model_, *ep_) : nullptr;
  return FullParams(std::move(cp), std::move(gathered), std::move(experts), std::move(tp));
}

std::vector<ShardPiece> ParallelModel::state_pieces() const {
  // This rank's pieces in its shard's coordinates (replicated ones from rank 0 of the
  // replica group), as pieces of the global tensors (each tp rank's shard as ranges of
  // them), without another stage's tied copy.
  std::vector<ShardPiece> local = sync_->state_pieces(*model_, *replica_);
  if (tp_) local = tp_global_pieces(local, *tp_);
  const std::vector<std::string>& copies = split_->copies();
  if (copies.empty()) return local;
  std::vector<ShardPiece> out;
  for (auto& p : local) {
    const std::string bare = optim::Optimizer::state_param_name(p.name);  // "exp_avg.wte.weight" -> "wte.weight"
    const bool copy = std::find(copies.begin(), copies.end(), p.name) != copies.end() ||
                      std::find(copies.begin(), copies.end(), bare) != copies.end();
    if (!copy) out.push_back(std::move(p));
  }
  return out;
}

void ParallelModel::load_state(const TensorSource& ck, bool with_optimizer) {
  sync_->load_state(ck, *model_, with_optimizer, tp_ ? &*tp_ : nullptr, *mesh_.world());
}

std::string ParallelModel::strategy() const {
  const std::string s = split_->strategy();
  return s.empty() ? dims_.dp_strategy() : s;
}

PipelineExecutor* ParallelModel::pipeline() const {
  auto* p = dynamic_cast<PipelineSplit*>(split_.get());
  return p ? &p->executor() : nullptr;
}

DataParallel* ParallelModel::data_parallel() const {
  auto* r = dynamic_cast<ReplicaSplit*>(split_.get());
  return r ? &r->replicas() : nullptr;
}

std::string ParallelModel::describe() const {
  const comm::ProcessGroup& dp = *replica_;
  std::string s = dims_.dp_strategy() + " over " + std::to_string(dp.size()) + (dims_.cp > 1 ? " dp x cp" : " dp") + " rank(s)";
  if (dims_.hybrid())
    s += " in " + std::to_string(dims_.replicate_size()) + " replicas of " +
         std::to_string(dims_.shard_size() * dims_.cp) + "-rank shard groups";
  if (dp.size() > 1 || dims_.zero_stage > 0)
    s += std::string(" (") + dp.backend_kind() + " backend, comm.algorithm " + comm::algorithm_name(dp.algorithm()) + ")";
  s += split_->describe();
  if (dims_.ep > 1)
    s += ", expert parallel over " + std::to_string(dims_.ep) + " ep rank(s) (all-to-all dispatch, experts / " +
         std::to_string(dims_.ep) + " per rank)";
  if (cp_)
    s += ", context parallel over " + std::to_string(cp_->cp->size()) + " cp rank(s) (ring attention, " +
         cp_split_name(cp_->split) + " split, " + std::to_string(cp_->attention.size()) + " attention layers)";
  if (tp_)
    s += ", tensor parallel over " + std::to_string(tp_->tp->size()) + " tp rank(s) (" +
         std::to_string(tp_->sharded.size()) + " sharded parameters)";
  return s;
}

std::unique_ptr<ParallelModel> parallelize(std::shared_ptr<nn::Module> model, const comm::DeviceMesh& mesh,
                                           const ParallelizeOptions& opts) {
  const ParallelDims& d = opts.dims;
  STRATA_CHECK(model != nullptr, "[parallelize] model is null");
  STRATA_CHECK(opts.make_optimizer != nullptr, "[parallelize] ParallelizeOptions::make_optimizer is not set");
  STRATA_CHECK(mesh.shape() == d.mesh_shape(), "[parallelize] the mesh ", mesh.shape().str(),
               " does not match the degrees ", d.str(), " (build it from dims.mesh_shape())");
  // 0. The layout against the model and the training setup, before anything is built.
  LayoutChecks checks = opts.checks;
  checks.world = mesh.world()->size();
  checks.replicas = opts.replicas.replicas;
  d.validate(checks);
  ParallelModel::Parts parts;
  // 1. Tensor parallel on mesh["tp"] (before the gradient sync, which then sees the shards).
  if (d.tp > 1) {
    if (opts.tp_plan.empty())
      config_fail("parallel.tp", "is " + std::to_string(d.tp) + " but the model (" + model->type_name() +
                                     ") has no tensor-parallel plan (use tp: 1)");
    parts.tp = apply_tp(*model, opts.tp_plan, mesh["tp"]);
  }
  // 2. The model split: this rank's pipeline stages on mesh["pp"], thread replicas in this
  // process, or the whole model.
  if (d.pp > 1)
    parts.split = std::make_unique<PipelineSplit>(model, opts.pp_plan, opts.pipeline, mesh["pp"]);
  else if (opts.replicas.replicas > 0)
    parts.split = std::make_unique<ReplicaSplit>(
        std::make_shared<DataParallel>(model, opts.make_replica, opts.replicas), opts.loss);
  else
    parts.split = std::make_unique<WholeModel>(model, opts.loss);
  // 2b. Context parallel on mesh["cp"]: ring attention in this rank's blocks (after the
  // pipeline split: the stages' own), every sequence split over cp (the first stage
  // splits the tokens, the last the targets; the stages pass (B, T/cp, C)).
  parts.replica = mesh["dp"];
  if (d.cp > 1) {
    parts.cp = apply_cp(*model, mesh["cp"], opts.cp_split);
    // dp x cp: the ranks that hold the same parameters and see different tokens.
    const comm::MeshShape& ms = mesh.shape();
    const std::vector<int> c = mesh.coord();
    const int color = c[size_t(ms.index_of("pp"))] * d.tp + c[size_t(ms.index_of("tp"))];
    const int key = c[size_t(ms.index_of("dp"))] * d.cp + c[size_t(ms.index_of("cp"))];
    parts.replica = mesh.world()->split(color, key, "dp x cp");
  }
  // MoE layers under cp: the balance loss counts each sequence over its cp ranks.
  if (d.cp > 1) apply_moe_cp(*model, mesh["cp"]);
  // 2c. Expert parallel: this rank's experts of every MoE layer, tokens to their owners by
  // all-to-all over groups of ep consecutive dp ranks.
  if (d.ep > 1) {
    if (d.pp == 1 && nn::moe_layers(*model).empty())  // a pipeline stage may hold none
      config_fail("parallel.ep", "is " + std::to_string(d.ep) + " but the model (" + model->type_name() +
                                     ") has no mixture-of-experts layers (set model.moe)");
    parts.ep = std::make_shared<const EpLayout>(apply_ep(*model, *mesh["dp"], *parts.replica, d.ep, d.cp));
  }
  // 3. The gradient sync on the replica group (the cp ranks' gradients are partial sums of
  // one model's): ZeRO, DDP or nothing; the optimizer is built after the split and shards.
  // Under expert parallelism it never sees the experts, which ExpertSync reduces over the
  // ranks holding the same ones.
  const GradSyncOptions so{.zero_stage = d.zero_stage,
                           // the replica group is dp x cp, dp-major: a shard group's dp ranks with all their cp ranks
                           .dp_shard = d.hybrid() ? d.shard_size() * d.cp : 0,
                           .ddp = opts.ddp,
                           .fsdp_prefetch = opts.fsdp_prefetch,
                           .fsdp_wrap = opts.fsdp_wrap,
                           .make_optimizer = opts.make_optimizer};
  if (parts.ep) {
    {
      const ExpertsDetached off(*model);
      parts.sync = make_grad_sync(model, *parts.replica, so);
    }
    parts.sync = make_expert_sync(std::move(parts.sync), *model, parts.ep, opts.make_optimizer);
  } else {
    parts.sync = make_grad_sync(model, *parts.replica, so);
  }
  return std::make_unique<ParallelModel>(std::move(model), mesh, d, std::move(parts));
}

}  // namespace strata::parallel
