// Module tree bookkeeping: registration, recursive naming, state_dict checks and
// slot replacement. No tensor math here.
#include <strata/nn/module.h>

#include <functional>
#include <map>
#include <optional>
#include <unordered_set>

#include <strata/autograd/grad_mode.h>
#include <strata/core/trace.h>

namespace strata::nn {
namespace {

void check_slot_name(const Module& m, const std::string& what, const std::string& name) {
  STRATA_CHECK(!name.empty() && name.find('.') == std::string::npos, "[", m.type_name(), "] ", what, " name '",
               name, "' must be non-empty and contain no '.'");
}

std::string join(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  return name.empty() ? prefix : prefix + "." + name;
}

std::string tensor_desc(const Tensor& t) { return std::string(dtype_name(t.dtype())) + shape_str(t.shape()); }

}  // namespace

Tensor Module::forward(const Tensor&) {
  STRATA_THROW(Error, "[", type_name(), "] has no single-tensor forward(x); call its own forward overload");
}

namespace {
// Tracing: a module's forward as a slice, and its name on the nodes it creates.
struct ForwardTraceScope {
  trace::Scope slice;
  std::optional<trace::LabelScope> in_module;
  explicit ForwardTraceScope(const Module& m) {
    if (!trace::enabled()) return;
    std::string name = trace::object_name(&m);
    in_module.emplace(trace::intern(name.empty() ? m.type_name() : name));
    slice.begin("forward " + trace::label(trace::current_label()));
  }
};
}  // namespace

Tensor Module::traced(const std::function<Tensor()>& fn) {
  STRATA_CHECK(hooks_.empty(), "[", type_name(), "] traced() skips forward hooks; call it through operator()");
  ForwardTraceScope scope(*this);
  return fn();
}

Tensor Module::operator()(const Tensor& x) {
  ForwardTraceScope scope(*this);
  if (hooks_.empty()) return forward(x);
  for (auto& h : hooks_)
    if (h.pre) h.pre(*this);
  Tensor y = forward(x);
  for (auto& h : hooks_)
    if (h.post) y = h.post(*this, y);
  return y;
}

int Module::register_forward_hooks(ForwardPreHook pre, ForwardHook post) {
  hooks_.push_back({next_hook_id_, std::move(pre), std::move(post)});
  return next_hook_id_++;
}

void Module::remove_forward_hooks(int id) {
  std::erase_if(hooks_, [id](const HookPair& h) { return h.id == id; });
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_slot_name(*this, "child", name);
  STRATA_CHECK(m != nullptr, "[", type_name(), "] child '", name, "' is null");
  for (auto& [n, c] : children_) STRATA_CHECK(n != name, "[", type_name(), "] child '", name, "' registered twice");
  children_.emplace_back(name, std::move(m));
}

Tensor& Module::register_parameter(const std::string& name, Tensor t) {
  check_slot_name(*this, "parameter", name);
  STRATA_CHECK(t.defined(), "[", type_name(), "] parameter '", name, "' is undefined");
  STRATA_CHECK(find_slot(params_, name) == nullptr && find_slot(buffers_, name) == nullptr, "[", type_name(),
               "] parameter '", name, "' registered twice");
  t.storage()->recharge(MemCategory::params);
  t.set_requires_grad(true);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  check_slot_name(*this, "buffer", name);
  STRATA_CHECK(t.defined(), "[", type_name(), "] buffer '", name, "' is undefined");
  STRATA_CHECK(find_slot(params_, name) == nullptr && find_slot(buffers_, name) == nullptr, "[", type_name(),
               "] buffer '", name, "' registered twice");
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

Tensor* Module::find_slot(std::deque<std::pair<std::string, Tensor>>& slots, const std::string& name) {
  for (auto& [n, t] : slots)
    if (n == name) return &t;
  return nullptr;
}

void Module::collect(const std::string& prefix, bool params, bool buffers, NamedTensors& out) const {
  if (params)
    for (const auto& [n, t] : params_) out.emplace_back(join(prefix, n), t);
  if (buffers)
    for (const auto& [n, t] : buffers_) out.emplace_back(join(prefix, n), t);
  for (const auto& [n, c] : children_) c->collect(join(prefix, n), params, buffers, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors all;
  collect("", true, false, all);
  NamedTensors out;
  out.reserve(all.size());
  std::unordered_set<const TensorImpl*> seen;
  for (auto& e : all)
    if (seen.insert(e.second.impl()).second) out.push_back(std::move(e));
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, true, out);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

NamedModules Module::named_modules() {
  NamedModules out;
  out.emplace_back("", shared_from_this());
  for (auto& [n, c] : children_)
    for (auto& [sub, m] : c->named_modules()) out.emplace_back(join(n, sub), m);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

NamedTensors Module::state_dict() const {
  // Per module: own parameters, own buffers, then children (PyTorch order).
  NamedTensors out;
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m, const std::string& prefix) {
    for (const auto& [n, t] : m.params_) out.emplace_back(join(prefix, n), t.detach());
    for (const auto& [n, t] : m.buffers_) out.emplace_back(join(prefix, n), t.detach());
    for (const auto& [n, c] : m.children_) walk(*c, join(prefix, n));
  };
  walk(*this, "");
  return out;
}

void Module::load_state_dict(const NamedTensors& sd) {
  NamedTensors mine = state_dict();
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < mine.size(); ++i) index.emplace(mine[i].first, i);

  std::vector<std::string> missing, unexpected, mismatched, duplicate;
  std::vector<int> seen(mine.size(), 0);
  std::vector<std::pair<size_t, const Tensor*>> plan;
  for (const auto& [name, src] : sd) {
    auto it = index.find(name);
    if (it == index.end()) {
      unexpected.push_back(name);
      continue;
    }
    if (seen[it->second]++) {
      duplicate.push_back(name);
      continue;
    }
    const Tensor& dst = mine[it->second].second;
    if (!src.defined() || src.shape() != dst.shape() || src.dtype() != dst.dtype()) {
      mismatched.push_back(name + " (checkpoint " + (src.defined() ? tensor_desc(src) : "undefined") +
                           ", model " + tensor_desc(dst) + ")");
      continue;
    }
    plan.emplace_back(it->second, &src);
  }
  for (size_t i = 0; i < mine.size(); ++i)
    if (!seen[i]) missing.push_back(mine[i].first);

  if (!missing.empty() || !unexpected.empty() || !mismatched.empty() || !duplicate.empty()) {
    std::string msg = "[load_state_dict] " + type_name() + ": state dict does not match the model;";
    auto list = [&](const char* what, const std::vector<std::string>& names) {
      if (names.empty()) return;
      msg += std::string(" ") + what + ":";
      for (const auto& n : names) msg += " " + n + ",";
      msg.back() = ';';
    };
    list("missing keys", missing);
    list("unexpected keys", unexpected);
    list("shape/dtype mismatch", mismatched);
    list("duplicate keys", duplicate);
    msg += " nothing was loaded";
    throw DataError(msg);
  }
  NoGradGuard no_grad;
  for (auto& [i, src] : plan) {
    Tensor dst = mine[i].second;
    ops::copy_(dst, *src);
  }
}

void Module::zero_grad() {
  for (auto& [n, t] : named_parameters()) t.set_grad(Tensor());
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  const Module* m = this;
  std::shared_ptr<Module> found;
  size_t pos = 0;
  while (true) {
    const size_t dot = name.find('.', pos);
    const std::string part = name.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    found = nullptr;
    for (const auto& [n, c] : m->children_)
      if (n == part) found = c;
    if (!found) {
      std::string names;
      for (const auto& [n, c] : m->children_) names += (names.empty() ? "" : ", ") + n;
      STRATA_THROW(Error, "[", type_name(), "] no child '", name, "' ('", part, "' not among children of ",
                   m->type_name(), ": ", names.empty() ? "none" : names, ")");
    }
    if (dot == std::string::npos) return found;
    m = found.get();
    pos = dot + 1;
  }
}

void Module::replace_child(const std::string& name, std::shared_ptr<Module> m) {
  STRATA_CHECK(m != nullptr, "[", type_name(), "] replace_child('", name, "') with a null module");
  const size_t dot = name.rfind('.');
  Module* owner = dot == std::string::npos ? this : child(name.substr(0, dot)).get();
  const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
  for (auto& [n, c] : owner->children_)
    if (n == leaf) {
      c = std::move(m);
      return;
    }
  child(name);  // throws naming the children
}

std::pair<const Module*, std::string> Module::resolve(const std::string& full_name) const {
  const size_t dot = full_name.rfind('.');
  if (dot == std::string::npos) return {this, full_name};
  return {child(full_name.substr(0, dot)).get(), full_name.substr(dot + 1)};
}

const Tensor& Module::parameter(const std::string& full_name) const {
  auto [owner, leaf] = resolve(full_name);
  for (const auto& [n, t] : owner->params_)
    if (n == leaf) return t;
  STRATA_THROW(Error, "[", type_name(), "] no parameter '", full_name, "'");
}

void Module::set_parameter(const std::string& full_name, Tensor t) {
  auto [cowner, leaf] = resolve(full_name);
  auto* owner = const_cast<Module*>(cowner);
  Tensor* slot = owner->find_slot(owner->params_, leaf);
  STRATA_CHECK(slot != nullptr, "[set_parameter] ", type_name(), " has no parameter '", full_name, "'");
  STRATA_CHECK(t.defined(), "[set_parameter] new tensor for '", full_name, "' is undefined");
  if (t.is_leaf() && t.requires_grad() != slot->requires_grad()) t.set_requires_grad(slot->requires_grad());
  *slot = std::move(t);
}

void Module::set_buffer(const std::string& full_name, Tensor t) {
  auto [cowner, leaf] = resolve(full_name);
  auto* owner = const_cast<Module*>(cowner);
  Tensor* slot = owner->find_slot(owner->buffers_, leaf);
  STRATA_CHECK(slot != nullptr, "[set_buffer] ", type_name(), " has no buffer '", full_name, "'");
  STRATA_CHECK(t.defined(), "[set_buffer] new tensor for '", full_name, "' is undefined");
  *slot = std::move(t);
}

void Module::to(DType dtype) {
  STRATA_CHECK(is_floating(dtype), "[Module::to] target dtype must be floating, got ", dtype_name(dtype));
  for (auto& [n, t] : params_)
    if (t.dtype() != dtype) {
      Tensor c = ops::to_dtype(t.detach(), dtype);
      c.storage()->recharge(MemCategory::params);
      c.set_requires_grad(t.requires_grad());
      t = c;
    }
  for (auto& [n, t] : buffers_)
    if (is_floating(t.dtype()) && t.dtype() != dtype) t = ops::to_dtype(t, dtype);
  for (auto& [n, c] : children_) c->to(dtype);
}

void Module::to(Device device) {
  for (auto& [n, t] : params_)
    if (t.device() != device) {
      Tensor c;
      {
        MemoryScope scope(MemCategory::params);
        c = t.detach().to(device);
      }
      c.set_requires_grad(t.requires_grad());
      t = c;
    }
  for (auto& [n, t] : buffers_)
    if (t.device() != device) {
      MemoryScope scope(t.storage()->category());
      t = t.to(device);
    }
  for (auto& [n, c] : children_) c->to(device);
}

std::vector<Generator*> Module::generators() {
  std::vector<Generator*> out;
  if (Generator* g = own_generator()) out.push_back(g);
  for (auto& [n, c] : children_)
    for (Generator* g : c->generators()) out.push_back(g);
  return out;
}

}  // namespace strata::nn
