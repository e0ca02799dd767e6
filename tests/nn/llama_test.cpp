// The Llama module: its parameter names and count (as the planner's description lists
// them), the SwiGLU width rule, grouped-query attention as multi-head attention with
// repeated key/value heads, the pipeline stages composing to the model, activation
// checkpointing, and a few training steps lowering the loss.
#include <gtest/gtest.h>

#include <strata/autograd/engine.h>
#include <strata/autograd/grad_mode.h>
#include <strata/nn/llama.h>
#include <strata/nn/llama_spec.h>
#include "test_util.h"

namespace strata::nn {
namespace {

LlamaConfig small(int64_t kv = 2, bool tied = false) {
  return {.vocab = 16, .block_size = 8, .n_layer = 2, .n_head = 4, .n_kv_head = kv, .n_embd = 16,
          .intermediate_size = 24, .tie_weights = tied};
}

Tensor tokens(int64_t b, int64_t t, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> v(size_t(b * t));
  const auto u = ops::uniform({b * t}, 0.0, 16.0, g).to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::min<int64_t>(15, int64_t(u[i]));
  return ops::from_vector(v, {b, t});
}

TEST(Llama, ParameterNamesShapesAndTheSpecAgree) {
  Generator gen(1);
  Llama m(small(), gen);
  const NamedTensors ps = m.named_parameters();
  std::vector<std::string> want{"tok_embeddings.weight"};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    for (const char* n : {"attention_norm.weight", "attention.wq.weight", "attention.wk.weight", "attention.wv.weight",
                          "attention.wo.weight", "ffn_norm.weight", "feed_forward.w1.weight", "feed_forward.w2.weight",
                          "feed_forward.w3.weight"})
      want.push_back(p + n);
  }
  want.push_back("norm.weight");
  want.push_back("output.weight");
  ASSERT_EQ(ps.size(), want.size());
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(ps[i].first, want[i]);
  EXPECT_EQ(m.parameter("layers.0.attention.wk.weight").shape(), (Shape{8, 16}));  // (Hkv*hd, C), (out, in)
  EXPECT_EQ(m.parameter("layers.0.feed_forward.w2.weight").shape(), (Shape{16, 24}));
  const ModelSpec spec = llama_spec(small());
  ASSERT_EQ(spec.params.size(), ps.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(spec.params[i].name, ps[i].first);
    EXPECT_EQ(spec.params[i].shape, ps[i].second.shape()) << ps[i].first;
  }
  EXPECT_EQ(spec.total, m.num_parameters());
  // Tied: no output.weight, the head is the embedding.
  Llama t(small(2, true), gen);
  EXPECT_EQ(t.num_parameters(), m.num_parameters() - 16 * 16);
  EXPECT_EQ(t.head_weight_name(), "tok_embeddings.weight");
  EXPECT_EQ(llama_spec(small(2, true)).total, t.num_parameters());
}

TEST(Llama, SwigluWidthRuleAsTorchtitan) {
  LlamaConfig c{.n_embd = 4096, .multiple_of = 256};
  EXPECT_EQ(c.hidden_dim(), 11008);  // Llama 2 7B: 2/3 of 4C, rounded up to 256
  c.ffn_dim_multiplier = 1.3;
  c.multiple_of = 1024;
  EXPECT_EQ(c.hidden_dim(), 14336);  // Llama 3 8B
  c.intermediate_size = 100;
  EXPECT_EQ(c.hidden_dim(), 100);
}

// Query head j reads key/value head j / (H / Hkv) (Hugging Face's repeat_kv): a GQA model
// equals the MHA model whose k and v weights repeat each kv head's rows.
TEST(Llama, GroupedQueryAttentionEqualsRepeatedKeyValueHeads) {
  Generator g1(3), g2(4);
  Llama gqa(small(2), g1), mha(small(4), g2);
  NamedTensors sd;
  for (const auto& [n, t] : gqa.state_dict()) {
    const bool kv = n.find(".wk.") != std::string::npos || n.find(".wv.") != std::string::npos;
    if (!kv) {
      sd.emplace_back(n, t);
      continue;
    }
    // (2 heads * hd, C) -> (4 heads * hd, C): rows of head j/2 for head j.
    const Tensor heads = ops::reshape(t, {2, 1, 4, 16});
    sd.emplace_back(n, ops::reshape(ops::contiguous(ops::expand(heads, {2, 2, 4, 16})), {16, 16}));
  }
  mha.load_state_dict(sd);
  const Tensor x = tokens(2, 8, 5);
  testing::expect_close(gqa.forward(x), mha.forward(x), 1e-5, "logits");
  // And multi-query (one kv head) is accepted.
  Generator g3(6);
  Llama mqa(small(1), g3);
  EXPECT_EQ(mqa.forward(x).shape(), (Shape{2, 8, 16}));
}

// The loss of one forward, after its backward.
double backward_loss(Llama& m, const Tensor& x, const Tensor& y) {
  const Tensor loss = m.loss(x, y);
  backward(loss);
  return loss.item<double>();
}

TEST(Llama, StagesComposeToTheModelAndRecomputationKeepsGradients) {
  Generator g1(7), g2(7), g3(7);
  LlamaConfig c = small();
  Llama a(c, g1);
  c.checkpoint = true;
  Llama b(c, g2);
  const Tensor x = tokens(2, 8, 8), y = tokens(2, 8, 9);
  {
    NoGradGuard no_grad;
    const Tensor h = a.forward_stage(x, 0, 1, true, false);
    EXPECT_EQ(h.shape(), (Shape{2, 8, 16}));
    testing::expect_close(a.forward_stage(h, 1, 2, false, true), a.forward(x), 1e-6, "stages");
  }
  c.checkpoint = false;
  c.selective = true;  // rotary and the attention core recomputed, the projections kept
  Llama s(c, g3);
  const double la = backward_loss(a, x, y), lb = backward_loss(b, x, y), ls = backward_loss(s, x, y);
  EXPECT_EQ(la, lb);
  EXPECT_EQ(la, ls);
  const NamedTensors pa = a.named_parameters(), pb = b.named_parameters(), ps = s.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    testing::expect_close(pa[i].second.grad(), pb[i].second.grad(), 1e-6, pa[i].first.c_str());
    testing::expect_close(pa[i].second.grad(), ps[i].second.grad(), 1e-6, pa[i].first.c_str());
  }
}

