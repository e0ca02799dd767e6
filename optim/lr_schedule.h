// Learning-rate schedules as pure functions of the step: constant, step decay, and
// cosine decay with linear warmup. The trainer calls opt.set_lr(s.lr_at(step)).
#pragma once
#include <cstdint>
#include <string>

namespace strata::optim {

struct ScheduleOptions {
  std::string kind = "constant";  // constant | step | cosine
  double base_lr = 1e-3;
  // step: lr = base * gamma^floor(step / step_size)
  int64_t step_size = 1000;
  double gamma = 0.1;
  // cosine: linear warmup over warmup_steps, then cosine from base_lr to min_lr at total_steps
  int64_t warmup_steps = 0;
  int64_t total_steps = 1000;
  double min_lr = 0.0;
};

/// A value type; `step` is the 0-based index of the optimizer step about to run.
class LrSchedule {
 public:
  enum class Kind { constant, step, cosine };
  LrSchedule(Kind kind, const ScheduleOptions& opt) : kind_(kind), opt_(opt) {}
  /// constant: base_lr. step: base_lr * gamma^floor(step/step_size).
  /// cosine: base_lr * (step+1)/warmup_steps for step < warmup_steps (reaches base_lr at
  /// warmup_steps-1); then min_lr + (base_lr-min_lr) * (1 + cos(pi * r)) / 2 with
  /// r = (step - warmup_steps) / (total_steps - warmup_steps); min_lr from total_steps on.
  double lr_at(int64_t step) const;
  Kind kind() const { return kind_; }
  const ScheduleOptions& options() const { return opt_; }

 private:
  Kind kind_;
  ScheduleOptions opt_;
};

/// Validates the options (ConfigError naming the field) and builds the schedule.
LrSchedule make_schedule(const ScheduleOptions& opt);

}  // namespace strata::optim
