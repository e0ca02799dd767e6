// The pipeline's step: the schedule, the tied-gradient exchange, then the dp reduction.
#include <strata/parallel/pipeline/pipeline_split.h>

#include <strata/autograd/autocast.h>
#include <strata/autograd/functions.h>
#include <strata/core/config.h>
#include <strata/core/memory.h>
#include <strata/tensor/ops.h>

namespace strata::parallel {

PipelineSplit::PipelineSplit(std::shared_ptr<nn::Module> model, const PipelinePlan& plan, const PipelineOptions& opts,
                             std::shared_ptr<comm::ProcessGroup> pp)
    : model_(std::move(model)), pp_(std::move(pp)) {
  if (plan.empty())
    config_fail("parallel.pp", "is " + std::to_string(pp_->size()) + " but the model (" + model_->type_name() +
                                   ") has no pipeline plan (use pp: 1)");
  const ScheduleShape shape{opts.schedule, pp_->size(), opts.microbatches, opts.virtual_stages};
  const std::string bad = shape.invalid();
  if (!bad.empty()) config_fail(bad.substr(0, bad.find(' ')), bad.substr(bad.find(' ') + 1));
  std::vector<PipelineStageSpec> stages = plan_stages(*model_, plan, shape.stages());
  std::vector<PipelineStageSpec> mine;
  for (const auto& st : stages)
    if (shape.owner(st.stage) == pp_->rank()) mine.push_back(st);
  keep_stages(*model_, plan, mine);
  if (!plan.tied.empty()) embed_group_ = pp_->new_group({0, pp_->size() - 1}, "embedding");
  exec_ = std::make_unique<PipelineExecutor>(model_, plan, shape, std::move(stages), *pp_);
  if (opts.exchanges != PipelineExchanges::automatic) exec_->set_inline_exchanges(opts.exchanges == PipelineExchanges::inline_);
  // Its batch_isend_irecv (the tied sum under inline exchanges) runs on the caller's thread.
  if (embed_group_) embed_group_->set_inline_p2p(true);
  bool first = false, last = false;
  for (const auto& s : exec_->my_stages()) {
    first = first || s.first();
    last = last || s.last();
  }
  if (last && !first) copies_ = plan.tied;
}

double PipelineSplit::forward_backward(std::span<const Batch> batches, GradSync& sync, const StepContext& ctx) {
  STRATA_CHECK(batches.size() == 1, "[pipeline] one batch per step, got ", batches.size(),
               " (the schedule accumulates over its micro-batches: train.grad_accum_steps must be 1)");
  const Batch& b = batches[0];
  AutocastGuard amp(ctx.autocast);
  double loss = 0;
  {
    // ZeRO-3: every unit of this rank's stages stays gathered for the whole schedule (it
    // interleaves micro-batches' forwards and backwards, so a unit would be gathered and
    // freed once per micro-batch and pass); the gradients are reduce-scattered by
    // finalize() after it, as under ZeRO-2. Costs a stage's full parameters.
    const Scoped gathered = sync.gather_parameters();
    {
      // The dp reduction waits until every micro-batch is in (and the tied sum is done).
      const Scoped pause = sync.no_sync();
      loss = exec_->run(b.input, b.target, b.input.shape());
    }
    sum_tied_grads();
    // The dp reduction of the gradients the micro-batches accumulated (DDP buckets, ZeRO
    // reduce-scatters), started explicitly.
    sync.reduce_accumulated();
  }
  check_finite_loss(loss, ctx.step);
  sync.finalize();
  return loss;
}

void PipelineSplit::sum_tied_grads() {
  if (!embed_group_) return;
  // The embedding group: the tied copies' gradients summed, as one model has them.
  for (const std::string& n : exec_->plan().tied) {
    Tensor p = model_->parameter(n);
    Tensor g = p.grad();
    if (!g.defined()) {
      g = ops::zeros(p.shape(), p.dtype(), p.device());
      p.set_grad(g);
    }
    if (exec_->inline_exchanges() && embed_group_->size() == 2 && embed_group_->device().is_cpu()) {
      // Inline exchanges (the pipeline's own choice for this host): the two copies'
      // gradients are swapped by one batch this thread posts and completes, then summed
      // (a comm thread's all-reduce adds its wake-ups after every step). a + b == b + a in
      // IEEE arithmetic, so both copies get the same bits, as from the all-reduce of two.
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

EvalSums PipelineSplit::eval_batch(const Batch& b, bool classify) {
  const int64_t n = b.input.size(0);
  if (!classify) return {exec_->eval_loss(b.input, b.target, b.input.shape()) * double(n), 0, n};
  // The last stage's rank holds the logits; every pp rank gets the sums.
  const Tensor logits = exec_->eval_forward(b.input, b.input.shape());
  std::vector<double> part{0.0, 0.0};
  if (logits.defined()) part = {cross_entropy(logits, b.target).item<double>() * double(n), double(count_correct(logits, b.target))};
  const std::vector<double> all =
      comm::all_reduce_host(*pp_, ops::from_vector(part, {2}), comm::ReduceOp::sum).to_vector<double>();
  return {all[0], int64_t(all[1]), n};
}

double PipelineSplit::sum_over_parts(double local) {
  return comm::all_reduce_host(*pp_, ops::full({1}, local, DType::f64), comm::ReduceOp::sum).item<double>();
}

void PipelineSplit::sync_generators() {
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
      comm::all_reduce_host(*pp_, ops::from_vector(st, {int64_t(st.size())}), comm::ReduceOp::sum).to_vector<int64_t>();
  for (size_t i = 0; i < gens.size(); ++i) gens[i]->set_state(uint64_t(all[2 * i]), uint64_t(all[2 * i + 1]));
}

std::string PipelineSplit::describe() const {
  const ScheduleShape& s = exec_->shape();
  return std::string(", pipeline over ") + std::to_string(s.pp) + " pp rank(s) (" + schedule_name(s.kind) + ", " +
         std::to_string(s.microbatches) + " micro-batches, " + std::to_string(s.stages()) + " stages)";
}

}  // namespace strata::parallel
