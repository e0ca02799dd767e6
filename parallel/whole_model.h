// The whole model on this rank: one forward and backward per micro-batch, the gradient
// reduction after the last (the split of every layout without pipeline stages).
#pragma once
#include <memory>

#include <strata/parallel/model_split.h>

namespace strata::parallel {

/// Runs `forward` (the model, or a wrapper whose forward runs it: thread replicas) with
/// `loss`. Not thread-safe.
class WholeModel : public ModelSplit {
 public:
  WholeModel(std::shared_ptr<nn::Module> forward, LossFn loss);
  double forward_backward(std::span<const Batch> batches, GradSync& sync, const StepContext& ctx) override;
  EvalSums eval_batch(const Batch& batch, bool classify) override;

 protected:
  nn::Module& forward_module() { return *forward_; }

 private:
  std::shared_ptr<nn::Module> forward_;
  LossFn loss_;
};

}  // namespace strata::parallel
