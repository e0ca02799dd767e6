// The three gradient synchronisations behind GradSync: none (one replica), DDP and ZeRO.
#include <strata/parallel/data/grad_sync.h>

#include <strata/comm/agreement.h>
#include <strata/comm/process_group.h>
#include <strata/core/error.h>
#include <strata/optim/clip.h>
#include <strata/parallel/checkpoint/layout_io.h>
#include <strata/parallel/tensor/checkpoint.h>
#include <strata/tensor/ops.h>

namespace strata::parallel {

void GradSync::step(optim::GradScaler* scaler) {
  if (!scaler) {
    optimizer().step();
    return;
  }
  scaler->step(optimizer());  // skipped, with a warning naming the parameters, unless finite
  scaler->update();
}

void GradSync::scale_grads(double f) {
  std::vector<Tensor> ps;
  for (const auto& [n, p] : optimizer().named_parameters()) ps.push_back(p);
  optim::scale_grads(ps, f);
}

std::vector<ShardPiece> GradSync::state_pieces(const nn::Module& model, const comm::ProcessGroup& group) {
  return replicated_pieces(model, &optimizer(), group.rank());
}

void GradSync::load_state(const TensorSource& ck, nn::Module& model, bool with_optimizer, const TpLayout* tp,
                          comm::ProcessGroup& world) {
  optim::Optimizer* opt = with_optimizer ? &optimizer() : nullptr;
  if (tp)
    load_tp(ck, model, opt, *tp, &world);
  else
    load_replicated(ck, model, opt, &world);
  // Weights only (a run initialised from another model's weights): the optimizer keeps no
  // state, but 16-bit parameters' f32 masters must become the loaded values.
  if (!opt) optimizer().reload_masters_from_params();
}

namespace {

// One replica: the optimizer over the model's parameters, nothing to exchange.
class LocalSync final : public GradSync {
 public:
  explicit LocalSync(std::unique_ptr<optim::Optimizer> opt) : opt_(std::move(opt)) {}
  optim::Optimizer& optimizer() override { return *opt_; }
  std::string name() const override { return "single process"; }

 private:
  std::unique_ptr<optim::Optimizer> opt_;
};

// DDP: whole gradients averaged by bucketed all-reduces during backward.
class DdpSync final : public GradSync {
 public:
  DdpSync(std::unique_ptr<DistributedDataParallel> ddp, std::unique_ptr<optim::Optimizer> opt)
      : ddp_(std::move(ddp)), opt_(std::move(opt)) {}
  Tensor forward_with(const std::function<Tensor()>& fn) override { return ddp_->forward_with(fn); }
  Scoped no_sync() override { return std::make_shared<NoSyncGuard>(ddp_->no_sync()); }
  void reduce_accumulated() override { ddp_->reduce_accumulated(); }
  void finalize() override { ddp_->finalize(); }
  void zero_grad() override { ddp_->zero_grad(); }  // keeps .grad aliasing the buckets with bucket views
  optim::Optimizer& optimizer() override { return *opt_; }
  bool holds_buckets() const override { return true; }
  std::string name() const override { return "DDP"; }
  DistributedDataParallel& ddp() { return *ddp_; }

