// Whether (and how often) an autograd graph holds a node of a given name: the tests that
// check which backward node an op recorded (a fused one or the separate ops).
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <strata/autograd/node.h>
#include <strata/tensor/tensor.h>

namespace strata::testing {

/// How many nodes named `name` y's backward graph holds (each node once).
inline int count_nodes(const Tensor& y, const std::string& name) {
  std::vector<std::shared_ptr<Node>> todo{y.grad_fn()};
  std::set<Node*> seen;
  int n = 0;
  while (!todo.empty()) {
    auto node = todo.back();
    todo.pop_back();
    if (!node || !seen.insert(node.get()).second) continue;
    n += node->name() == name;
    for (const auto& e : node->next_edges()) todo.push_back(e.fn);
  }
  return n;
}

/// Whether y's backward graph holds a node named `name` ("LinearResidualBackward").
inline bool graph_has(const Tensor& y, const std::string& name) { return count_nodes(y, name) > 0; }

}  // namespace strata::testing
