// One forward and backward per micro-batch; the first ones accumulate under no_sync.
#include <strata/parallel/whole_model.h>

#include <cmath>

#include <strata/autograd/autocast.h>
#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/core/error.h>
#include <strata/core/trace.h>
#include <strata/nn/moe.h>
#include <strata/tensor/ops.h>

namespace strata::parallel {

void check_finite_loss(double loss, int64_t step) {
  if (!std::isfinite(loss))
    STRATA_THROW(Error, "training diverged at step ", step, ": loss is ", loss,
                 " (lower optim.lr or set train.grad_clip)");
}

int64_t count_correct(const Tensor& logits, const Tensor& target) {
  const Tensor pred = ops::to_cpu(ops::argmax(logits, 1));
  const Tensor t = ops::to_cpu(target);
  const int64_t* p = pred.data<int64_t>();
  const int64_t* y = t.data<int64_t>();
  int64_t n = 0;
  for (int64_t i = 0; i < pred.numel(); ++i) n += p[i] == y[i];
  return n;
}

WholeModel::WholeModel(std::shared_ptr<nn::Module> forward, LossFn loss)
    : forward_(std::move(forward)), loss_(std::move(loss)) {}

double WholeModel::forward_backward(std::span<const Batch> batches, GradSync& sync, const StepContext& ctx) {
  STRATA_CHECK(loss_ != nullptr, "[train_step] ParallelizeOptions::loss is not set (the step needs the batch's loss)");
  const size_t n = batches.size();
  double sum = 0;
  for (size_t a = 0; a < n; ++a) {
    const Batch& b = batches[a];
    // The first n-1 micro-batches only accumulate locally; the last one's backward
    // reduces the accumulated sum.
    const Scoped pause = a + 1 < n ? sync.no_sync() : nullptr;
    // MoE auxiliary losses enter the backward weighted as this loss is (forward and
    // backward: a recomputed block injects them during the backward).
    const nn::AuxLossWeight aux_weight((n > 1 ? 1.0 / double(n) : 1.0) * (ctx.scaler ? ctx.scaler->get_scale() : 1.0));
    Tensor loss;
    {
      trace::Scope slice("forward");
      AutocastGuard amp(ctx.autocast);  // forward and loss only; backward runs in the ops' own dtypes
      loss = sync.forward_with([&] { return loss_(*forward_, b.input, b.target); });
    }
    const double lv = loss.item<double>();
    check_finite_loss(lv, ctx.step);
    if (n > 1) loss = loss * (1.0 / double(n));
    backward(ctx.scaler ? ctx.scaler->scale(loss) : loss);
    {
      trace::Scope slice("finalize");
      sync.finalize();  // no-op inside no_sync
    }
    sum += lv;
  }
  return sum / double(n);
}

EvalSums WholeModel::eval_batch(const Batch& b, bool classify) {
  const int64_t n = b.input.size(0);
  STRATA_CHECK(classify || loss_ != nullptr, "[eval_batch] ParallelizeOptions::loss is not set");
  if (!classify) return {loss_(*forward_, b.input, b.target).item<double>() * double(n), 0, n};
  const Tensor logits = forward_->forward(b.input);
  return {cross_entropy(logits, b.target).item<double>() * double(n), count_correct(logits, b.target), n};
}

}  // namespace strata::parallel