 private:
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<optim::Optimizer> opt_;
};

// ZeRO-1/2/3: gradients reduce-scattered into shards, each rank steps its slices. Under
// HSDP `group` is the shard group and the sync owns it and the replicate group (both
// split from the replica group), which the ZeroDataParallel uses.
class ZeroSync final : public GradSync {
 public:
  ZeroSync(std::shared_ptr<comm::ProcessGroup> shard, std::shared_ptr<comm::ProcessGroup> replicate,
           std::unique_ptr<ZeroDataParallel> zero, comm::ProcessGroup& group)
      : shard_(std::move(shard)), replicate_(std::move(replicate)), zero_(std::move(zero)), group_(group) {}
  Tensor forward_with(const std::function<Tensor()>& fn) override { return zero_->forward_with(fn); }
  Scoped no_sync() override { return std::make_shared<ZeroNoSyncGuard>(zero_->no_sync()); }
  void reduce_accumulated() override { zero_->reduce_accumulated(); }
  void finalize() override { zero_->finalize(); }
  // Every rank's slices partition each tensor over the (shard) group; under HSDP the
  // replicas hold equal slices and are not counted again.
  double sum_over_shards(double local) override {
    return comm::all_reduce_host(group_, ops::full({1}, local, DType::f64), comm::ReduceOp::sum).item<double>();
  }
  void step(optim::GradScaler* scaler) override {
    if (scaler && scaler->is_enabled()) {
      scaler->step(zero_->optimizer(), [this] { zero_->step(); });  // a skipped step gathers nothing
      scaler->update();
    } else {
      zero_->step();
    }
  }
  void zero_grad() override { zero_->zero_grad(); }
  optim::Optimizer& optimizer() override { return zero_->optimizer(); }
  Scoped gather_parameters() override {  // a no-op below stage 3
    return std::make_shared<ZeroDataParallel::FullParams>(zero_->summon_full_params());
  }
  std::vector<ShardPiece> state_pieces(const nn::Module&, const comm::ProcessGroup&) override {
    return zero_->state_pieces();
  }
  void load_state(const TensorSource& ck, nn::Module&, bool with_optimizer, const TpLayout* tp,
                  comm::ProcessGroup& world) override {
    if (tp)
      load_tp_zero(ck, *zero_, with_optimizer, *tp, &world);
    else
      load_zero(ck, *zero_, with_optimizer, &world);
  }
  bool shards_state() const override { return true; }
  std::vector<int64_t> flat_unit_sizes() const override {
    std::vector<int64_t> out;
    for (const auto& u : zero_->units()) out.push_back(u.numel);
    return out;
  }
  std::string name() const override {
    return (replicate_ ? "HSDP ZeRO-" : "ZeRO-") + std::to_string(zero_->stage());
  }
  ZeroDataParallel& zero() { return *zero_; }

 private:
  std::shared_ptr<comm::ProcessGroup> shard_, replicate_;  // HSDP only; outlive zero_
  std::unique_ptr<ZeroDataParallel> zero_;
  comm::ProcessGroup& group_;
};

}  // namespace

std::unique_ptr<GradSync> make_grad_sync(std::shared_ptr<nn::Module> model, comm::ProcessGroup& group,
                                         const GradSyncOptions& opts) {
  STRATA_CHECK(opts.make_optimizer != nullptr, "[parallelize] ParallelizeOptions::make_optimizer is not set");
  if (opts.zero_stage > 0) {
    // ZeRO-1/2 units are cut like DDP's buckets (a small first and last one).
    ZeroOptions zo{.stage = opts.zero_stage,
                   .bucket_cap_mb = opts.ddp.bucket_cap_mb,
                   .prefetch = opts.fsdp_prefetch,
                   .broadcast_buffers = opts.ddp.broadcast_buffers,
                   .wrap = opts.fsdp_wrap};
    zo.first_unit_mb = opts.ddp.first_bucket_mb;
    zo.last_unit_mb = opts.ddp.last_bucket_mb;
    const int n = group.size(), r = group.rank(), S = opts.dp_shard;
    if (S > 0 && S < n) {
      STRATA_CHECK(n % S == 0, "[parallelize] dp_shard ", S, " does not divide the ", n, " ranks of '", group.name(), "'");
      // Shard group: S consecutive ranks of the group (r / S); replicate group: the ranks
      // at the same position r % S of every shard group. Both splits are collective.
      auto shard = group.split(r / S, r, "dp_shard");
      auto replicate = group.split(r % S, r, "dp_replicate");
      auto zero = apply_zero(std::move(model), *shard, zo, opts.make_optimizer, replicate.get());
      comm::ProcessGroup& g = *shard;
      return std::make_unique<ZeroSync>(std::move(shard), std::move(replicate), std::move(zero), g);
    }
    return std::make_unique<ZeroSync>(nullptr, nullptr, apply_zero(std::move(model), group, zo, opts.make_optimizer),
                                      group);
  }
  if (group.size() == 1) return std::make_unique<LocalSync>(opts.make_optimizer(model->named_parameters()));
  auto ddp = apply_ddp(model, group, opts.ddp);  // broadcasts rank 0's weights
  return std::make_unique<DdpSync>(std::move(ddp), opts.make_optimizer(model->named_parameters()));
}

DistributedDataParallel* ddp_of(GradSync& sync) {
  if (auto* s = dynamic_cast<DdpSync*>(&sync)) return &s->ddp();
  return sync.wrapped() ? ddp_of(*sync.wrapped()) : nullptr;
}

ZeroDataParallel* zero_of(GradSync& sync) {
  if (auto* s = dynamic_cast<ZeroSync*>(&sync)) return &s->zero();
  return sync.wrapped() ? zero_of(*sync.wrapped()) : nullptr;
}

}  // namespace strata::parallel
