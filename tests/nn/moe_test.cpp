// The MoE layer against a per-token reference written out here (top-k, each expert's FFN
// on the token, the gated sum), its gradients against finite differences, the capacity
// rule and the drops, the auxiliary losses' values and injected gradients, hostile
// routing (every token to one expert), and the GPT and Llama families with MoE blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include <strata/autograd/engine.h>
#include <strata/autograd/gradcheck.h>
#include <strata/autograd/grad_mode.h>
#include <strata/core/error.h>
#include <strata/nn/gpt.h>
#include <strata/nn/llama.h>
#include <strata/nn/moe.h>
#include "test_util.h"

namespace strata::nn {
namespace {

MoEConfig cfg(int64_t experts, int64_t k) {
  MoEConfig c;
  c.experts = experts;
  c.top_k = k;
  c.aux_loss_coef = 0;
  return c;
}

// The layer's output for x (B, T, C), token by token, in f64 from its parameters.
std::vector<double> reference(MoE& moe, const Tensor& x) {
  const MoEConfig& c = moe.config();
  const int64_t n = x.size(0) * x.size(1), d = x.size(2), e = c.experts;
  const auto xv = ops::to_dtype(ops::contiguous(x), DType::f64).to_vector<double>();
  const auto wr = ops::to_dtype(moe.parameter("router.weight"), DType::f64).to_vector<double>();
  const Tensor w1t = moe.parameter("experts.w1");
  const int64_t h = w1t.size(1);
  const auto w1 = ops::to_dtype(w1t, DType::f64).to_vector<double>();
  const auto w2 = ops::to_dtype(moe.parameter("experts.w2"), DType::f64).to_vector<double>();
  const bool swiglu = moe.child("experts")->named_parameters().size() == 3;
  std::vector<double> w3;
  if (swiglu) w3 = ops::to_dtype(moe.parameter("experts.w3"), DType::f64).to_vector<double>();
  std::vector<double> out(size_t(n * d), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const double* xi = xv.data() + i * d;
    std::vector<double> logit(static_cast<size_t>(e)), p(static_cast<size_t>(e));
    for (int64_t a = 0; a < e; ++a) logit[a] = std::inner_product(xi, xi + d, wr.data() + a * d, 0.0);
    const double mx = *std::max_element(logit.begin(), logit.end());
    double z = 0;
    for (int64_t a = 0; a < e; ++a) z += std::exp(logit[a] - mx);
    for (int64_t a = 0; a < e; ++a)
      p[a] = c.gate == "softmax" ? std::exp(logit[a] - mx) / z : 1.0 / (1.0 + std::exp(-logit[a]));
    std::vector<int64_t> idx(static_cast<size_t>(e));
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    double gsum = 0;
    for (int64_t j = 0; j < c.top_k; ++j) gsum += p[idx[j]];
    for (int64_t j = 0; j < c.top_k; ++j) {
      const int64_t ex = idx[j];
      const double g = c.norm_topk ? p[ex] / gsum : p[ex];
      std::vector<double> hid(static_cast<size_t>(h));
      for (int64_t r = 0; r < h; ++r) {
        const double a = std::inner_product(xi, xi + d, w1.data() + (ex * h + r) * d, 0.0);
        if (swiglu) {
          const double u = std::inner_product(xi, xi + d, w3.data() + (ex * h + r) * d, 0.0);
          hid[r] = a / (1.0 + std::exp(-a)) * u;
        } else {
          hid[r] = 0.5 * a * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a)));
        }
      }
      for (int64_t o = 0; o < d; ++o)
        out[size_t(i * d + o)] += g * std::inner_product(hid.begin(), hid.end(), w2.begin() + (ex * d + o) * h, 0.0);
    }
  }
  return out;
}

TEST(MoE, ForwardEqualsThePerTokenReference) {
  for (const char* gate : {"softmax", "sigmoid"})
    for (auto act : {ExpertActivation::gelu, ExpertActivation::swiglu})
      for (bool norm : {true, false}) {
        Generator gen(3);
        MoEConfig c = cfg(4, 2);
        c.gate = gate;
        c.norm_topk = norm;
        auto moe = std::make_shared<MoE>(c, 8, 12, act, 0.3, 0.2, gen);
        const Tensor x = testing::randn({2, 5, 8}, 11);
        NoGradGuard no_grad;
        const auto got = moe->forward(x).to_vector<float>();
        const auto want = reference(*moe, x);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << gate << " element " << i;
      }
}

TEST(MoE, GroupedLinearGradientsMatchFiniteDifferences) {
  const Tensor x = testing::randn({7, 3}, 1, DType::f64).set_requires_grad(true);
  const Tensor w = testing::randn({3, 4, 3}, 2, DType::f64).set_requires_grad(true);
  for (const std::vector<int64_t>& counts : {std::vector<int64_t>{2, 0, 5}, {0, 0, 7}, {3, 4, 0}}) {
    const GradcheckResult r =
        gradcheck([&](const std::vector<Tensor>& in) { return grouped_linear(in[0], in[1], counts); }, {x, w});
    EXPECT_TRUE(r.ok) << r.message;
  }
  // No rows at all: an empty output, and a zero weight gradient.
  const Tensor none = ops::zeros({0, 3}, DType::f64).set_requires_grad(true);
  const Tensor y = grouped_linear(none, w, {0, 0, 0});
  EXPECT_EQ(y.shape(), (Shape{0, 4}));
}

