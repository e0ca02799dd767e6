// Models: parameter counts from the architecture formulas, GPT's causal property,
// initial loss, tied-weight gradients, activation checkpointing, GPT's named children
// (parameter names are a checkpoint format), and an MLP that learns.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/test_tensors.h"
#include <strata/autograd/engine.h>
#include <strata/core/memory.h>
#include <strata/nn/cnn.h>
#include <strata/nn/gpt.h>
#include <strata/nn/loss.h>
#include <strata/nn/mlp.h>
#include "test_util.h"

using namespace strata;
using strata::testing::random_tokens;
using strata::testing::expect_close;
using strata::testing::randn;

namespace {

int64_t gpt_param_count(const nn::GPTConfig& c) {
  const int64_t C = c.n_embd;
  const int64_t per_block = 2 * C                 // ln_1
                            + 3 * C * C + 3 * C   // c_attn
                            + C * C + C           // attn.c_proj
                            + 2 * C               // ln_2
                            + 4 * C * C + 4 * C   // c_fc
                            + 4 * C * C + C;      // mlp.c_proj
  return c.vocab * C + c.block_size * C + c.n_layer * per_block + 2 * C + (c.tie_weights ? 0 : c.vocab * C);
}

}  // namespace

TEST(Models, MlpParameterCount) {
  Generator g(1);
  nn::MLP m({.input = 784, .hidden = {256, 128}, .classes = 10}, g);
  EXPECT_EQ(m.num_parameters(), 235146);
  EXPECT_EQ(m.forward(randn({3, 1, 28, 28}, 1)).shape(), (Shape{3, 10}));
}

TEST(Models, CnnParameterCountAndShape) {
  for (bool bn : {true, false}) {
    Generator g(1);
    nn::CNNConfig cfg{.in_channels = 1, .channels = {32, 64}, .classes = 10, .batch_norm = bn, .dropout = 0.1};
    nn::CNN m(cfg, g);
    int64_t expect = 0, c = 1;
    for (int64_t o : {32, 64}) {
      expect += o * c * 9 + (bn ? 2 * o : o);  // conv (bias only without BN) + BN affine
      c = o;
    }
    expect += 64 * 7 * 7 * 128 + 128 + 128 * 10 + 10;
    EXPECT_EQ(m.num_parameters(), expect) << "batch_norm=" << bn;
    EXPECT_EQ(m.forward(randn({2, 1, 28, 28}, 2)).shape(), (Shape{2, 10}));
  }
}

TEST(Models, GptParameterCount) {
  for (bool tie : {true, false}) {
    nn::GPTConfig cfg{.vocab = 65, .block_size = 16, .n_layer = 3, .n_head = 4, .n_embd = 32, .tie_weights = tie};
    Generator g(1);
    nn::GPT m(cfg, g);
    EXPECT_EQ(m.num_parameters(), gpt_param_count(cfg)) << "tie=" << tie;
  }
}

