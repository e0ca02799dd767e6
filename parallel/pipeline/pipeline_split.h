// The pipeline as a ModelSplit: this rank's stages run a schedule over the step's
// micro-batches (executor.h); the first and last stage sum a tied embedding's gradient
// between them; the data-parallel reduction starts after the schedule.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <strata/parallel/model_split.h>
#include <strata/parallel/pipeline/executor.h>

namespace strata::parallel {

/// Splits `model` into the stages of `plan` over `pp` (collective over pp) and keeps this
/// rank's (keep_stages). ConfigError naming the parallel.* key when the schedule or the
/// split is impossible. The model and the groups must outlive the split.
class PipelineSplit final : public ModelSplit {
 public:
  PipelineSplit(std::shared_ptr<nn::Module> model, const PipelinePlan& plan, const PipelineOptions& opts,
                std::shared_ptr<comm::ProcessGroup> pp);

  /// One batch per step (the schedule's micro-batches accumulate): under ZeRO-3 this rank's
  /// units stay gathered for the whole schedule (one all-gather per unit, not one per
  /// micro-batch and pass), the tied copies' gradients are summed, then `sync` reduces.
  double forward_backward(std::span<const Batch> batches, GradSync& sync, const StepContext& ctx) override;
  /// Every pp rank takes part; the loss sums are every rank's (the last stage's, summed over pp).
  EvalSums eval_batch(const Batch& batch, bool classify) override;
  bool evaluates_together() const override { return true; }
  bool holds_part() const override { return true; }
  double sum_over_parts(double local) override;
  const std::vector<std::string>& copies() const override { return copies_; }
  void sync_generators() override;
  std::string describe() const override;

  PipelineExecutor& executor() { return *exec_; }

 private:
  void sum_tied_grads();

  std::shared_ptr<nn::Module> model_;
  std::shared_ptr<comm::ProcessGroup> pp_;
  std::unique_ptr<PipelineExecutor> exec_;
  std::shared_ptr<comm::ProcessGroup> embed_group_;  // first + last stage (tied parameters); null elsewhere
  std::vector<std::string> copies_;                  // the last stage's tied copies
};

}  // namespace strata::parallel
