// Module: the tree every model is built from. Parameters, buffers and children live
// in named slots that layers read at forward time, so the parallel wrappers (DDP
// hooks, ZeRO flat buffers, tensor-parallel surgery) can swap them from outside.
#pragma once
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include <strata/autograd/functions.h>

namespace strata::nn {

class Module;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using NamedModules = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

/// Base of every layer and model. Always held by std::shared_ptr (named_modules()
/// hands out shared_ptrs to self). Not thread-safe: one replica per thread.
class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// Single-tensor forward. Modules with another signature (losses) throw here.
  virtual Tensor forward(const Tensor& x);
  /// forward(x) between the forward hooks: models call their children this way, so a
  /// wrapper (FSDP) can act around any submodule's forward without replacing it.
  Tensor operator()(const Tensor& x);

  /// Runs before forward(x) in operator().
  using ForwardPreHook = std::function<void(Module&)>;
  /// Runs after forward in operator(); returns the output to use (itself, or e.g. an
  /// alias carrying an extra autograd node).
  using ForwardHook = std::function<Tensor(Module&, const Tensor& out)>;
  /// Registers a pre/post forward hook; returns an id for remove_forward_hooks.
  int register_forward_hooks(ForwardPreHook pre, ForwardHook post);
  void remove_forward_hooks(int id);
  /// Whether a forward hook is registered (a parent that fuses this module's forward with
  /// a sibling's must then call it through operator() instead).
  bool has_forward_hooks() const { return !hooks_.empty(); }
  /// Runs fn (a fused variant of this module's forward, called by a parent) under this
  /// module's trace scope, as operator() runs forward(). Runs no hooks: call it only when
  /// has_forward_hooks() is false.
  Tensor traced(const std::function<Tensor()>& fn);
  virtual std::string type_name() const = 0;

  /// "blocks.0.attn.qkv.weight" style names in registration order, own parameters
  /// before children's. A tensor reachable under two names is listed once (first name).
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;
  const NamedModules& named_children() const { return children_; }
  /// Self as "" then every descendant, depth first in registration order.
  NamedModules named_modules();
  /// Total element count of parameters().
  int64_t num_parameters() const;

  /// Sets training mode on this module and all descendants.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// Parameters then buffers (per module, recursively) by full name. The tensors are
  /// detached handles sharing storage with the module.
  NamedTensors state_dict() const;
  /// Checks every entry first: missing keys, unexpected keys, duplicate keys and
  /// shape/dtype mismatches are all listed in one strata::DataError naming the tensors;
  /// only when everything matches are the values copied. Nothing is loaded partially.
  void load_state_dict(const NamedTensors& sd);

  /// Drops every parameter's .grad (set_to_none=True semantics).
  void zero_grad();

  /// Child by name; a dotted path ("h.0.attn") walks down. Throws naming the children.
  std::shared_ptr<Module> child(const std::string& name) const;
  /// Replaces a registered child (dotted path allowed); forward uses the new one.
  void replace_child(const std::string& name, std::shared_ptr<Module> m);

  /// The parameter under a full dotted name ("h.0.attn.c_attn.weight"). Throws if absent.
  const Tensor& parameter(const std::string& full_name) const;
  /// Replaces the tensor in the owning module's slot. A leaf replacement inherits the
  /// old slot's requires_grad; a non-leaf (produced by a differentiable op) is stored
  /// as is. Shape may change (sharding); layers read the slot at forward time.
  void set_parameter(const std::string& full_name, Tensor t);
  /// Same for a buffer ("bn.running_mean").
  void set_buffer(const std::string& full_name, Tensor t);

  /// Converts every floating parameter and buffer to `dtype` (e.g. f64 for gradcheck)
  /// through set_parameter / set_buffer; integer buffers keep their type.
  void to(DType dtype);
  /// Moves every parameter and buffer to `device` (copies through set_parameter /
  /// set_buffer semantics; gradients are dropped). Call it before wrapping with DDP/ZeRO
  /// and before building the optimizer, which hold the tensors they were given.
  void to(Device device);

  /// The random generator this module owns (Dropout), else nullptr. Activation
  /// checkpointing saves and restores these so a recomputed forward draws the same masks.
  virtual Generator* own_generator() { return nullptr; }
  /// own_generator() of self and all descendants (depth first).
  std::vector<Generator*> generators();

 protected:
  /// Registers a parameter slot: sets requires_grad and charges its storage to
  /// MemCategory::params. The returned reference stays valid for the module's life.
  Tensor& register_parameter(const std::string& name, Tensor t);
  /// Registers a buffer slot (running stats); not trained, saved in state_dict.
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  /// The registered child at position i (resolved at call time: sees replace_child).
  Module& child_at(size_t i) const { return *children_[i].second; }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void collect(const std::string& prefix, bool params, bool buffers, NamedTensors& out) const;
  // Module owning `full_name`'s leaf and the leaf's own name.
  std::pair<const Module*, std::string> resolve(const std::string& full_name) const;
  Tensor* find_slot(std::deque<std::pair<std::string, Tensor>>& slots, const std::string& name);

  // deques: push_back never moves existing slots, so layers keep Tensor* into them.
  std::deque<std::pair<std::string, Tensor>> params_;
  std::deque<std::pair<std::string, Tensor>> buffers_;
  NamedModules children_;
  struct HookPair {
    int id;
    ForwardPreHook pre;
    ForwardHook post;
  };
  std::vector<HookPair> hooks_;
  int next_hook_id_ = 0;
  bool training_ = true;
};

/// m as exactly a T with nothing acting around its forward (not a subclass, such as tensor
/// parallelism's replacements; no forward hook, such as ZeRO-3's gathers), else null: what a
/// parent checks before running a child's forward fused with a sibling's.
template <class T>
T* plain_module(Module& m) {
  return typeid(m) == typeid(T) && !m.has_forward_hooks() ? static_cast<T*>(&m) : nullptr;
}

}  // namespace strata::nn