TEST(Gpt, IsCausal) {
  nn::GPTConfig cfg{.vocab = 17, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
  Generator g(3);
  nn::GPT m(cfg, g);
  Tensor idx = random_tokens({2, 8}, 17, 4);
  auto ids = idx.to_vector<int64_t>();
  const int t = 5;
  ids[t] = (ids[t] + 1) % 17;      // batch 0, position 5
  ids[8 + t] = (ids[8 + t] + 3) % 17;  // batch 1, position 5
  Tensor idx2 = ops::from_vector<int64_t>(ids, {2, 8});
  const auto a = m.forward(idx).to_vector<float>(), b = m.forward(idx2).to_vector<float>();
  for (int bb = 0; bb < 2; ++bb)
    for (int p = 0; p < 8; ++p) {
      double diff = 0;
      for (int v = 0; v < 17; ++v) diff = std::max(diff, double(std::abs(a[(bb * 8 + p) * 17 + v] - b[(bb * 8 + p) * 17 + v])));
      if (p < t) EXPECT_LT(diff, 1e-6) << "batch " << bb << " position " << p << " saw the future";
      else EXPECT_GT(diff, 1e-4) << "batch " << bb << " position " << p << " ignored its input";
    }
  EXPECT_THROW(m.forward(random_tokens({1, 9}, 17, 5)), Error);
}

TEST(Gpt, InitialLossIsLogVocab) {
  nn::GPTConfig cfg{.vocab = 64, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32};
  Generator g(5);
  nn::GPT m(cfg, g);
  Tensor idx = random_tokens({4, 16}, 64, 6), tgt = random_tokens({4, 16}, 64, 7);
  EXPECT_NEAR(m.loss(idx, tgt).item<double>(), std::log(64.0), 0.05);
  // loss() is cross-entropy of forward()
  nn::CrossEntropyLoss ce(-1);
  EXPECT_NEAR(m.loss(idx, tgt).item<double>(), ce(m.forward(idx), tgt).item<double>(), 1e-6);
}

TEST(Gpt, TiedWeightGetsEmbeddingAndHeadGradients) {
  // The untied model from the same seed has identical weights except lm_head, which is
  // registered (and drawn) last; set it equal to wte, then grad(tied wte) must equal
  // grad(untied wte) + grad(untied lm_head).
  nn::GPTConfig cfg{.vocab = 23, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 16};
  Generator g1(9), g2(9);
  nn::GPT tied(cfg, g1);
  cfg.tie_weights = false;
  nn::GPT untied(cfg, g2);
  Tensor head = untied.parameter("lm_head.weight");
  ops::copy_(head, tied.parameter("wte.weight"));
  for (auto& [n, p] : tied.named_parameters())
    ASSERT_EQ(p.to_vector<float>(), untied.parameter(n).to_vector<float>()) << n;
  Tensor idx = random_tokens({2, 8}, 23, 1), tgt = random_tokens({2, 8}, 23, 2);
  Tensor lt = tied.loss(idx, tgt), lu = untied.loss(idx, tgt);
  EXPECT_NEAR(lt.item<double>(), lu.item<double>(), 1e-6);
  backward(lt);
  backward(lu);
  Tensor gsum = ops::binary(ops::BinaryOp::add, untied.parameter("wte.weight").grad(), head.grad());
  expect_close(tied.parameter("wte.weight").grad(), gsum, 1e-5, "wte grad");
  // both paths contribute: neither part alone matches
  EXPECT_GT(ops::sum_squares(head.grad()), 0.0);
  EXPECT_GT(ops::sum_squares(untied.parameter("wte.weight").grad()), 0.0);
}

// Full (each block) and selective (each attention core) recomputation against none: the
// same loss and gradients, with dropout (its masks replayed in the recompute), in both
// attention paths (the fused core at p = 0, the unfused one with dropout).
TEST(Gpt, RecomputedActivationsGiveIdenticalLossAndGrads) {
  for (const double p : {0.0, 0.1})
    for (const char* mode : {"full", "selective"}) {
      SCOPED_TRACE(std::string(mode) + " dropout " + std::to_string(p));
      nn::GPTConfig cfg{.vocab = 19, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16, .dropout = p};
      Generator g1(21), g2(21);
      nn::GPT plain(cfg, g1);
      cfg.checkpoint = std::string(mode) == "full";
      cfg.selective = std::string(mode) == "selective";
      nn::GPT re(cfg, g2);
      Tensor idx = random_tokens({2, 8}, 19, 3), tgt = random_tokens({2, 8}, 19, 4);
      for (int step = 0; step < 2; ++step) {  // twice: dropout generators must stay in lockstep
        Tensor a = plain.loss(idx, tgt), b = re.loss(idx, tgt);
        EXPECT_EQ(a.item<double>(), b.item<double>());
        backward(a);
        backward(b);
        for (auto& [n, par] : plain.named_parameters()) {
          ASSERT_TRUE(re.parameter(n).grad().defined()) << n;
          expect_close(re.parameter(n).grad(), par.grad(), 1e-6, n.c_str());
        }
        plain.zero_grad();
        re.zero_grad();
      }
    }
}

// Selective recomputation keeps no attention probabilities: the graph's activations
// shrink by the (B, H, T, T) tensor of every block.
// Selective recomputation keeps what the attention core would: the rows' log-sum-exp (the
// fused op stores no (B, H, T, T) probabilities), 3 blocks x (2, 4, 32) f32.
TEST(Gpt, SelectiveRecomputationKeepsNoAttentionStatistics) {
  const auto held = [](bool selective) {
    nn::GPTConfig cfg{.vocab = 19, .block_size = 32, .n_layer = 3, .n_head = 4, .n_embd = 16,
                      .selective = selective};
    Generator g(5);
    nn::GPT m(cfg, g);
    Tensor idx = random_tokens({2, 32}, 19, 3), tgt = random_tokens({2, 32}, 19, 4);
    const int64_t before = cpu_memory().stats(MemCategory::activations).current;
    Tensor loss = m.loss(idx, tgt);
    const int64_t after = cpu_memory().stats(MemCategory::activations).current;
    backward(loss);
    return after - before;
  };
  const int64_t none = held(false), selective = held(true);
  EXPECT_EQ(none - selective, int64_t(3) * 2 * 4 * 32 * 4) << none << " vs " << selective;
}

TEST(Gpt, ChildrenAndParametersKeepTheirNames) {
  // Checkpoints and the PyTorch cross-check read these names: they must not change.
  nn::GPTConfig cfg{.vocab = 11, .block_size = 4, .n_layer = 3, .n_head = 2, .n_embd = 8, .tie_weights = false};
  Generator g(5);
  auto m = std::make_shared<nn::GPT>(cfg, g);
  std::vector<std::string> children;
  for (const auto& [n, c] : m->named_children()) children.push_back(n);
  EXPECT_EQ(children, (std::vector<std::string>{"wte", "wpe", "drop", "h", "ln_f", "lm_head"}));
  ASSERT_EQ(m->blocks()->size(), 3u);
  EXPECT_EQ(m->blocks(), m->child("h"));
  EXPECT_EQ(m->blocks()->child("2"), m->child("h.2"));

  std::vector<std::string> want{"wte.weight", "wpe.weight"};
  for (int i = 0; i < 3; ++i)
    for (const char* leaf : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                             "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                             "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"})
      want.push_back("h." + std::to_string(i) + "." + leaf);
  for (const char* leaf : {"ln_f.weight", "ln_f.bias", "lm_head.weight"}) want.emplace_back(leaf);
  std::vector<std::string> got;
  for (const auto& [n, p] : m->named_parameters()) got.push_back(n);
  EXPECT_EQ(got, want);
}

TEST(Gpt, ForwardFindsChildrenByNameAtCallTime) {
  nn::GPTConfig cfg{.vocab = 13, .block_size = 6, .n_layer = 2, .n_head = 2, .n_embd = 8};
  Generator g(8);
  auto m = std::make_shared<nn::GPT>(cfg, g);
  Tensor idx = random_tokens({2, 6}, 13, 9);
  const std::vector<float> before = m->forward(idx).to_vector<float>();
  // h.1 replaced by h.0: forward must run the replacement (no block cached by position).
  std::shared_ptr<nn::Module> second = m->child("h.1");
  m->replace_child("h.1", m->child("h.0"));
  EXPECT_NE(m->forward(idx).to_vector<float>(), before);
  m->replace_child("h.1", second);
  EXPECT_EQ(m->forward(idx).to_vector<float>(), before);
  EXPECT_THROW(m->child("blocks"), Error);  // a wrong name names the children
}

TEST(Training, MlpLearnsLinearlySeparableData) {
  // Labels are argmax of a random linear map, so the classes are linearly separable.
  const int64_t n = 512, d = 8, k = 4;
  Tensor x = randn({n, d}, 100);
  Tensor w = randn({d, k}, 101);
  Tensor labels = ops::argmax(ops::matmul(x, w), 1);
  Generator g(5);
  nn::MLP m({.input = d, .hidden = {32}, .classes = k}, g);
  // SGD with momentum 0.9 written out (the nn tests do not link optim/).
  std::vector<Tensor> params = m.parameters(), bufs;
  for (auto& p : params) bufs.push_back(ops::zeros_like(p));
  nn::CrossEntropyLoss ce;
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    m.zero_grad();
    Tensor loss = ce(m.forward(x), labels);
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    backward(loss);
    for (size_t i = 0; i < params.size(); ++i) {
      ops::mul_(bufs[i], 0.9);
      ops::add_(bufs[i], params[i].grad());
      ops::add_(params[i], bufs[i], -0.1);
    }
  }
  const auto pred = ops::argmax(m.forward(x), 1).to_vector<int64_t>(), lab = labels.to_vector<int64_t>();
  int correct = 0;
  for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == lab[i];
  EXPECT_LT(last, first);
  EXPECT_GT(double(correct) / double(n), 0.95) << "loss " << first << " -> " << last;
}
