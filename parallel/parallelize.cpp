// parallelize(): tensor parallel, pipeline split, then DDP / ZeRO on dp, composed once;
// ParallelModel forwards each step's calls to whichever strategies were applied.
#include <strata/parallel/parallelize.h>

#include <algorithm>
#include <cmath>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/core/config.h>
#include <strata/core/memory.h>
#include <strata/optim/clip.h>
#include <strata/parallel/tensor/checkpoint.h>

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

double ParallelModel::pp_norm_sq(double local) const {
  return comm::all_reduce_host(*mesh_["pp"], ops::full({1}, local, DType::f64), comm::ReduceOp::sum).item<double>();
}

double ParallelModel::clip_grad_norm(double max_norm) {
  if (pipeline_) {
    // Every stage's share (under tp its shards summed over tp and its replicated tensors
    // once; under ZeRO its dp slices, summed over dp), summed over pp; the last stage's
    // copy of a tied parameter is not counted again.
    STRATA_CHECK(max_norm > 0, "[clip_grad_norm] max_norm must be > 0, got ", max_norm);
    std::vector<Tensor> ps;
    optim::NamedTensors own;
    for (const auto& [n, p] : optimizer().named_parameters()) {
      ps.push_back(p);
      if (std::find(copies_.begin(), copies_.end(), n) == copies_.end()) own.emplace_back(n, p);
    }
    double sq = 0;
    if (tp_) {
      sq = tp_grad_norm_sq(own, *tp_);
    } else {
      std::vector<Tensor> ts;
      for (const auto& [n, p] : own) ts.push_back(p);
      sq = optim::grad_norm_sq(ts);
    }
    // ZeRO shards over dp (x cp under context parallelism: replica_group()).
    if (zero_) sq = comm::all_reduce_host(replica_group(), ops::full({1}, sq, DType::f64), comm::ReduceOp::sum).item<double>();
    const double total = std::sqrt(pp_norm_sq(sq)), f = optim::clip_factor(total, max_norm);
    if (f < 1.0) optim::scale_grads(ps, f);
    return total;
  }
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
  if (zero_) sq = comm::all_reduce_host(replica_group(), ops::full({1}, sq, DType::f64), comm::ReduceOp::sum).item<double>();
  const double total = std::sqrt(sq), f = optim::clip_factor(total, max_norm);
  if (f < 1.0) {
    std::vector<Tensor> ps;
    for (const auto& [n, p] : named) ps.push_back(p);
    optim::scale_grads(ps, f);
  }
  return total;
}

void ParallelModel::unscale_(optim::GradScaler& scaler) {
  if (!zero_) {
    scaler.unscale_(optimizer());
    return;
  }
  comm::ProcessGroup& dp = replica_group();
  scaler.unscale_(optimizer(), [&dp](bool found_inf) {
    const Tensor f = ops::full({1}, found_inf ? 1.0 : 0.0, DType::f64);
    return comm::all_reduce_host(dp, f, comm::ReduceOp::max).item<double>() > 0;
  });
}

