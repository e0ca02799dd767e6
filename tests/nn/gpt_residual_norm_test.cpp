// The GPT block's attention residual add and ln_2 as one pass (linear_residual_layer_norm)
// where the residual add fuses and ln_2 is a plain LayerNorm without hooks: the same loss
// and gradients as the separate ops, bit for bit, in f32 and f64, with and without
// activation checkpointing; a hook on ln_2 keeps its own call.
#include <gtest/gtest.h>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/node.h>
#include <strata/nn/gpt.h>
#include <strata/tensor/ops.h>
#include "tests/graph_has.h"
#include "tests/test_tensors.h"

#include <set>

using namespace strata;

namespace {

struct FusionGuard {
  ResidualNormFusion saved = residual_norm_fusion();
  explicit FusionGuard(ResidualNormFusion f) { set_residual_norm_fusion(f); }
  ~FusionGuard() { set_residual_norm_fusion(saved); }
};

using strata::testing::count_nodes;
using strata::testing::graph_has;

nn::GPTConfig small_config(bool checkpoint) {
  nn::GPTConfig cfg;
  cfg.vocab = 23;
  cfg.block_size = 16;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 32;
  cfg.checkpoint = checkpoint;
  return cfg;
}

// loss and every parameter's gradient of a fresh model (same seed) under policy f
std::vector<std::vector<double>> loss_and_grads(ResidualNormFusion f, DType dt, bool checkpoint, bool& fused) {
  FusionGuard fg(f);
  Generator gen(5);
  nn::GPT model(small_config(checkpoint), gen);
  if (dt == DType::f64) model.to(DType::f64);
  const Tensor idx = strata::testing::random_tokens({3, 16}, 23, 6), tgt = strata::testing::random_tokens({3, 16}, 23, 7);
  Tensor loss = model.loss(idx, tgt);
  fused = graph_has(loss, "LayerNormAddBackward");
  backward(loss);
  std::vector<std::vector<double>> out{loss.detach().to_vector<double>()};
  for (const auto& [name, p] : model.named_parameters()) out.push_back(p.grad().to_vector<double>());
  return out;
}

}  // namespace

TEST(GptResidualNorm, SameLossAndGradientsWithAndWithoutTheFusion) {
  for (DType dt : {DType::f32, DType::f64})
    for (bool checkpoint : {false, true}) {
      bool fused_on = false, fused_off = true;
      const auto a = loss_and_grads(ResidualNormFusion::always, dt, checkpoint, fused_on);
      const auto b = loss_and_grads(ResidualNormFusion::never, dt, checkpoint, fused_off);
      if (!checkpoint) {
        EXPECT_TRUE(fused_on);  // a checkpointed block's graph is built in backward
      }
      EXPECT_FALSE(fused_off);
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < a.size(); ++k)
        ASSERT_EQ(a[k], b[k]) << "tensor " << k << " (0: loss) in " << dtype_name(dt) << " checkpoint " << checkpoint;
    }
}

// Each block's MLP residual joins the LayerNorm after it (the next block's ln_1, or ln_f)
// as its attention residual joins ln_2: 2 fused sites per block. A hook on a block's ln_1
// keeps that LayerNorm's own call (its hook sees it) and the values do not change.
TEST(GptResidualNorm, TheMlpResidualJoinsTheNextBlocksLayerNorm) {
  Generator gen(5);
  nn::GPT model(small_config(false), gen);
  const Tensor idx = strata::testing::random_tokens({3, 16}, 23, 6), tgt = strata::testing::random_tokens({3, 16}, 23, 7);
  const Tensor fused = model.loss(idx, tgt);
  EXPECT_EQ(count_nodes(fused, "LayerNormAddBackward"), 4);  // 2 blocks
  int calls = 0;
  auto ln1 = model.blocks()->child("1")->child("ln_1");
  const int id = ln1->register_forward_hooks([&](nn::Module&) { ++calls; }, nullptr);
  const Tensor hooked = model.loss(idx, tgt);
  EXPECT_EQ(calls, 1);
  // the chain across blocks runs only where every LayerNorm is plain: attn's + ln_2 remain
  EXPECT_EQ(count_nodes(hooked, "LayerNormAddBackward"), 2);
  EXPECT_EQ(hooked.item<double>(), fused.item<double>());
  ln1->remove_forward_hooks(id);
}

TEST(GptResidualNorm, TheDefaultFusesOnTheCpu) {
  bool fused = false;
  (void)loss_and_grads(ResidualNormFusion::automatic, DType::f32, false, fused);
  EXPECT_TRUE(fused);
}

TEST(GptResidualNorm, AHookOnLn2KeepsItsCall) {
  FusionGuard fg(ResidualNormFusion::always);
  nn::GPTConfig cfg = small_config(false);
  Generator gen(3);
  auto block = std::make_shared<nn::GPTBlock>(cfg, gen);
  Generator gx(4);
  Tensor x = ops::uniform({2, 16, 32}, -1, 1, gx);
  x.set_requires_grad(true);
  Tensor y = (*block)(x);
  EXPECT_TRUE(graph_has(y, "LayerNormAddBackward"));
  int calls = 0;
  auto ln2 = block->child("ln_2");
  const int id = ln2->register_forward_hooks([&](nn::Module&) { ++calls; }, nullptr);
  Tensor y2 = (*block)(x);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(graph_has(y2, "LayerNormAddBackward"));
  ln2->remove_forward_hooks(id);
  EXPECT_EQ(y.detach().to_vector<float>(), y2.detach().to_vector<float>());
}
