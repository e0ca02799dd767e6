// A named Node whose backward is a closure. Saved tensors live in the closure's
// captures, so releasing the closure frees them after backward.
#pragma once
#include <functional>
#include <utility>

#include <strata/autograd/node.h>

namespace strata {

class LambdaNode final : public Node {
 public:
  using Fn = std::function<std::vector<Tensor>(const Tensor&)>;
  LambdaNode(const char* name, Fn fn) : name_(name), fn_(std::move(fn)) {}
  std::vector<Tensor> apply(const Tensor& g) override { return fn_(g); }
  std::string name() const override { return name_; }
  void release_saved() override {
    fn_ = nullptr;
    Node::release_saved();
  }

 private:
  const char* name_;
  Fn fn_;
};

/// Records `out` as produced from `inputs` by a node named `name` with backward `fn`
/// (only when grad mode is on and an input requires grad). Returns out.
inline Tensor record_fn(const char* name, Tensor out, const std::vector<Tensor>& inputs, LambdaNode::Fn fn) {
  if (any_requires_grad_list(inputs)) {
    auto node = std::make_shared<LambdaNode>(name, std::move(fn));
    set_history(out, node, inputs);
  }
  return out;
}

}  // namespace strata
