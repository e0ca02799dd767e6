// LR schedule formulas and option validation.
#include <strata/optim/lr_schedule.h>

#include <cmath>
#include <numbers>

#include <strata/core/error.h>

namespace strata::optim {

double LrSchedule::lr_at(int64_t step) const {
  STRATA_CHECK(step >= 0, "[lr_schedule] step must be >= 0, got ", step);
  switch (kind_) {
    case Kind::constant: return opt_.base_lr;
    case Kind::step: return opt_.base_lr * std::pow(opt_.gamma, double(step / opt_.step_size));
    case Kind::cosine: {
      if (step < opt_.warmup_steps) return opt_.base_lr * double(step + 1) / double(opt_.warmup_steps);
      if (step >= opt_.total_steps) return opt_.min_lr;
      const double r = double(step - opt_.warmup_steps) / double(opt_.total_steps - opt_.warmup_steps);
      return opt_.min_lr + (opt_.base_lr - opt_.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * r));
    }
  }
  return opt_.base_lr;
}

LrSchedule make_schedule(const ScheduleOptions& o) {
  if (!(o.base_lr >= 0)) STRATA_THROW(ConfigError, "schedule.base_lr: must be >= 0, got ", o.base_lr);
  if (o.kind == "constant") return LrSchedule(LrSchedule::Kind::constant, o);
  if (o.kind == "step") {
    if (o.step_size <= 0) STRATA_THROW(ConfigError, "schedule.step_size: must be > 0, got ", o.step_size);
    if (!(o.gamma > 0)) STRATA_THROW(ConfigError, "schedule.gamma: must be > 0, got ", o.gamma);
    return LrSchedule(LrSchedule::Kind::step, o);
  }
  if (o.kind == "cosine") {
    if (o.warmup_steps < 0)
      STRATA_THROW(ConfigError, "schedule.warmup_steps: must be >= 0, got ", o.warmup_steps);
    if (o.total_steps <= o.warmup_steps)
      STRATA_THROW(ConfigError, "schedule.total_steps: must exceed warmup_steps (", o.warmup_steps, "), got ",
                   o.total_steps);
    if (!(o.min_lr >= 0 && o.min_lr <= o.base_lr))
      STRATA_THROW(ConfigError, "schedule.min_lr: must be in [0, base_lr=", o.base_lr, "], got ", o.min_lr);
    return LrSchedule(LrSchedule::Kind::cosine, o);
  }
  STRATA_THROW(ConfigError, "schedule.kind: unknown schedule '", o.kind, "' (expected constant, step, cosine)");
}

}  // namespace strata::optim
