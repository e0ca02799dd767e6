// GradScaler: in-place unscaling with a per-gradient inf/NaN check, skipped steps that
// name the overflowing parameters, and the backoff/growth schedule (see grad_scaler.h).
#include <strata/optim/grad_scaler.h>

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>

#include <strata/autograd/functions.h>
#include <strata/core/error.h>
#include <strata/tensor/ops.h>

namespace strata::optim {
namespace {

enum class Finite { yes, inf, nan };

// Whether every element of t (f32/f64) is finite. The sum of squares (accumulated in
// f64) is inf/NaN exactly when an element is, except that huge finite f64 values can
// overflow it: those are told apart by 0 * t, which is NaN only at inf/NaN elements.
Finite classify(const Tensor& t) {
  const double ss = ops::sum_squares(t);
  if (std::isfinite(ss)) return Finite::yes;
  if (std::isnan(ss)) return Finite::nan;
  if (t.dtype() == DType::f64) {
    const double z = ops::sum(ops::binary_scalar(ops::BinaryOp::mul, t, 0.0)).item<double>();
    if (z == 0.0) return Finite::yes;
  }
  return Finite::inf;
}

// g *= inv in place; f16/bf16 gradients go through an f32 copy (checked before rounding back).
Finite unscale_grad(Tensor& g, double inv) {
  if (g.dtype() == DType::f32 || g.dtype() == DType::f64) {
    ops::mul_(g, inv);
    return classify(g);
  }
  Tensor w = ops::to_dtype(g, DType::f32);
  ops::mul_(w, inv);
  const Finite f = classify(w);
  ops::copy_(g, w);
  return f;
}

std::string format_scale(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

}  // namespace

void GradScalerOptions::validate() const {
  if (!(init_scale > 0) || !std::isfinite(init_scale))
    STRATA_THROW(ConfigError, "grad_scaler.init_scale: must be a finite number > 0, got ", init_scale);
  if (!(growth_factor > 1) || !std::isfinite(growth_factor))
    STRATA_THROW(ConfigError, "grad_scaler.growth_factor: must be > 1, got ", growth_factor);
  if (!(backoff_factor > 0 && backoff_factor < 1))
    STRATA_THROW(ConfigError, "grad_scaler.backoff_factor: must be in (0, 1), got ", backoff_factor);
  if (growth_interval < 1)
    STRATA_THROW(ConfigError, "grad_scaler.growth_interval: must be >= 1, got ", growth_interval);
}

GradScaler::GradScaler(const GradScalerOptions& options)
    : opts_(options), enabled_(options.enabled), scale_(options.init_scale) {
  if (enabled_) opts_.validate();
}

Tensor GradScaler::scale(const Tensor& loss) const {
  STRATA_CHECK(loss.defined(), "[grad_scaler] scale: the loss is an undefined tensor");
  if (!enabled_) return loss;
  return loss * scale_;
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!enabled_) return;
  PerOptimizer& st = per_opt_[&opt];
  STRATA_CHECK(st.stage != Stage::unscaled, "[grad_scaler] unscale_() was already called on this ", opt.type_name(),
               " optimizer since the last update()");
  STRATA_CHECK(st.stage != Stage::stepped, "[grad_scaler] unscale_() called after step() on this ", opt.type_name(),
               " optimizer; call update() first");
  const double inv = 1.0 / scale_;
  st.non_finite.clear();
  for (const auto& [name, p] : opt.named_parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    const Finite f = unscale_grad(g, inv);
    if (f != Finite::yes) st.non_finite.push_back({name, f == Finite::nan});
  }
  st.found_inf = !st.non_finite.empty();
  st.stage = Stage::unscaled;
}

void GradScaler::unscale_(Optimizer& opt, const AnyRank& any_rank) {
  unscale_(opt);
  if (!enabled_ || !any_rank) return;
  PerOptimizer& st = per_opt_[&opt];
  st.found_inf = any_rank(st.found_inf);
}

bool GradScaler::found_inf(const Optimizer& opt) const {
  auto it = per_opt_.find(&opt);
  return enabled_ && it != per_opt_.end() && it->second.stage != Stage::ready && it->second.found_inf;
}

bool GradScaler::step(Optimizer& opt) {
  return step(opt, [&opt] { opt.step(); });
}

bool GradScaler::step(Optimizer& opt, const std::function<void()>& do_step) {
  if (!enabled_) {
    do_step();
    return true;
  }
  {
    auto it = per_opt_.find(&opt);
    STRATA_CHECK(it == per_opt_.end() || it->second.stage != Stage::stepped, "[grad_scaler] step() was already called on this ",
                 opt.type_name(), " optimizer since the last update()");
    if (it == per_opt_.end() || it->second.stage == Stage::ready) unscale_(opt);
  }
  bool any_grad = false;
  for (const auto& np : opt.named_parameters()) any_grad |= np.second.grad().defined();
  STRATA_CHECK(any_grad, "[grad_scaler] step(): no parameter of this ", opt.type_name(),
               " optimizer has a gradient; call backward() on scaler.scale(loss) first");
  PerOptimizer& st = per_opt_[&opt];
  st.stage = Stage::stepped;
  if (!st.found_inf) {
    do_step();
    return true;
  }
  ++skipped_;
  if (st.non_finite.empty()) {
    spdlog::warn("[grad_scaler] skipped {} step {}: another rank's gradient shard is non-finite at loss scale {}; "
                 "update() backs the scale off to {}",
                 opt.type_name(), opt.step_count() + 1, format_scale(scale_), format_scale(scale_ * opts_.backoff_factor));
    return false;
  }
  std::string names;
  constexpr size_t kShown = 8;
  for (size_t i = 0; i < st.non_finite.size() && i < kShown; ++i)
    names += (i ? ", '" : "'") + st.non_finite[i].name + "' (" + (st.non_finite[i].nan ? "nan" : "inf") + ")";
  if (st.non_finite.size() > kShown) names += strata::detail::str_cat(" and ", st.non_finite.size() - kShown, " more");
  spdlog::warn("[grad_scaler] skipped {} step {}: non-finite gradient at loss scale {} in {}; update() backs the "
               "scale off to {}",
               opt.type_name(), opt.step_count() + 1, format_scale(scale_), names,
               format_scale(scale_ * opts_.backoff_factor));
  return false;
}

void GradScaler::update() {
  if (!enabled_) return;
  bool checked = false, overflow = false;
  for (const auto& [opt, st] : per_opt_) {
    if (st.stage == Stage::ready) continue;
    checked = true;
    overflow |= st.found_inf;
  }
  STRATA_CHECK(checked, "[grad_scaler] update(): no optimizer was unscaled or stepped through this scaler since the "
                        "last update()");
  if (overflow) {
    scale_ *= opts_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == opts_.growth_interval) {
    const double grown = scale_ * opts_.growth_factor;
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
  per_opt_.clear();
}

void GradScaler::update(double new_scale) {
  if (!enabled_) return;
  STRATA_CHECK(new_scale > 0 && std::isfinite(new_scale), "[grad_scaler] update(new_scale): the scale must be a "
                                                          "finite number > 0, got ", new_scale);
  scale_ = new_scale;
  per_opt_.clear();
}

std::vector<NonFiniteGrad> GradScaler::non_finite(const Optimizer& opt) const {
  auto it = per_opt_.find(&opt);
  return it == per_opt_.end() ? std::vector<NonFiniteGrad>{} : it->second.non_finite;
}

nlohmann::json GradScaler::state_dict() const {
  if (!enabled_) return nlohmann::json::object();
  return {{"scale", scale_},
          {"growth_factor", opts_.growth_factor},
          {"backoff_factor", opts_.backoff_factor},
          {"growth_interval", opts_.growth_interval},
          {"_growth_tracker", growth_tracker_}};
}

void GradScaler::load_state_dict(const nlohmann::json& state) {
  if (!enabled_) return;
  if (!state.is_object() || state.empty())
    STRATA_THROW(DataError, "[grad_scaler] load_state_dict: the state is empty (saved from a disabled scaler?); "
                            "an enabled scaler needs 'scale' and its factors");
  auto number = [&](const char* key) {
    const auto it = state.find(key);
    if (it == state.end() || !it->is_number())
      STRATA_THROW(DataError, "[grad_scaler] load_state_dict: '", key, "' is ",
                   it == state.end() ? "missing" : "not a number");
    return it->get<double>();
  };
  GradScalerOptions o = opts_;
  const double scale = number("scale");
  o.growth_factor = number("growth_factor");
  o.backoff_factor = number("backoff_factor");
  o.growth_interval = int64_t(number("growth_interval"));
  const auto tracker = int64_t(number("_growth_tracker"));
  if (!(scale > 0) || !std::isfinite(scale))
    STRATA_THROW(DataError, "[grad_scaler] load_state_dict: 'scale' must be a finite number > 0, got ", scale);
  try {
    o.validate();
  } catch (const ConfigError& e) {
    STRATA_THROW(DataError, "[grad_scaler] load_state_dict: ", e.what());
  }
  if (tracker < 0 || tracker >= o.growth_interval)
    STRATA_THROW(DataError, "[grad_scaler] load_state_dict: '_growth_tracker' ", tracker, " is outside [0, ",
                 o.growth_interval, ")");
  opts_ = o;
  scale_ = scale;
  growth_tracker_ = tracker;
  per_opt_.clear();
}

}  // namespace strata::optim
