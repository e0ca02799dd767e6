// Optimizer base: the parameter list, lr, step count, zero_grad and checked state
// save/restore. Subclasses implement step() with the fused raw kernels.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <strata/tensor/tensor.h>

namespace strata::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// What a checkpoint stores for an optimizer: hyper-parameters and counters as JSON,
/// per-parameter state tensors by name ("exp_avg.<param name>").
struct OptimizerState {
  nlohmann::json scalars;
  NamedTensors tensors;
};

/// Holds named parameters (handles sharing storage with the model). Parameters whose
/// .grad is undefined are skipped by step(), like PyTorch. Not thread-safe.
class Optimizer {
 public:
  explicit Optimizer(NamedTensors named_params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter that has a .grad; increments step_count().
  virtual void step() = 0;
  virtual std::string type_name() const = 0;
  /// Drops the .grad of every parameter (set_to_none=True).
  void zero_grad();
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  int64_t step_count() const { return step_; }
  const NamedTensors& named_parameters() const { return params_; }
  /// The per-parameter state kinds this optimizer keeps ("exp_avg", "exp_avg_sq"; SGD with
  /// momentum "momentum_buffer"); state_dict() names tensors "<kind>.<param name>".
  std::vector<std::string> state_kinds() const { return state_names(); }

  /// scalars: {"type", "lr", "step", ...subclass hyper-parameters}; tensors: state by name.
  virtual OptimizerState state_dict() const;
  /// Checks the type, that every tensor names a known state of a known parameter with
  /// the parameter's shape and dtype, and that per-parameter states are complete — all
  /// problems in one strata::DataError naming the tensors — before changing anything.
  virtual void load_state_dict(const OptimizerState& st);

 protected:
  /// Names of the per-parameter state tensors ("exp_avg", "exp_avg_sq"); empty if none.
  virtual std::vector<std::string> state_names() const = 0;
  /// Subclass hyper-parameters into / out of state_dict().scalars.
  virtual void save_hparams(nlohmann::json& j) const = 0;
  virtual void load_hparams(const nlohmann::json& j) = 0;

  /// State slot k (index into state_names()) of parameter i; allocated on first use as
  /// zeros shaped like the parameter, charged to MemCategory::optimizer. `created` tells
  /// whether this call allocated it.
  Tensor& state(size_t i, size_t k, bool* created = nullptr);
  /// Marks one optimizer step done.
  void count_step() { ++step_; }

  NamedTensors params_;
  std::vector<int64_t> param_steps_;  // per-parameter step count (PyTorch state['step'])

 private:
  std::vector<std::vector<Tensor>> states_;  // [param][state kind]
  double lr_;
  int64_t step_ = 0;
};

}  // namespace strata::optim
