// The GPT MLP runs c_fc + GELU as one fused autograd node (linear_gelu) only
// when both children are the plain layers without forward hooks; otherwise each child's
// operator() runs (hooks see their calls). The values are the same either way. Likewise
// the block adds its residuals inside attn's and mlp's c_proj (linear_residual) only when
// c_proj is a plain Linear and the dropout after it does nothing.
#include <gtest/gtest.h>

#include <strata/autograd/functions.h>
#include <strata/autograd/node.h>
#include <strata/nn/gpt.h>
#include <strata/tensor/ops.h>
#include "test_util.h"

using namespace strata;

namespace {

using strata::testing::graph_has;

// One block of width 8, two heads, context 8, vocabulary 11.
nn::GPTConfig tiny_config() {
  nn::GPTConfig cfg;
  cfg.vocab = 11;
  cfg.block_size = 8;
  cfg.n_layer = 1;
  cfg.n_head = 2;
  cfg.n_embd = 8;
  return cfg;
}

}  // namespace

TEST(LinearGelu, GptMlpFusesOnlyPlainChildren) {
  nn::GPTConfig cfg = tiny_config();
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

TEST(LinearResidual, GptBlockFusesOnlyPlainProjectionsWithoutDropout) {
  nn::GPTConfig cfg = tiny_config();
  cfg.dropout = 0.25;
  Generator gen(3);
  auto block = std::make_shared<nn::GPTBlock>(cfg, gen);
  Generator gx(4);
  Tensor x = ops::uniform({2, 8, 8}, -1, 1, gx);
  x.set_requires_grad(true);
  // training with dropout p > 0: the unfused adds
  Tensor yd = (*block)(x);
  EXPECT_FALSE(graph_has(yd, "LinearResidualBackward"));
  EXPECT_TRUE(graph_has(yd, "AddBackward"));
  block->eval();  // dropout off: both residual adds fused
  Tensor y = (*block)(x);
  EXPECT_TRUE(graph_has(y, "LinearResidualBackward"));
  EXPECT_FALSE(graph_has(y, "AddBackward"));
  // a hook on mlp.c_proj: that projection runs unfused and its hook sees the call
  int calls = 0;
  auto proj = block->child("mlp")->child("c_proj");
  const int id = proj->register_forward_hooks([&](nn::Module&) { ++calls; }, nullptr);
  Tensor y2 = (*block)(x);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(graph_has(y2, "AddBackward"));
  proj->remove_forward_hooks(id);
  const auto a = y.detach().to_vector<float>(), c = y2.detach().to_vector<float>();
  ASSERT_EQ(a.size(), c.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], c[i], 1e-6 * (1 + std::abs(c[i])));
}
