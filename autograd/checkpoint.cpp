// Activation checkpointing: the segment's forward runs without recording a graph;
// one node stands for the whole segment and, in backward, re-runs it with grad on
// and backpropagates through the recomputed graph. Parameters inside the segment
// are reached only by that inner backward, so their .grad is accumulated (and their
// post-accumulate hooks fire) once per backward.
#include <strata/autograd/autocast.h>
#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/node.h>
#include <strata/core/generator_override.h>

namespace strata {
namespace {

using SegmentFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Replays the default generator from a recorded state on a private copy while alive:
// the recomputation draws the same masks as the forward did, and the state that other
// threads read (thread-ranks of the local backend share the process-wide generator) is
// never written. The caller's own default generator is not advanced by the replay.
class GeneratorReplay {
 public:
  GeneratorReplay(uint64_t seed, uint64_t offset) : gen_(seed), use_(gen_) { gen_.set_state(seed, offset); }
  GeneratorReplay(const GeneratorReplay&) = delete;
  GeneratorReplay& operator=(const GeneratorReplay&) = delete;

 private:
  Generator gen_;
  DefaultGeneratorOverride use_;  // after gen_: constructed from it, destroyed before it
};

// Where output k of the segment sits in the gradient the node receives: the whole
// gradient (one differentiable output) or a slice of the packed flat gradient.
struct OutputSlot {
  size_t index;
  int64_t offset;
  Shape shape;
};

class CheckpointNode final : public Node {
 public:
  CheckpointNode(SegmentFn fn, const std::vector<Tensor>& inputs, uint64_t seed, uint64_t offset)
      : fn_(std::move(fn)), seed_(seed), offset_(offset), autocast_(autocast_dtype()) {
    for (const auto& t : inputs) {
      inputs_.emplace_back(t);
      needs_.push_back(t.defined() && t.requires_grad());
    }
  }
  void set_slots(std::vector<OutputSlot> slots, bool packed) {
    slots_ = std::move(slots);
    packed_ = packed;
  }

  std::vector<Tensor> apply(const Tensor& grad) override {
    std::vector<Tensor> args;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (!inputs_[i].defined()) {
        args.emplace_back();
        continue;
      }
      Tensor a = inputs_[i].get("CheckpointBackward").detach();  // a fresh leaf per recomputation
      if (needs_[i]) a.set_requires_grad(true);
      args.push_back(a);
    }
    std::vector<Tensor> outs;
    {
      EnableGradGuard grad_on;
      GeneratorReplay replay(seed_, offset_);
      AutocastGuard autocast(autocast_);  // recompute in the precision the forward used
      outs = fn_(args);
    }
    std::vector<Tensor> roots, grads;
    for (const auto& s : slots_) {
      STRATA_CHECK(s.index < outs.size() && outs[s.index].defined() && outs[s.index].shape() == s.shape,
                   "[checkpoint] the recomputed segment returned a different output ", s.index,
                   " than the forward (", shape_str(s.shape), "); the segment must be deterministic");
      if (!outs[s.index].requires_grad()) continue;  // nothing inside needed a gradient
      Tensor g = packed_ ? ops::reshape(ops::narrow(grad, 0, s.offset, shape_numel(s.shape)), s.shape) : grad;
      roots.push_back(outs[s.index]);
      grads.push_back(g);
    }
    if (!roots.empty()) backward(roots, grads);
    std::vector<Tensor> result(args.size());
    for (size_t i = 0; i < args.size(); ++i)
      if (needs_[i]) result[i] = args[i].grad();
    return result;
  }

  std::string name() const override { return "CheckpointBackward"; }
  void release_saved() override {
    inputs_.clear();
    fn_ = nullptr;
    Node::release_saved();
  }

 private:
  SegmentFn fn_;
  std::vector<SavedTensor> inputs_;
  std::vector<bool> needs_;
  uint64_t seed_, offset_;
  std::optional<DType> autocast_;
  std::vector<OutputSlot> slots_;
  bool packed_ = false;
};

}  // namespace

std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs) {
  const Generator& gen = default_generator();
  const uint64_t seed = gen.seed(), offset = gen.offset();
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;
    outs = fn(inputs);
  }
  // The node is attached whenever grad mode is on, even if no input requires grad:
  // parameters inside the segment still need their gradients.
  if (!grad_enabled()) return outs;
  std::vector<size_t> diff;  // floating outputs: the ones a gradient can flow into
  for (size_t k = 0; k < outs.size(); ++k)
    if (outs[k].defined() && is_floating(outs[k].dtype())) diff.push_back(k);
  if (diff.empty()) return outs;

  auto node = std::make_shared<CheckpointNode>(fn, inputs, seed, offset);
  if (diff.size() == 1) {
    const size_t k = diff[0];
    Tensor o = outs[k].detach();  // never touch the history of a tensor fn may have returned as-is
    node->set_slots({OutputSlot{k, 0, o.shape()}}, false);
    set_history(o, node, inputs);
    outs[k] = o;
    return outs;
  }
  // Several outputs: the node produces one flat tensor, and each output is a
  // differentiable view of it, so their gradients meet in one buffer.
  const DType dt = outs[diff[0]].dtype();
  int64_t total = 0;
  std::vector<OutputSlot> slots;
  for (size_t k : diff) {
    STRATA_CHECK(outs[k].dtype() == dt, "[checkpoint] differentiable outputs must share a dtype: output ", k, " is ",
                 dtype_name(outs[k].dtype()), ", output ", diff[0], " is ", dtype_name(dt));
    slots.push_back({k, total, outs[k].shape()});
    total += outs[k].numel();
  }
  Tensor flat = ops::empty({total}, dt, outs[diff[0]].device());
  for (const auto& s : slots) {
    Tensor dst = ops::view(ops::narrow(flat, 0, s.offset, shape_numel(s.shape)), s.shape);
    ops::copy_(dst, outs[s.index]);
  }
  node->set_slots(slots, true);
  set_history(flat, node, inputs);
  for (const auto& s : slots) outs[s.index] = view(narrow(flat, 0, s.offset, shape_numel(s.shape)), s.shape);
  return outs;
}

}  // namespace strata
