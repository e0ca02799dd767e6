// ModelSplit: how this rank runs a batch through its part of the model. The whole model
// runs one forward and backward per micro-batch (whole_model.h; over thread replicas:
// data/replica_split.h); pipeline stages run a schedule over micro-batches
// (pipeline/pipeline_split.h). The handle parallelize() returns drives one of these and
// never asks which.
#pragma once
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <strata/nn/module.h>
#include <strata/optim/grad_scaler.h>
#include <strata/optim/optimizer.h>
#include <strata/parallel/data/grad_sync.h>

namespace strata::parallel {

/// One batch of this rank: input (B, ...) and targets. Every rank passes its batch; under
/// pipeline parallelism the first stage reads the input and the last the targets.
struct Batch {
  Tensor input;
  Tensor target;
};

/// The mean loss of a batch: `model` is what runs the forward (the model, or the thread
/// replicas' wrapper, whose forward returns the whole batch's output).
using LossFn = std::function<Tensor(nn::Module& model, const Tensor& input, const Tensor& target)>;

/// Sums over one evaluated batch.
struct EvalSums {
  double loss_sum = 0;  ///< the batch's mean loss x its samples
  int64_t correct = 0;  ///< samples whose argmax is the target (classifiers)
  int64_t samples = 0;
};

/// What a training step passes to the split.
struct StepContext {
  std::optional<DType> autocast{};        ///< forward and loss under autocast to this dtype
  optim::GradScaler* scaler = nullptr;    ///< scales each loss before its backward (f16)
  int64_t step = 0;                       ///< the step's number, for messages
};

/// How this rank runs its part of the model. Collective where it communicates; not
/// thread-safe.
class ModelSplit {
 public:
  virtual ~ModelSplit() = default;
  /// Forward, loss and backward of one optimizer step's batches (gradient accumulation:
  /// `sync` reduces after the last), the gradient reduction finished. Returns the mean
  /// loss; Error "training diverged" when a loss is not finite.
  virtual double forward_backward(std::span<const Batch> batches, GradSync& sync, const StepContext& ctx) = 0;
  /// One batch without autograd: its loss (through the loss function, or the cross-entropy
  /// of the logits when `classify`) and, when `classify`, the argmax hits.
  virtual EvalSums eval_batch(const Batch& batch, bool classify) = 0;
  /// True when the ranks evaluate together (pipeline stages, each on its own shards);
  /// false: one rank evaluates the whole model alone.
  virtual bool evaluates_together() const { return false; }
  /// True when this rank holds only part of the model (its checkpoint pieces are not the
  /// whole model's, so every rank writes).
  virtual bool holds_part() const { return false; }
  /// `local` summed over the ranks that hold the other parts of the model.
  virtual double sum_over_parts(double local) { return local; }
  /// Names of parameters this rank holds but does not own for norms and checkpoints (the
  /// last stage's copy of a tied embedding).
  virtual const std::vector<std::string>& copies() const {
    static const std::vector<std::string> none;
    return none;
  }
  /// Collective: every rank's model generators take the state of the rank that runs them,
  /// so that rank 0's checkpoint state is the whole model's.
  virtual void sync_generators() {}
  /// Checkpoint state of the split beyond the model's (the replicas' dropout streams).
  virtual nlohmann::json extra_state() const { return nlohmann::json::object(); }
  virtual void load_extra_state(const nlohmann::json&) {}
  /// After each optimizer step (snapshots for the memory report).
  virtual void after_step() {}
  /// Extra lines for the memory report (per replica), "" when none.
  virtual std::string memory_detail(const optim::Optimizer&) const { return ""; }
  /// Independent forward/backward streams in this process (thread replicas), for the MFU.
  virtual int compute_streams() const { return 1; }
  /// The data-parallel strategy's name when the split is one ("DataParallel"), else "".
  virtual std::string strategy() const { return ""; }
  /// ", pipeline over 2 pp rank(s) (1f1b, ...)" or "" (for logs).
  virtual std::string describe() const { return ""; }
  /// Lines a run prints under its layout ("dp: 2 replicas ...") for `batch` samples per step.
  virtual std::vector<std::string> notes(int64_t /*batch*/) const { return {}; }
};

/// Samples of `logits` (B, classes) whose argmax is `target` (B).
int64_t count_correct(const Tensor& logits, const Tensor& target);

/// Error "training diverged at step N: loss is X" unless `loss` is finite.
void check_finite_loss(double loss, int64_t step);

}  // namespace strata::parallel