// Plain q, k, v projections run as one packed projection (linear_packed, grouped heads read
// in place); a forward hook on wq (as a wrapper such as FSDP adds) sends the model back to
// the three separate projections, repeated heads and cat. Same loss and gradients, with
// and without selective recomputation, GQA and MHA.
TEST(Llama, PackedProjectionsEqualTheSeparateOnes) {
  for (const int64_t kv : {2, 4})
    for (const bool selective : {false, true}) {
      LlamaConfig c = small(kv);
      c.selective = selective;
      Generator g1(12), g2(12);
      const auto packed = std::make_shared<Llama>(c, g1), separate = std::make_shared<Llama>(c, g2);
      for (const auto& blk : separate->named_modules())
        if (blk.first.size() > 3 && blk.first.substr(blk.first.size() - 3) == ".wq")
          blk.second->register_forward_hooks([](Module&) {}, [](Module&, const Tensor& out) { return out; });
      const Tensor x = tokens(2, 8, 13), y = tokens(2, 8, 14);
      const std::string at = "kv " + std::to_string(kv) + (selective ? " selective" : "");
      EXPECT_NEAR(backward_loss(*packed, x, y), backward_loss(*separate, x, y), 1e-6) << at;
      const NamedTensors pa = packed->named_parameters(), pb = separate->named_parameters();
      ASSERT_EQ(pa.size(), pb.size());
      for (size_t i = 0; i < pa.size(); ++i)
        testing::expect_close(pa[i].second.grad(), pb[i].second.grad(), 1e-5, (at + " " + pa[i].first).c_str());
    }
}

TEST(Llama, ResidualAddsJoinTheOutputProjectionsWithTheSameValues) {
  Generator g1(21), g2(21);
  const auto fused = std::make_shared<Llama>(small(), g1), unfused = std::make_shared<Llama>(small(), g2);
  int calls = 0;  // hooks on wo and w2 keep their residual adds separate
  for (const auto& [name, m] : unfused->named_modules())
    if (name.size() > 3 && (name.substr(name.size() - 3) == ".wo" || name.substr(name.size() - 3) == ".w2"))
      m->register_forward_hooks([&](Module&) { ++calls; }, nullptr);
  const Tensor x = tokens(2, 8, 22), y = tokens(2, 8, 23);
  EXPECT_TRUE(testing::graph_has(fused->loss(x, y), "LinearResidualBackward"));
  EXPECT_FALSE(testing::graph_has(unfused->loss(x, y), "LinearResidualBackward"));
  EXPECT_EQ(calls, 4);  // two blocks, wo and w2 each
  EXPECT_EQ(backward_loss(*fused, x, y), backward_loss(*unfused, x, y));
  const NamedTensors pa = fused->named_parameters(), pb = unfused->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.grad().to_vector<float>(), pb[i].second.grad().to_vector<float>()) << pa[i].first;
}

TEST(Llama, TrainingLowersTheLoss) {
  Generator gen(10);
  Llama m(small(), gen);
  const Tensor x = tokens(4, 8, 11), y = tokens(4, 8, 12);
  const double first = m.loss(x, y).item<double>();
  EXPECT_NEAR(first, std::log(16.0), 0.2);  // near-uniform at init
  double last = first;
  for (int s = 0; s < 40; ++s) {  // plain SGD, p -= lr * grad
    Tensor l = m.loss(x, y);
    last = l.item<double>();
    backward(l);
    for (auto& [n, p] : m.named_parameters()) {
      float* w = p.data<float>();
      const std::vector<float> g = p.grad().to_vector<float>();
      for (size_t i = 0; i < g.size(); ++i) w[i] -= 1.0f * g[i];
    }
    m.zero_grad();
  }
  EXPECT_LT(last, first - 1.0);
}

TEST(Llama, ConfigErrorsNameTheField) {
  Generator gen(1);
  LlamaConfig c = small(3);  // 3 does not divide 4 heads
  EXPECT_THROW(Llama(c, gen), Error);
  c = small();
  c.n_embd = 12;  // head_dim 3: odd
  EXPECT_THROW(Llama(c, gen), Error);
}

}  // namespace
}  // namespace strata::nn
