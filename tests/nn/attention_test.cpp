// GPT internals: attention against a naive per-head loop (fixes the q|k|v and head
// layout that tensor parallelism and weight import rely on), and finite-difference
// gradient checks of the attention and the whole model in f64 (via Module::to).
#include <gtest/gtest.h>

#include <cmath>

#include <strata/autograd/gradcheck.h>
#include <strata/nn/gpt.h>
#include <strata/nn/linear.h>
#include "test_util.h"

using namespace strata;
using strata::testing::randn;

TEST(Attention, MatchesNaivePerHeadLoops) {
  const int B = 2, T = 5, C = 8, H = 2, D = C / H;
  nn::GPTConfig cfg{.vocab = 5, .block_size = 8, .n_layer = 1, .n_head = H, .n_embd = C};
  Generator g(4);
  nn::CausalSelfAttention attn(cfg, g);
  // non-zero biases so their placement is checked too
  attn.set_parameter("c_attn.bias", randn({3 * C}, 5));
  attn.set_parameter("c_proj.bias", randn({C}, 6));
  Tensor x = randn({B, T, C}, 7);
  const auto xv = x.to_vector<float>();
  const auto wa = attn.parameter("c_attn.weight").to_vector<float>(), ba = attn.parameter("c_attn.bias").to_vector<float>();
  const auto wp = attn.parameter("c_proj.weight").to_vector<float>(), bp = attn.parameter("c_proj.bias").to_vector<float>();
  std::vector<float> ref(size_t(B * T * C));
  for (int b = 0; b < B; ++b) {
    std::vector<double> qkv(size_t(T * 3 * C));
    for (int t = 0; t < T; ++t)
      for (int o = 0; o < 3 * C; ++o) {
        double s = ba[o];
        for (int i = 0; i < C; ++i) s += double(wa[o * C + i]) * xv[(b * T + t) * C + i];
        qkv[t * 3 * C + o] = s;
      }
    std::vector<double> y(size_t(T * C), 0.0);
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        std::vector<double> p(size_t(i + 1));
        double mx = -1e300, z = 0;
        for (int j = 0; j <= i; ++j) {
          double s = 0;
          for (int d = 0; d < D; ++d) s += qkv[i * 3 * C + h * D + d] * qkv[j * 3 * C + C + h * D + d];
          p[j] = s / std::sqrt(double(D));
          mx = std::max(mx, p[j]);
        }
        for (int j = 0; j <= i; ++j) z += p[j] = std::exp(p[j] - mx);
        for (int j = 0; j <= i; ++j)
          for (int d = 0; d < D; ++d) y[i * C + h * D + d] += p[j] / z * qkv[j * 3 * C + 2 * C + h * D + d];
      }
    for (int t = 0; t < T; ++t)
      for (int o = 0; o < C; ++o) {
        double s = bp[o];
        for (int i = 0; i < C; ++i) s += double(wp[o * C + i]) * y[t * C + i];
        ref[(b * T + t) * C + o] = float(s);
      }
  }
  strata::testing::expect_close(attn.forward(x).to_vector<float>(), ref, 1e-5, "attention");
}

TEST(Attention, FewerHeadsFromANarrowerQkvProjection) {
  // A column-parallel c_attn that holds one of two heads (its q|k|v rows) gives the
  // attention of that head alone; c_proj then sees (B, T, head_dim).
  const int C = 8, H = 2, D = C / H;
  nn::GPTConfig cfg{.vocab = 5, .block_size = 8, .n_layer = 1, .n_head = H, .n_embd = C, .bias = false};
  Generator g(8);
  nn::CausalSelfAttention full(cfg, g);
  Tensor wa = full.parameter("c_attn.weight"), wp = full.parameter("c_proj.weight");
  Tensor x = randn({1, 4, C}, 9);
  Tensor sum_heads;
  for (int h = 0; h < H; ++h) {
    nn::CausalSelfAttention part(cfg, g);
    // rows of head h in q, k and v; columns of head h in c_proj
    auto shard = std::make_shared<nn::Linear>(C, 3 * D, g, false);
    shard->set_parameter("weight", ops::cat({ops::narrow(wa, 0, h * D, D), ops::narrow(wa, 0, C + h * D, D),
                                             ops::narrow(wa, 0, 2 * C + h * D, D)}, 0));
    auto proj = std::make_shared<nn::Linear>(D, C, g, false);
    proj->set_parameter("weight", ops::contiguous(ops::narrow(wp, 1, h * D, D)));
    part.replace_child("c_attn", shard);
    part.replace_child("c_proj", proj);
    Tensor y = part.forward(x);
    sum_heads = h == 0 ? y : ops::binary(ops::BinaryOp::add, sum_heads, y);
  }
  strata::testing::expect_close(sum_heads, full.forward(x), 1e-5, "sum of per-head shards");
}

TEST(Attention, GradcheckInF64) {
  nn::GPTConfig cfg{.vocab = 5, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 4};
  Generator g(10);
  nn::CausalSelfAttention attn(cfg, g);
  attn.to(DType::f64);
  Tensor x = randn({2, 3, 4}, 11, DType::f64);
  x.set_requires_grad(true);
  Tensor wa = ops::clone(attn.parameter("c_attn.weight"));
  wa.set_requires_grad(true);
  auto res = gradcheck(
      [&](const std::vector<Tensor>& in) {
        attn.set_parameter("c_attn.weight", in[1]);
        return attn.forward(in[0]);
      },
      {x, wa});
  EXPECT_TRUE(res.ok) << res.message;
}

TEST(Gpt, GradcheckOfLossInF64) {
  nn::GPTConfig cfg{.vocab = 7, .block_size = 4, .n_layer = 1, .n_head = 2, .n_embd = 8};
  Generator g(12);
  nn::GPT gpt(cfg, g);
  gpt.to(DType::f64);
  // larger weights than the 0.02 init so every path carries signal
  const std::vector<std::string> names{"wte.weight", "h.0.attn.c_attn.weight", "h.0.mlp.c_fc.bias", "ln_f.weight"};
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < names.size(); ++i) {
    Tensor p = ops::binary_scalar(ops::BinaryOp::add, randn(gpt.parameter(names[i]).shape(), 20 + i, DType::f64),
                                  names[i] == "ln_f.weight" ? 1.0 : 0.0);
    p.set_requires_grad(true);
    inputs.push_back(p);
  }
  Tensor idx = ops::from_vector<int64_t>({1, 4, 6, 0, 3, 3, 2, 5}, {2, 4});
  Tensor tgt = ops::from_vector<int64_t>({4, 6, 0, 2, 3, 2, 5, 1}, {2, 4});
  auto res = gradcheck(
      [&](const std::vector<Tensor>& in) {
        for (size_t i = 0; i < names.size(); ++i) gpt.set_parameter(names[i], in[i]);
        return gpt.loss(idx, tgt);
      },
      inputs, 1e-6, 1e-6, 1e-4);
  EXPECT_TRUE(res.ok) << res.message;
}
