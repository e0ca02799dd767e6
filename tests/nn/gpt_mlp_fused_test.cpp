// The GPT MLP runs c_fc + GELU as one fused autograd node (linear_gelu, issue 21) only
// when both children are the plain layers without forward hooks; otherwise each child's
// operator() runs (hooks see their calls). The values are the same either way.
#include <gtest/gtest.h>

#include <strata/autograd/functions.h>
#include <strata/autograd/node.h>
#include <strata/nn/gpt.h>
#include <strata/tensor/ops.h>

using namespace strata;

namespace {

bool graph_has(const Tensor& y, const std::string& name) {
  std::vector<std::shared_ptr<Node>> todo{y.grad_fn()};
  while (!todo.empty()) {
    auto n = todo.back();
    todo.pop_back();
    if (!n) continue;
    if (n->name() == name) return true;
    for (const auto& e : n->next_edges()) todo.push_back(e.fn);
  }
  return false;
}

}  // namespace

TEST(LinearGelu, GptMlpFusesOnlyPlainChildren) {
  nn::GPTConfig cfg;
  cfg.vocab = 11;
  cfg.block_size = 8;
  cfg.n_layer = 1;
  cfg.n_head = 2;
  cfg.n_embd = 8;
  Generator gen(3);
  auto mlp = std::make_shared<nn::GPTMLP>(cfg, gen);
  Generator gx(4);
  Tensor x = ops::uniform({2, 8, 8}, -1, 1, gx);
  x.set_requires_grad(true);
  Tensor y = (*mlp)(x);
  ASSERT_TRUE(y.grad_fn() != nullptr);
  // the fused node is in the graph, no separate GELU node
  EXPECT_TRUE(graph_has(y, "LinearGeluBackward"));
  EXPECT_FALSE(graph_has(y, "GeluTanhBackward"));
  // with a hook on c_fc, the unfused path runs the hook; the values do not change
  int calls = 0;
  auto fc = mlp->child("c_fc");
  const int id = fc->register_forward_hooks([&](nn::Module&) { ++calls; }, nullptr);
  Tensor y2 = (*mlp)(x);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(y2.detach().to_vector<float>(), y.detach().to_vector<float>());
  fc->remove_forward_hooks(id);
}
