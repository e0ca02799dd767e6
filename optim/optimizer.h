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
///
/// 16-bit model states (mixed precision as DeepSpeed's and Megatron-LM's bf16 optimizers):
/// a bf16/f16 parameter gets an f32 master copy, made from the parameter when the optimizer
/// is built and charged to MemCategory::optimizer; its state (moments, momentum) is f32 too.
/// step() updates the master in f32 with the 16-bit gradient widened per element and
/// writes the master rounded to nearest even back into the parameter (one fused pass).
/// Per 16-bit parameter element with Adam: 2 (param) + 2 (grad) + 4 (master) + 8 (moments).
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
  /// The parameter a state tensor "<kind>.<param name>" belongs to: what follows the first
  /// dot ("exp_avg.h.0.w" -> "h.0.w"; "" for a name without one).
  static std::string state_param_name(const std::string& state_name) {
    const size_t dot = state_name.find('.');
    return dot == std::string::npos ? std::string() : state_name.substr(dot + 1);
  }

  /// The f32 master weights of parameter i (undefined unless the parameter is bf16/f16).
  const Tensor& master(size_t i) const { return masters_[i]; }
  /// True when some parameter is 16-bit (and so has an f32 master).
  bool has_masters() const;
  /// (name, master) of every 16-bit parameter, in parameter order.
  NamedTensors named_masters() const;
  /// Sets parameter `name`'s weights from f32 (or any floating) `value`: the master takes
  /// it exactly, the 16-bit parameter its rounding; a parameter without a master takes it
  /// converted to its own dtype. Used by checkpoint loads, which store the f32 masters.
  void set_weight(const std::string& name, const Tensor& value);
  /// Re-reads every master from its 16-bit parameter (after something else wrote the
  /// parameters: a broadcast, a 16-bit weights load).
  void reload_masters_from_params();

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
  /// zeros shaped like the parameter (f32 for a 16-bit parameter), charged to
  /// MemCategory::optimizer. `created` tells whether this call allocated it.
  Tensor& state(size_t i, size_t k, bool* created = nullptr);
  /// Marks one optimizer step done.
  void count_step() { ++step_; }

  NamedTensors params_;
  std::vector<int64_t> param_steps_;  // per-parameter step count (PyTorch state['step'])

 private:
  /// The dtype of parameter i's state: f32 for a 16-bit parameter, else the parameter's.
  DType state_dtype(size_t i) const;
  std::vector<Tensor> masters_;              // [param]: f32 master of a 16-bit param, else undefined
  std::vector<std::vector<Tensor>> states_;  // [param][state kind]
  double lr_;
  int64_t step_ = 0;
};

}  // namespace strata::optim
