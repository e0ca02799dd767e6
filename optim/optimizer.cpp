// Optimizer base: zero_grad, lazily allocated state and the checked state_dict round trip.
#include <strata/optim/optimizer.h>

#include <algorithm>
#include <map>

#include <strata/core/memory.h>
#include <strata/tensor/ops.h>

namespace strata::optim {

Optimizer::Optimizer(NamedTensors named_params, double lr) : params_(std::move(named_params)), lr_(lr) {
  STRATA_CHECK(lr >= 0, "[optimizer] lr must be >= 0, got ", lr);
  std::map<std::string, int> seen;
  for (const auto& [name, p] : params_) {
    STRATA_CHECK(p.defined() && is_floating(p.dtype()), "[optimizer] parameter '", name,
                 "' must be a defined floating tensor, got ", p.defined() ? p.str() : "undefined");
    STRATA_CHECK(seen[name]++ == 0, "[optimizer] parameter name '", name, "' appears twice");
  }
  param_steps_.assign(params_.size(), 0);
  states_.resize(params_.size());
  masters_.resize(params_.size());
  reload_masters_from_params();
}

namespace {
bool is_16bit(DType dt) { return dt == DType::bf16 || dt == DType::f16; }
}  // namespace

DType Optimizer::state_dtype(size_t i) const {
  return masters_[i].defined() ? DType::f32 : params_[i].second.dtype();
}

bool Optimizer::has_masters() const {
  for (const Tensor& m : masters_)
    if (m.defined()) return true;
  return false;
}

NamedTensors Optimizer::named_masters() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i)
    if (masters_[i].defined()) out.emplace_back(params_[i].first, masters_[i]);
  return out;
}

void Optimizer::reload_masters_from_params() {
  MemoryScope scope(MemCategory::optimizer);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    if (!is_16bit(p.dtype())) continue;
    if (!masters_[i].defined()) masters_[i] = ops::empty(p.shape(), DType::f32, p.device());
    ops::copy_(masters_[i], p);  // exact: every 16-bit value is an f32
  }
}

void Optimizer::set_weight(const std::string& name, const Tensor& value) {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].first != name) continue;
    Tensor& p = params_[i].second;
    STRATA_CHECK(value.defined() && value.shape() == p.shape() && is_floating(value.dtype()), "[",
                 type_name(), "::set_weight] '", name, "': value ", value.defined() ? value.str() : "undefined",
                 " does not fit parameter ", p.str());
    if (masters_[i].defined()) ops::copy_(masters_[i], value);
    ops::copy_(p, masters_[i].defined() ? masters_[i] : value);  // rounds to nearest even once
    return;
  }
  STRATA_THROW(Error, "[", type_name(), "::set_weight] no parameter named '", name, "'");
}

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) p.set_grad(Tensor());
}

Tensor& Optimizer::state(size_t i, size_t k, bool* created) {
  auto& slots = states_[i];
  if (slots.size() <= k) slots.resize(std::max(k + 1, state_names().size()));
  Tensor& s = slots[k];
  if (created) *created = !s.defined();
  if (!s.defined()) {
    MemoryScope scope(MemCategory::optimizer);
    s = ops::zeros(params_[i].second.shape(), state_dtype(i), params_[i].second.device());
  }
  return s;
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState st;
  st.scalars["type"] = type_name();
  st.scalars["lr"] = lr_;
  st.scalars["step"] = step_;
  nlohmann::json steps = nlohmann::json::object();
  const auto names = state_names();
  for (size_t i = 0; i < params_.size(); ++i) {
    bool any = false;
    for (size_t k = 0; k < names.size() && k < states_[i].size(); ++k)
      if (states_[i][k].defined()) {
        st.tensors.emplace_back(names[k] + "." + params_[i].first, states_[i][k]);
        any = true;
      }
    if (any) steps[params_[i].first] = param_steps_[i];
  }
  st.scalars["param_steps"] = steps;
  save_hparams(st.scalars);
  return st;
}

void Optimizer::load_state_dict(const OptimizerState& st) {
  const std::string type = st.scalars.value("type", std::string());
  if (type != type_name())
    STRATA_THROW(DataError, "[", type_name(), "::load_state_dict] state is for optimizer '", type, "', not ",
                 type_name());
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index.emplace(params_[i].first, i);
  const auto names = state_names();

  std::vector<std::string> problems;
  // [param][kind] -> source tensor
  std::vector<std::vector<const Tensor*>> plan(params_.size(), std::vector<const Tensor*>(names.size(), nullptr));
  for (const auto& [full, t] : st.tensors) {
    const size_t dot = full.find('.');
    const std::string kind = dot == std::string::npos ? full : full.substr(0, dot);
    const std::string pname = dot == std::string::npos ? "" : full.substr(dot + 1);
    size_t k = 0;
    while (k < names.size() && names[k] != kind) ++k;
    auto it = index.find(pname);
    if (k == names.size() || it == index.end()) {
      problems.push_back("unexpected tensor " + full);
      continue;
    }
    const Tensor& p = params_[it->second].second;
    // 16-bit parameters keep f32 state; a checkpoint's f32 state loads into f32 or 16-bit
    // parameters alike (precisions move both ways), other dtypes must match
    const DType want = state_dtype(it->second);
    if (!t.defined() || t.shape() != p.shape() || t.dtype() != want) {
      problems.push_back("tensor " + full + " is " + (t.defined() ? t.str() : "undefined") + ", parameter is " +
                         p.str() + " (state " + dtype_name(want) + ")");
      continue;
    }
    if (plan[it->second][k]) {
      problems.push_back("duplicate tensor " + full);
      continue;
    }
    plan[it->second][k] = &t;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    size_t have = 0;
    for (auto* src : plan[i]) have += src != nullptr;
    if (have != 0 && have != names.size())
      for (size_t k = 0; k < names.size(); ++k)
        if (!plan[i][k]) problems.push_back("missing tensor " + names[k] + "." + params_[i].first);
  }
  if (!problems.empty()) {
    std::string msg = detail::str_cat("[", type_name(), "::load_state_dict] state does not match the parameters:");
    for (const auto& p : problems) msg += " " + p + ";";
    msg += " nothing was loaded";
    throw DataError(msg);
  }
  nlohmann::json steps = st.scalars.value("param_steps", nlohmann::json::object());
  load_hparams(st.scalars);
  lr_ = st.scalars.value("lr", lr_);
  step_ = st.scalars.value("step", int64_t(0));
  MemoryScope scope(MemCategory::optimizer);
  for (size_t i = 0; i < params_.size(); ++i) {
    states_[i].assign(names.size(), Tensor());
    bool any = false;
    for (size_t k = 0; k < names.size(); ++k)
      if (plan[i][k]) {
        // state lives on its parameter's device (a CPU checkpoint loads into a GPU run)
        const Tensor& src = *plan[i][k];
        const Device d = params_[i].second.device();
        states_[i][k] = src.device() == d ? ops::contiguous(ops::clone(src)) : ops::to_device(src, d);
        any = true;
      }
    param_steps_[i] = any ? steps.value(params_[i].first, step_) : 0;
  }
}

}  // namespace strata::optim
