// Dynamic loss scaling for 16-bit training (torch.cuda.amp.GradScaler semantics): the
// loss is multiplied by a large power of two so small gradients survive fp16, gradients
// are divided back before the optimizer step, and a step whose gradients overflowed is
// skipped while the scale backs off. Device-agnostic: built on raw tensor ops.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <strata/optim/optimizer.h>

namespace strata::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  ///< 2^16
  double growth_factor = 2.0;   ///< scale *= this after growth_interval clean steps in a row
  double backoff_factor = 0.5;  ///< scale *= this after a step with a non-finite gradient
  int64_t growth_interval = 2000;
  bool enabled = true;  ///< false: every method is a pass-through (scale 1, nothing skipped)

  /// Throws ConfigError naming the grad_scaler.* key of the first bad value.
  void validate() const;
};

/// A parameter whose gradient held inf or NaN at the last unscale_.
struct NonFiniteGrad {
  std::string name;  ///< from Optimizer::named_parameters()
  bool nan = false;  ///< NaN (else only +-inf)
};

/// Per iteration, like PyTorch:
///   scaler.scale(loss).backward();   // grads are scale x the true ones
///   scaler.unscale_(opt);            // optional: before clipping the true grads
///   scaler.step(opt);                // unscales if needed; skips the step on inf/NaN
///   scaler.update();                 // backoff on overflow, growth after clean streaks
///
/// unscale_ multiplies every defined .grad of the optimizer's parameters by 1/scale in
/// place (f32/f64 directly; f16/bf16 through an f32 copy) and checks each for inf/NaN.
/// step() then runs opt.step() only if all were finite; otherwise it leaves parameters,
/// optimizer state and step count untouched and logs (spdlog warn) which parameters
/// overflowed, at which scale. Several optimizers may share one scaler: each gets its own
/// unscale_/step, update() once per iteration backs off if any of them overflowed.
///
/// The finiteness check reads one number per gradient to the host (a device sync on
/// CUDA). With DDP the gradients are already averaged, so every rank skips the same
/// steps; a sharded optimizer agrees through unscale_(opt, any_rank).
/// Not thread-safe; the optimizers must outlive their use between update() calls.
class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& options = {});

  /// loss * scale, differentiable (autograd); `loss` itself when disabled.
  Tensor scale(const Tensor& loss) const;
  /// Divides opt's gradients by the scale in place and records which are non-finite.
  /// Throws if called twice for `opt` since the last update(), or after step(opt).
  void unscale_(Optimizer& opt);
  /// Whether any rank found a non-finite gradient, given this rank's finding (collective:
  /// e.g. an all-reduce max of the flag over the ranks that shard one optimizer).
  using AnyRank = std::function<bool(bool found_inf)>;
  /// unscale_(opt), then the skip decision agreed through `any_rank` (FSDP's
  /// ShardedGradScaler): where the optimizer holds one shard of the parameters (ZeRO),
  /// every rank skips the same steps and backs off / grows the same scale.
  void unscale_(Optimizer& opt, const AnyRank& any_rank);
  /// unscale_(opt) unless done already, then opt.step() when no gradient is non-finite
  /// (on any rank, after unscale_(opt, any_rank)). Returns whether the optimizer stepped.
  /// Throws if called twice since update().
  bool step(Optimizer& opt);
  /// As step(opt), running `do_step` instead of opt.step() (ZeRO: the slice step and the
  /// parameters' all-gather).
  bool step(Optimizer& opt, const std::function<void()>& do_step);
  /// Whether opt's step is skipped: a non-finite gradient here or, after
  /// unscale_(opt, any_rank), on any rank (false when opt was not unscaled).
  bool found_inf(const Optimizer& opt) const;
  /// New scale from this iteration's checks: scale * backoff_factor if any optimizer saw
  /// a non-finite gradient (growth counter reset), else after growth_interval clean
  /// iterations in a row scale * growth_factor. Forgets the per-optimizer records.
  /// Throws when no optimizer was unscaled since the last update().
  void update();
  /// Sets the scale explicitly (growth counter unchanged), as update(new_scale) in PyTorch.
  void update(double new_scale);

  /// The current scale (1 when disabled).
  double get_scale() const { return enabled_ ? scale_ : 1.0; }
  bool is_enabled() const { return enabled_; }
  const GradScalerOptions& options() const { return opts_; }
  /// Clean iterations since the last growth or backoff.
  int64_t growth_tracker() const { return growth_tracker_; }
  /// Parameters of `opt` with non-finite gradients at its last unscale_ this iteration
  /// (empty when all were finite or opt was not unscaled).
  std::vector<NonFiniteGrad> non_finite(const Optimizer& opt) const;
  /// Optimizer steps skipped so far.
  int64_t skipped_steps() const { return skipped_; }

  /// {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}
  /// (PyTorch's keys); empty when disabled.
  nlohmann::json state_dict() const;
  /// Throws DataError naming a missing or mistyped key before changing anything; an
  /// enabled scaler refuses an empty state (one saved while disabled).
  void load_state_dict(const nlohmann::json& state);

 private:
  enum class Stage { ready, unscaled, stepped };
  struct PerOptimizer {
    Stage stage = Stage::ready;
    std::vector<NonFiniteGrad> non_finite;
    bool found_inf = false;  // non_finite is not empty here, or on another rank (agreed)
  };

  GradScalerOptions opts_;
  bool enabled_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
  std::map<const Optimizer*, PerOptimizer> per_opt_;
};

}  // namespace strata::optim
