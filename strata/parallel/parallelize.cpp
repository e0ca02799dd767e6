// parallelize(): tensor parallel, pipeline split, then DDP / ZeRO on dp, composed once;
// ParallelModel forwards each step's calls to whichever strategies were applied.
#include <strata/parallel/parallelize.h>

#include <cmath>

#include <strata/core/config.h>
#include <strata/optim/clip.h>
#include <strata/parallel/tp_checkpoint.h>

namespace strata::parallel {

ParallelModel::ParallelModel(std::shared_ptr<nn::Module> model, comm::DeviceMesh mesh, ParallelDims dims,
                             std::unique_ptr<DistributedDataParallel> ddp, std::unique_ptr<ZeroDataParallel> zero,
                             std::unique_ptr<optim::Optimizer> optimizer, std::optional<TpLayout> tp)
    : model_(std::move(model)),
      mesh_(std::move(mesh)),
      dims_(dims),
      ddp_(std::move(ddp)),
      zero_(std::move(zero)),
      optimizer_(std::move(optimizer)),
      tp_(std::move(tp)) {
  STRATA_CHECK((zero_ != nullptr) != (optimizer_ != nullptr),
               "[parallelize] exactly one of ZeRO's sharded optimizer and a plain optimizer");
  if (optimizer_)
    for (const auto& [n, p] : optimizer_->named_parameters()) params_.push_back(p);
}

ParallelModel::~ParallelModel() = default;

Tensor ParallelModel::forward_with(const std::function<Tensor()>& fn) {
  if (ddp_) return ddp_->forward_with(fn);
  if (zero_) return zero_->forward_with(fn);
  return fn();
}

void ParallelModel::finalize() {
  if (ddp_) ddp_->finalize();
  if (zero_) zero_->finalize();
}

double ParallelModel::clip_grad_norm(double max_norm) {
  if (!tp_) {
    if (zero_) return zero_->clip_grad_norm(max_norm);  // the shards' norms summed over dp
    return optim::clip_grad_norm(params_, max_norm);   // gradients are whole (and equal over dp)
  }
  // Tensor parallel: tp-sharded parameters summed over tp, replicated ones counted once.
  // Under ZeRO the optimizer's parameters are this rank's dp slices (their .grad views
  // of the gradient shard), which partition every tensor over dp: sum over dp too.
  STRATA_CHECK(max_norm > 0, "[clip_grad_norm] max_norm must be > 0, got ", max_norm);
  const optim::NamedTensors& named = optimizer().named_parameters();
  double sq = tp_grad_norm_sq(named, *tp_);
  if (zero_) sq = comm::all_reduce_host(*mesh_["dp"], ops::full({1}, sq, DType::f64), comm::ReduceOp::sum).item<double>();
  const double total = std::sqrt(sq), f = optim::clip_factor(total, max_norm);
  if (f < 1.0) {
    std::vector<Tensor> ps;
    for (const auto& [n, p] : named) ps.push_back(p);
    optim::scale_grads(ps, f);
  }
  return total;
}

void ParallelModel::step(optim::GradScaler* scaler) {
  if (zero_) {
    // The scaler's overflow check would have to be agreed across the shards first.
    STRATA_CHECK(scaler == nullptr || !scaler->is_enabled(),
                 "[parallelize] f16 loss scaling is not supported with ZeRO (use bf16)");
    zero_->step();
    return;
  }
  if (scaler) {
    scaler->step(*optimizer_);  // skipped, with a warning naming the parameters, unless finite
    scaler->update();
  } else {
    optimizer_->step();
  }
}

void ParallelModel::zero_grad() {
  if (zero_)
    zero_->zero_grad();
  else if (ddp_)
    ddp_->zero_grad();  // keeps .grad aliasing the buckets with gradient_as_bucket_view
  else
    optimizer_->zero_grad();
}

NoSync ParallelModel::no_sync() {
  if (ddp_) return NoSync(ddp_->no_sync());
  if (zero_) return NoSync(zero_->no_sync());
  return NoSync();
}

ParallelModel::FullParams ParallelModel::summon_full_params() {
  std::optional<ZeroDataParallel::FullParams> z;
  if (zero_) z.emplace(zero_->summon_full_params());
  return FullParams(std::move(z), tp_ ? std::make_unique<TpWholeModules>(*model_, *tp_) : nullptr);
}

std::vector<ShardPiece> ParallelModel::state_pieces() const {
  if (tp_)  // each tp rank's shard, from dp rank 0 (or every dp rank's ZeRO slices of it)
    return tp_global_pieces(zero_ ? zero_->state_pieces() : replicated_pieces(*model_, optimizer_.get(), mesh_.rank("dp")),
                            *tp_);
  if (zero_) return zero_->state_pieces();
  return replicated_pieces(*model_, optimizer_.get(), mesh_.world()->rank());
}

void ParallelModel::load_state(const ShardedCheckpointReader& ck, bool with_optimizer) {
  if (tp_ && zero_)
    load_tp_zero(ck, *zero_, with_optimizer, *tp_);
  else if (tp_)
    load_tp(ck, *model_, with_optimizer ? optimizer_.get() : nullptr, *tp_);
  else if (zero_)
    load_zero(ck, *zero_, with_optimizer);
  else
    load_replicated(ck, *model_, with_optimizer ? optimizer_.get() : nullptr);
}

optim::Optimizer& ParallelModel::optimizer() { return zero_ ? zero_->optimizer() : *optimizer_; }

std::vector<int64_t> ParallelModel::flat_unit_sizes() const {
  std::vector<int64_t> out;
  if (zero_)
    for (const auto& u : zero_->units()) out.push_back(u.numel);
  return out;
}

std::string ParallelModel::describe() const {
  const comm::ProcessGroup& dp = *mesh_["dp"];
  std::string s = dims_.dp_strategy() + " over " + std::to_string(dp.size()) + " dp rank(s)";
  if (ddp_ || zero_)
    s += std::string(" (") + dp.backend_kind() + " backend, comm.algorithm " + comm::algorithm_name(dp.algorithm()) + ")";
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
  // 1. Tensor parallel on mesh["tp"] (before DDP/ZeRO, which then see the shards).
  std::optional<TpLayout> tp;
  if (d.tp > 1) {
    if (opts.tp_plan.empty())
      config_fail("parallel.tp", "is " + std::to_string(d.tp) + " but the model (" + model->type_name() +
                                     ") has no tensor-parallel plan (use tp: 1)");
    tp = apply_tp(*model, opts.tp_plan, mesh["tp"]);
  }
  // 2. The pipeline split: resolve() refuses pp > 1 until it exists.
  STRATA_CHECK(d.pp == 1, "[parallelize] pp must be 1 in this version, got ", d.str());
  // 3. Data parallel on mesh["dp"].
  comm::ProcessGroup& dp = *mesh["dp"];
  if (d.zero_stage > 0) {
    // ZeRO-1/2 units are cut like DDP's buckets (a small first and last one).
    ZeroOptions zo{.stage = d.zero_stage,
                   .bucket_cap_mb = opts.ddp.bucket_cap_mb,
                   .prefetch = opts.fsdp_prefetch,
                   .broadcast_buffers = opts.ddp.broadcast_buffers,
                   .wrap = opts.fsdp_wrap};
    zo.first_unit_mb = opts.ddp.first_bucket_mb;
    zo.last_unit_mb = opts.ddp.last_bucket_mb;
    auto zero = apply_zero(model, dp, zo, opts.make_optimizer);
    return std::make_unique<ParallelModel>(std::move(model), mesh, d, nullptr, std::move(zero), nullptr, std::move(tp));
  }
  std::unique_ptr<DistributedDataParallel> ddp;
  if (dp.size() > 1) ddp = apply_ddp(model, dp, opts.ddp);  // broadcasts rank 0's weights
  auto optimizer = opts.make_optimizer(model->named_parameters());
  return std::make_unique<ParallelModel>(std::move(model), mesh, d, std::move(ddp), nullptr, std::move(optimizer),
                                         std::move(tp));
}

}  // namespace strata::parallel
