// Containers: Sequential (chains its children) and ModuleList (holds them).
#pragma once
#include <memory>
#include <vector>

#include <strata/nn/module.h>

namespace strata::nn {

/// Children named "0", "1", ...; forward feeds each child's output to the next,
/// reading the child slots at call time (replace_child takes effect).
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(const std::vector<std::shared_ptr<Module>>& layers);
  /// Appends a layer named by its position.
  void push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }
  size_t size() const { return named_children().size(); }
  Module& operator[](size_t i) const { return child_at(i); }
};

/// An indexable list of modules with no forward (e.g. GPT's blocks "h.0", "h.1", ...).
class ModuleList : public Module {
 public:
  ModuleList() = default;
  void push_back(std::shared_ptr<Module> m);
  std::string type_name() const override { return "ModuleList"; }
  size_t size() const { return named_children().size(); }
  Module& operator[](size_t i) const { return child_at(i); }
};

}  // namespace strata::nn