TEST(MoE, LayerGradientsMatchFiniteDifferences) {
  // The routing is piecewise constant: away from ties, the output's gradient in the input,
  // the router, the experts and the shared expert is that of the chosen experts' gated sum.
  for (auto act : {ExpertActivation::gelu, ExpertActivation::swiglu}) {
    Generator gen(5);
    MoEConfig c = cfg(4, 2);
    c.shared_experts = 1;
    auto moe = std::make_shared<MoE>(c, 6, 8, act, 0.3, 0.2, gen);
    moe->to(DType::f64);
    const Tensor x = testing::randn({2, 3, 6}, 9, DType::f64).set_requires_grad(true);
    std::vector<Tensor> inputs{x};
    std::vector<std::string> names;
    for (const auto& [n, p] : moe->named_parameters()) {
      inputs.push_back(p);
      names.push_back(n);
    }
    const GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor>& in) {
          for (size_t i = 0; i < names.size(); ++i) moe->set_parameter(names[i], in[i + 1]);
          return moe->forward(in[0]);
        },
        inputs, 1e-6, 1e-5, 1e-3);
    EXPECT_TRUE(r.ok) << r.message;
  }
}

// The aux losses' injected gradient equals the gradient of the same losses written out
// and added to the objective.
TEST(MoE, AuxiliaryLossesInjectTheirExactGradient) {
  Generator gen(8);
  MoEConfig c = cfg(4, 2);
  c.aux_loss_coef = 0.5;
  c.z_loss_coef = 0.1;
  auto moe = std::make_shared<MoE>(c, 6, 8, ExpertActivation::gelu, 0.5, 0.2, gen);
  moe->to(DType::f64);
  const int64_t b = 2, t = 5, e = 4, k = 2;
  const Tensor x = testing::randn({b, t, 6}, 4, DType::f64);
  const double w = 0.25;  // as a step of four accumulated micro-batches weights its losses
  {
    AuxLossWeight weight(w);
    backward(sum(moe->forward(x)) * w);
  }
  const Tensor g_injected = ops::clone(moe->parameter("router.weight").grad());
  const MoEStats st = moe->take_stats();
  moe->zero_grad();
  // Written out: the balance loss per sequence and the z-loss on the same router.
  c.aux_loss_coef = 0;
  c.z_loss_coef = 0;
  MoE& m = *moe;
  const_cast<MoEConfig&>(m.config()) = c;
  const Tensor xf = reshape(x, {b * t, 6});
  const Tensor logits = linear(xf, m.parameter("router.weight"), Tensor());
  const Tensor p = softmax(logits, -1);
  const auto pv = p.detach().to_vector<double>();
  std::vector<double> f(size_t(b * e), 0.0);
  for (int64_t i = 0; i < b * t; ++i) {
    std::vector<int64_t> idx(static_cast<size_t>(e));
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t u, int64_t v) { return pv[i * e + u] > pv[i * e + v]; });
    for (int64_t j = 0; j < k; ++j) f[size_t((i / t) * e + idx[j])] += 1.0 / double(t * k);
  }
  const Tensor fb = ops::from_vector(f, {b, e});
  const Tensor bal = sum(sum(reshape(p, {b, t, e}), {1}) * fb) * (0.5 * double(e) / double(t * b));
  const Tensor mx = ops::amax(logits.detach(), 1, true);
  const Tensor lse = log(sum(exp(logits - mx), {1})) + reshape(mx, {b * t});
  const Tensor z = mean(square(lse)) * 0.1;
  EXPECT_NEAR(st.aux_loss, bal.item<double>(), 1e-12);
  EXPECT_NEAR(st.z_loss, z.item<double>(), 1e-12);
  backward((sum(m.forward(x)) + bal + z) * w);
  testing::expect_close(g_injected, m.parameter("router.weight").grad(), 1e-9, "router gradient");
}