void ParallelModel::step(optim::GradScaler* scaler) {
  if (zero_) {
    if (scaler && scaler->is_enabled()) {
      scaler->step(zero_->optimizer(), [this] { zero_->step(); });  // a skipped step gathers nothing
      scaler->update();
    } else {
      zero_->step();
    }
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
  // Under pp a rank holds only its stages: the stages evaluate together (the executor's
  // eval_loss) with their tp shards in place, so only ZeRO-3's units are gathered.
  return FullParams(std::move(z), tp_ && !pipeline_ ? std::make_unique<TpWholeModules>(*model_, *tp_) : nullptr,
                    cp_ ? std::make_unique<CpSuspended>(*model_, *cp_) : nullptr);
}

std::vector<ShardPiece> ParallelModel::state_pieces() const {
  if (pipeline_) {  // each stage's own tensors under their global names (a tied copy once)
    // Replicated tensors from rank 0 of the dp (x cp) group of this (pp, tp) coordinate.
    std::vector<ShardPiece> all =
        zero_ ? zero_->state_pieces() : replicated_pieces(*model_, optimizer_.get(), replica_group().rank());
    if (tp_) all = tp_global_pieces(all, *tp_);  // each tp rank's shard as ranges of the global tensors
    std::vector<ShardPiece> out;
    for (auto& p : all) {
      const std::string bare = p.name.substr(p.name.find('.') + 1);  // "exp_avg.wte.weight" -> "wte.weight"
      const bool copy = std::find(copies_.begin(), copies_.end(), p.name) != copies_.end() ||
                        std::find(copies_.begin(), copies_.end(), bare) != copies_.end();
      if (!copy) out.push_back(std::move(p));
    }
    return out;
  }
  if (tp_)  // each tp rank's shard, from dp rank 0 (or every dp rank's ZeRO slices of it)
    return tp_global_pieces(zero_ ? zero_->state_pieces() : replicated_pieces(*model_, optimizer_.get(), replica_group().rank()),
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

void ParallelModel::set_pipeline(std::unique_ptr<PipelineExecutor> exec, std::shared_ptr<comm::ProcessGroup> embed_group) {
  pipeline_ = std::move(exec);
  embed_group_ = std::move(embed_group);
  // Its batch_isend_irecv (the tied sum under inline exchanges) runs on the caller's thread.
  if (embed_group_) embed_group_->set_inline_p2p(true);
  copies_.clear();
  bool first = false, last = false;
  for (const auto& s : pipeline_->my_stages()) {
    first = first || s.first();
    last = last || s.last();
  }
  if (last && !first) copies_ = pipeline_->plan().tied;
}

double ParallelModel::pipeline_step(const Tensor& input, const Tensor& target, const Shape& batch_shape) {
  STRATA_CHECK(pipeline_ != nullptr, "[parallelize] pipeline_step() needs pp > 1");
  // ZeRO-3 under pp: every unit of this rank's stages stays gathered for the whole step
  // (the schedule interleaves micro-batches' forwards and backwards, so a unit would be
  // gathered and freed once per micro-batch and pass); the gradients are reduce-scattered
  // by finalize() after the schedule, as under ZeRO-2. Costs a stage's full parameters.
  std::optional<ZeroDataParallel::FullParams> gathered;
  if (zero_ && zero_->stage() == 3) gathered.emplace(zero_->summon_full_params());
  double loss = 0;
  {
    // The dp reduction waits until every micro-batch is in (and the tied sum is done).
    NoSync ns = no_sync();
    loss = pipeline_->run(input, target, batch_shape);
  }
  if (embed_group_) {  // the embedding group: the tied copies' gradients summed, as one model has them
    for (const std::string& n : pipeline_->plan().tied) {
      Tensor p = model_->parameter(n);
      Tensor g = p.grad();
      if (!g.defined()) {
        g = ops::zeros(p.shape(), p.dtype(), p.device());
        p.set_grad(g);
      }
      if (pipeline_->inline_exchanges() && embed_group_->size() == 2 && embed_group_->device().is_cpu()) {
        // Inline exchanges (the pipeline's own choice for this host): the two copies'
        // gradients are swapped by one batch this thread posts and completes, then summed.
        // The comm thread's all-reduce added its wake-ups after every step (docs/pipeline.md,
        // "Where the step goes"). a + b == b + a in IEEE arithmetic, so both copies get the
        // same bits, as from the all-reduce of two.
        Tensor theirs;
        {
          MemoryScope scope(MemCategory::comm);
          theirs = ops::empty(g.shape(), g.dtype(), g.device());
        }
        const int peer = 1 - embed_group_->rank();
        embed_group_->batch_isend_irecv({{comm::P2POp::Kind::send, g, peer, 0}, {comm::P2POp::Kind::recv, theirs, peer, 0}},
                                        "pipeline tied gradient " + n)
            .wait();
        ops::add_(g, theirs);
      } else {
        embed_group_->all_reduce(g, comm::ReduceOp::sum).wait();
      }
    }
  }
  // The dp reduction of the gradients the micro-batches accumulated (DDP buckets, ZeRO
  // reduce-scatters), started explicitly; the trainer's finalize() waits for it.
  if (ddp_) ddp_->reduce_accumulated();
  if (zero_) zero_->reduce_accumulated();
  return loss;
}

void ParallelModel::sync_pipeline_generators() {
  if (!pipeline_) return;
  const std::vector<Generator*> gens = model_->generators();
  const std::vector<char> owned = owned_generators(*model_);
  // Each generator runs on exactly one stage: the sum over pp of (owner's state, zeros
  // elsewhere) is the owner's state, exactly (integers).
  std::vector<int64_t> st(2 * gens.size(), 0);
  for (size_t i = 0; i < gens.size(); ++i)
    if (owned[i]) {
      st[2 * i] = int64_t(gens[i]->seed());
      st[2 * i + 1] = int64_t(gens[i]->offset());
    }
  const std::vector<int64_t> all =
      comm::all_reduce_host(*mesh_["pp"], ops::from_vector(st, {int64_t(st.size())}), comm::ReduceOp::sum)
          .to_vector<int64_t>();
  for (size_t i = 0; i < gens.size(); ++i) gens[i]->set_state(uint64_t(all[2 * i]), uint64_t(all[2 * i + 1]));
}

optim::Optimizer& ParallelModel::optimizer() { return zero_ ? zero_->optimizer() : *optimizer_; }

std::vector<int64_t> ParallelModel::flat_unit_sizes() const {
  std::vector<int64_t> out;
  if (zero_)
    for (const auto& u : zero_->units()) out.push_back(u.numel);
  return out;
}

void ParallelModel::set_context_parallel(CpLayout cp, std::shared_ptr<comm::ProcessGroup> replica) {
  cp_ = std::move(cp);
  replica_ = std::move(replica);
}

std::string ParallelModel::describe() const {
  const comm::ProcessGroup& dp = replica_group();
  std::string s = dims_.dp_strategy() + " over " + std::to_string(dp.size()) + (replica_ ? " dp x cp" : " dp") + " rank(s)";
  if (ddp_ || zero_)
    s += std::string(" (") + dp.backend_kind() + " backend, comm.algorithm " + comm::algorithm_name(dp.algorithm()) + ")";
  if (pipeline_)
    s += std::string(", pipeline over ") + std::to_string(pipeline_->shape().pp) + " pp rank(s) (" +
         schedule_name(pipeline_->shape().kind) + ", " + std::to_string(pipeline_->shape().microbatches) +
         " micro-batches, " + std::to_string(pipeline_->shape().stages()) + " stages)";
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
  // 1. Tensor parallel on mesh["tp"] (before DDP/ZeRO, which then see the shards).
  std::optional<TpLayout> tp;
  if (d.tp > 1) {
    if (opts.tp_plan.empty())
      config_fail("parallel.tp", "is " + std::to_string(d.tp) + " but the model (" + model->type_name() +
                                     ") has no tensor-parallel plan (use tp: 1)");
    tp = apply_tp(*model, opts.tp_plan, mesh["tp"]);
  }
  // 2. The pipeline split on mesh["pp"]: this rank keeps its stages' modules.
  std::unique_ptr<PipelineExecutor> pipe;
  std::shared_ptr<comm::ProcessGroup> embed_group;
  if (d.pp > 1) {
    if (opts.pp_plan.empty())
      config_fail("parallel.pp", "is " + std::to_string(d.pp) + " but the model (" + model->type_name() +
                                     ") has no pipeline plan (use pp: 1)");
    const ScheduleShape shape{opts.pipeline.schedule, d.pp, opts.pipeline.microbatches, opts.pipeline.virtual_stages};
    const std::string bad = shape.invalid();
    if (!bad.empty()) config_fail(bad.substr(0, bad.find(' ')), bad.substr(bad.find(' ') + 1));
    comm::ProcessGroup& ppg = *mesh["pp"];
    std::vector<PipelineStageSpec> stages = plan_stages(*model, opts.pp_plan, shape.stages());
    std::vector<PipelineStageSpec> mine;
    for (const auto& st : stages)
      if (shape.owner(st.stage) == ppg.rank()) mine.push_back(st);
    keep_stages(*model, opts.pp_plan, mine);
    if (!opts.pp_plan.tied.empty()) embed_group = ppg.new_group({0, d.pp - 1}, "embedding");
    pipe = std::make_unique<PipelineExecutor>(model, opts.pp_plan, shape, std::move(stages), ppg);
    if (opts.pipeline.exchanges != PipelineExchanges::automatic)
      pipe->set_inline_exchanges(opts.pipeline.exchanges == PipelineExchanges::inline_);
  }
  // 2b. Context parallel on mesh["cp"]: ring attention in this rank's blocks (after the
  // pipeline split: the stages' own), every sequence split over cp (the first stage
  // splits the tokens, the last the targets; the stages pass (B, T/cp, C)).
  std::optional<CpLayout> cp;
  std::shared_ptr<comm::ProcessGroup> replica;  // dp x cp: the ranks that hold the same parameters
  if (d.cp > 1) {
    cp = apply_cp(*model, mesh["cp"], opts.cp_split);
    const comm::MeshShape& ms = mesh.shape();
    const std::vector<int> c = mesh.coord();
    const int color = c[size_t(ms.index_of("pp"))] * d.tp + c[size_t(ms.index_of("tp"))];
    const int key = c[size_t(ms.index_of("dp"))] * d.cp + c[size_t(ms.index_of("cp"))];
    replica = mesh.world()->split(color, key, "dp x cp");
  }
  const auto finish = [&](std::unique_ptr<ParallelModel> pm) {
    if (pipe) pm->set_pipeline(std::move(pipe), std::move(embed_group));
    if (cp) pm->set_context_parallel(std::move(*cp), replica);
    return pm;
  };
  // 3. Data parallel on mesh["dp"] (x cp: the cp ranks' gradients are partial sums of one model's).
  comm::ProcessGroup& dp = replica ? *replica : *mesh["dp"];
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
    return finish(
        std::make_unique<ParallelModel>(std::move(model), mesh, d, nullptr, std::move(zero), nullptr, std::move(tp)));
  }
  std::unique_ptr<DistributedDataParallel> ddp;
  if (dp.size() > 1) ddp = apply_ddp(model, dp, opts.ddp);  // broadcasts rank 0's weights
  auto optimizer = opts.make_optimizer(model->named_parameters());
  return finish(std::make_unique<ParallelModel>(std::move(model), mesh, d, std::move(ddp), nullptr,
                                                std::move(optimizer), std::move(tp)));
}

}  // namespace strata::parallel
