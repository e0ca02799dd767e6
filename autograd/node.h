// Graph nodes. A differentiable op that sees an input requiring grad creates a
// Node subclass holding what its backward needs and an edge per input. Nodes are
// single-output: an op with several outputs (split, chunk) is several view ops.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <strata/autograd/grad_mode.h>
#include <strata/tensor/tensor.h>

namespace strata {

/// Where an input's gradient goes: the producer's node (or a leaf's AccumulateGrad).
/// A null fn means the input needs no gradient.
struct Edge {
  std::shared_ptr<Node> fn;
};

class Node {
 public:
  Node();
  virtual ~Node() = default;
  /// Gradients w.r.t. each input (same order as next_edges); undefined = none.
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  virtual std::string name() const = 0;
  /// Drops saved tensors after backward unless retain_graph (subclasses override).
  virtual void release_saved() { released_ = true; }

  std::vector<Edge>& next_edges() { return next_; }
  uint64_t sequence_nr() const { return seq_; }
  bool released() const { return released_; }
  /// The module whose forward created this node, while tracing (trace::intern id; 0 = none).
  uint32_t trace_label() const { return trace_label_; }
  /// The input edge whose pending gradient this node takes over (-1: none). Before apply(),
  /// the engine hands it, through absorb(), what that input's other consumers have sent so
  /// far (if anything), and the node returns it added into its own gradient for that input:
  /// a backward that adds the two in the pass computing its own saves the engine's add.
  /// Gradients arriving later are added by the engine as usual.
  int absorbs_edge() const { return absorbs_edge_; }
  virtual void absorb(Tensor pending) { (void)pending; }

 protected:
  std::vector<Edge> next_;
  int absorbs_edge_ = -1;
  uint64_t seq_;
  bool released_ = false;
  uint32_t trace_label_ = 0;
};

/// A node whose backward takes over the gradient its input 0 has already received from that
/// input's other consumers and adds it in its own pass (absorbs_edge() 0): absorb() keeps
/// it until apply() takes it with take_pending().
class PendingAddNode : public Node {
 public:
  void absorb(Tensor pending) override { pending_ = std::move(pending); }
  void release_saved() override {
    pending_ = Tensor();
    Node::release_saved();
  }

 protected:
  explicit PendingAddNode(bool absorbs) {
    if (absorbs) absorbs_edge_ = 0;
  }
  /// The absorbed gradient (undefined: none came), and whether it may be written in place
  /// as the gradient of `like` (nothing else holds it: detail::reusable_as).
  std::pair<Tensor, bool> take_pending(const Tensor& like);

 private:
  Tensor pending_;
};

/// The sink of a leaf tensor: adds the incoming gradient to .grad and then runs the
/// leaf's post-accumulate-grad hooks (where DDP/ZeRO attach).
class AccumulateGrad final : public Node {
 public:
  // Highest priority in the ready queue (as in PyTorch): a leaf's gradient is
  // accumulated and its hooks fire as soon as it is final, not when the (old, cached)
  // node's creation order would schedule it. DDP's overlap depends on this. Among
  // accumulators ready at once, the newer one runs first (reverse registration order).
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) { seq_ |= uint64_t(1) << 63; }
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  std::string name() const override { return "AccumulateGrad"; }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

/// The edge a gradient for `t` should flow into (null if t needs no grad).
Edge gradient_edge(const Tensor& t);

/// True if grad mode is on and any input requires grad.
template <class... Ts>
bool any_requires_grad(const Ts&... ts) {
  return grad_enabled() && ((ts.defined() && ts.requires_grad()) || ...);
}
bool any_requires_grad_list(const std::vector<Tensor>& ts);

/// Connects `node` to `inputs` and marks `out` as produced by it (requires_grad = true).
void set_history(Tensor& out, const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs);

/// Helper for ops: creates NodeT(args...), wires it to inputs and returns out.
template <class NodeT, class... Args>
Tensor record(Tensor out, const std::vector<Tensor>& inputs, Args&&... args) {
  auto node = std::make_shared<NodeT>(std::forward<Args>(args)...);
  set_history(out, node, inputs);
  return out;
}

/// A saved tensor that remembers the version it had when saved: using it after an
/// in-place change is an error, like PyTorch's "modified by an inplace operation".
class SavedTensor {
 public:
  SavedTensor() = default;
  // Stored detached (no grad_fn), so saving an op's own output makes no cycle.
  explicit SavedTensor(const Tensor& t) : t_(t.defined() ? t.detach() : t), version_(t.defined() ? t.version() : 0) {}
  const Tensor& get(const char* op) const;
  /// The saved tensor, and whether it is handed over for a backward to write its result
  /// over: it is (and this SavedTensor is emptied) when nobody can observe the overwrite:
  /// the running backward frees saved tensors after use (no retain_graph), this is the only
  /// handle on the tensor and on its bytes, and they are contiguous and allocated here (not
  /// memory a caller lent). Else it is get()'s
  /// tensor, to be read only. A result written over an operand the backward has just read
  /// lands in cache lines the core already holds, where a fresh buffer (the caching
  /// allocator's block, last touched a step earlier) is read in from memory line by line
  /// before its stores.
  std::pair<Tensor, bool> take(const char* op);
  void reset() { t_ = Tensor(); }
  bool defined() const { return t_.defined(); }

 private:
  Tensor t_;
  uint32_t version_ = 0;
};

namespace detail {
/// True while the engine runs a backward that frees each node's saved tensors after its
/// apply() (backward without retain_graph) on this thread.
bool backward_frees_saved();
/// Sets backward_frees_saved() for its lifetime (the engine; nested passes restore it).
class FreesSavedScope {
 public:
  explicit FreesSavedScope(bool frees);
  ~FreesSavedScope();
  FreesSavedScope(const FreesSavedScope&) = delete;
  FreesSavedScope& operator=(const FreesSavedScope&) = delete;

 private:
  bool prev_;
};

/// True when `t` is the only handle on its TensorImpl and its bytes, is contiguous and has
/// `like`'s shape, dtype and device: a gradient the engine may add into, or a leaf may keep,
/// in place of a new tensor without anyone else observing it.
bool reusable_as(const Tensor& t, const Tensor& like);
}  // namespace detail

}  // namespace strata