TEST(MoE, CapacityDropsTheLaterAssignmentsOfAFullExpert) {
  Generator gen(2);
  MoEConfig c = cfg(4, 2);
  c.capacity_factor = 1.0;  // ceil(1.0 * T * k / E) = ceil(6 * 2 / 4) = 3 per expert per sequence
  auto moe = std::make_shared<MoE>(c, 4, 6, ExpertActivation::gelu, 0.3, 0.2, gen);
  // Hostile router: every token prefers expert 0, then expert 1 (the rows of the router
  // weight are the scores of constant-sign inputs).
  Tensor wr = ops::zeros({4, 4});
  ops::fill_(wr, 0.0);
  auto v = std::vector<float>(16, 0.0f);
  for (int64_t j = 0; j < 4; ++j) v[size_t(0 * 4 + j)] = 2.0f, v[size_t(1 * 4 + j)] = 1.0f;
  moe->set_parameter("router.weight", ops::from_vector(v, {4, 4}));
  Tensor x = ops::full({2, 6, 4}, 1.0);
  backward(sum(moe->forward(x)));
  const MoEStats st = moe->take_stats();
  // Per sequence: expert 0 keeps 3 of 6 first slots, expert 1 3 of 6 second slots.
  EXPECT_EQ(st.tokens, (std::vector<int64_t>{6, 6, 0, 0}));
  EXPECT_EQ(st.dropped, 12);
  // A dropped token of both experts passes nothing: its output rows are zero, the kept ones not.
  NoGradGuard no_grad;
  const auto y = moe->forward(x).to_vector<float>();
  for (int64_t s = 0; s < 2; ++s)
    for (int64_t t = 0; t < 6; ++t) {
      double a = 0;
      for (int64_t j = 0; j < 4; ++j) a += std::abs(y[size_t((s * 6 + t) * 4 + j)]);
      if (t < 3)
        EXPECT_GT(a, 0) << "token " << t;
      else
        EXPECT_EQ(a, 0) << "token " << t;
    }
}

TEST(MoE, EveryTokenToOneExpertTrainsAndLeavesTheOthersAZeroGradient) {
  Generator gen(2);
  auto moe = std::make_shared<MoE>(cfg(4, 1), 4, 6, ExpertActivation::swiglu, 0.3, 0.2, gen);
  std::vector<float> v(16, 0.0f);
  for (int64_t j = 0; j < 4; ++j) v[size_t(2 * 4 + j)] = 3.0f;  // expert 2 wins every token
  moe->set_parameter("router.weight", ops::from_vector(v, {4, 4}));
  backward(sum(moe->forward(ops::full({2, 3, 4}, 0.5))));
  EXPECT_EQ(moe->take_stats().tokens, (std::vector<int64_t>{0, 0, 6, 0}));
  const Tensor g = moe->parameter("experts.w1").grad();
  ASSERT_TRUE(g.defined());
  for (int64_t e = 0; e < 4; ++e) {
    const double s = ops::sum_squares(ops::select(g, 0, e));
    if (e == 2)
      EXPECT_GT(s, 0);
    else
      EXPECT_EQ(s, 0);
  }
}

TEST(MoE, FamiliesPutTheLayerOnEveryKthBlockWithTorchtitanNames) {
  Generator g1(1), g2(1);
  GPTConfig gc{.vocab = 16, .block_size = 8, .n_layer = 4, .n_head = 2, .n_embd = 8};
  gc.moe = cfg(4, 2);
  gc.moe.every = 2;
  auto gptp = std::make_shared<GPT>(gc, g1);
  GPT& gpt = *gptp;
  EXPECT_EQ(moe_layers(gpt).size(), 2u);
  EXPECT_EQ(gpt.parameter("h.1.mlp.experts.w1").shape(), (Shape{4, 32, 8}));
  EXPECT_EQ(gpt.parameter("h.3.mlp.router.weight").shape(), (Shape{4, 8}));
  EXPECT_NO_THROW(gpt.parameter("h.0.mlp.c_fc.weight"));
  LlamaConfig lc{.vocab = 16, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 8, .intermediate_size = 12};
  lc.moe = cfg(4, 2);
  lc.moe.shared_experts = 1;
  Llama llama(lc, g2);
  EXPECT_EQ(llama.parameter("layers.0.feed_forward.experts.w3").shape(), (Shape{4, 12, 8}));
  EXPECT_EQ(llama.parameter("layers.1.feed_forward.shared_experts.w2").shape(), (Shape{1, 8, 12}));
  // Both train: a few steps lower the loss.
  Generator gd(4);
  std::vector<int64_t> ids(32);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t((i * 7 + 3) % 16);
  const Tensor x = ops::from_vector(ids, {4, 8});
  std::vector<int64_t> nx(ids.begin() + 1, ids.end());
  nx.push_back(0);
  const Tensor y = ops::from_vector(nx, {4, 8});
  double first = 0, last = 0;
  for (int s = 0; s < 30; ++s) {
    Tensor loss = llama.loss(x, y);
    backward(loss);
    for (auto& [n, p] : llama.named_parameters()) {
      Tensor w = p;
      Tensor upd = ops::clone(p.grad());
      ops::mul_(upd, -0.05);
      ops::add_(w, upd);
    }
    llama.zero_grad();
    (s == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, first - 0.3);
}

TEST(MoE, ConfigErrorsNameTheKey) {
  Generator gen(1);
  MoEConfig c = cfg(4, 5);
  EXPECT_THROW(
      {
        try {
          MoE m(c, 4, 4, ExpertActivation::gelu, 0.1, 0.1, gen);
        } catch (const ConfigError& e) {
          EXPECT_NE(std::string(e.what()).find("model.moe.top_k"), std::string::npos) << e.what();
          throw;
        }
      },
      ConfigError);
}

}  // namespace
}  // namespace strata::nn
