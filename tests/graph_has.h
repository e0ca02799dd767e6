// Whether an autograd graph holds a node of a given name: the tests that check which
// backward node an op recorded (a fused one or the separate ops).
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <strata/autograd/node.h>
#include <strata/tensor/tensor.h>

namespace strata::testing {

/// Whether y's backward graph holds a node named `name` ("LinearResidualBackward").
inline bool graph_has(const Tensor& y, const std::string& name) {
  std::vector<std::shared_ptr<Node>> todo{y.grad_fn()};
  std::set<Node*> seen;
  while (!todo.empty()) {
    auto n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n.get()).second) continue;
    if (n->name() == name) return true;
    for (const auto& e : n->next_edges()) todo.push_back(e.fn);
  }
  return false;
}

}  // namespace strata::testing
