// Whole models under bf16/f16 autocast (autograd/autocast.h): MLP, CNN and a tiny GPT
// keep f32 parameters and f32 gradients, give an f32 loss, match the f32 gradients to
// 16-bit tolerance, and train (SGD) like the f32 run does.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "tests/test_tensors.h"
#include <strata/autograd/autocast.h>
#include <strata/autograd/engine.h>
#include <strata/autograd/grad_mode.h>
#include <strata/nn/cnn.h>
#include <strata/nn/gpt.h>
#include <strata/nn/loss.h>
#include <strata/nn/mlp.h>
#include "test_util.h"

using namespace strata;
using strata::testing::random_tokens;
using strata::testing::randn;

namespace {

Tensor labels(int64_t n, int64_t classes, uint64_t seed) { return random_tokens({n}, classes, seed); }

using LossFn = std::function<Tensor()>;

// One forward + backward under `dt` (nullopt: plain f32); returns the loss value and
// leaves the gradients in the parameters' .grad (zeroed first).
double step_grads(nn::Module& m, const LossFn& loss_fn, std::optional<DType> dt) {
  m.zero_grad();
  Tensor loss;
  {
    AutocastGuard ac(dt);
    loss = loss_fn();
  }
  EXPECT_EQ(loss.dtype(), DType::f32) << "the loss is an f32 op's output";
  backward(loss);
  return loss.item<double>();
}

std::vector<std::vector<float>> grads(const nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (auto& [name, p] : m.named_parameters()) {
    EXPECT_EQ(p.dtype(), DType::f32) << name << ": master weights stay f32";
    EXPECT_TRUE(p.grad().defined()) << name;
    if (!p.grad().defined()) return {};
    EXPECT_EQ(p.grad().dtype(), DType::f32) << name << ": gradients arrive as f32";
    out.push_back(p.grad().to_vector<float>());
  }
  return out;
}

// The autocast gradients agree with f32 ones: global norm within rel_tol and each
// tensor pointing the same way (cosine similarity > min_cos).
void expect_grads_close(nn::Module& m, const LossFn& loss_fn, DType dt, double rel_tol, double min_cos) {
  const double l32 = step_grads(m, loss_fn, std::nullopt);
  const auto g32 = grads(m);
  const double l16 = step_grads(m, loss_fn, dt);
  const auto g16 = grads(m);
  ASSERT_EQ(g32.size(), g16.size());
  EXPECT_NEAR(l16, l32, 2e-2 * std::abs(l32)) << dtype_name(dt);
  EXPECT_NE(l16, l32) << "autocast changed nothing";
  const auto names = m.named_parameters();
  double n32 = 0, n16 = 0;
  for (size_t t = 0; t < g32.size(); ++t) {
    double dot = 0, a2 = 0, b2 = 0;
    for (size_t i = 0; i < g32[t].size(); ++i) {
      dot += double(g32[t][i]) * g16[t][i];
      a2 += double(g32[t][i]) * g32[t][i];
      b2 += double(g16[t][i]) * g16[t][i];
    }
    n32 += a2, n16 += b2;
    if (a2 == 0 && b2 == 0) continue;
    EXPECT_GT(dot / std::sqrt(a2 * b2), min_cos) << names[t].first << " " << dtype_name(dt);
  }
  EXPECT_NEAR(std::sqrt(n16), std::sqrt(n32), rel_tol * std::sqrt(n32)) << dtype_name(dt);
}

// k SGD steps (p -= lr * grad) under dt; returns the losses.
std::vector<double> train(nn::Module& m, const LossFn& loss_fn, std::optional<DType> dt, int k, double lr) {
  std::vector<double> losses;
  for (int s = 0; s < k; ++s) {
    losses.push_back(step_grads(m, loss_fn, dt));
    NoGradGuard ng;
    for (auto& [name, p] : m.named_parameters()) {
      Tensor q = p;
      ops::add_(q, p.grad(), -lr);
    }
  }
  return losses;
}

// Training from the same init under autocast tracks the f32 run.
template <class Make>
void expect_trains_like_f32(Make make, const std::function<LossFn(nn::Module&)>& bind, int k, double lr) {
  auto m32 = make(), m16 = make();
  const auto l32 = train(*m32, bind(*m32), std::nullopt, k, lr);
  const auto l16 = train(*m16, bind(*m16), DType::bf16, k, lr);
  // plain SGD on the GPT oscillates a little: compare the mean of the last 5 losses
  auto tail = [](const std::vector<double>& l) {
    return (l.end()[-1] + l.end()[-2] + l.end()[-3] + l.end()[-4] + l.end()[-5]) / 5;
  };
  EXPECT_LT(tail(l32), 0.8 * l32.front());
  EXPECT_LT(tail(l16), 0.8 * l16.front()) << "bf16 autocast did not train";
  EXPECT_NEAR(tail(l16), tail(l32), 0.03 * l32.front()) << "bf16 autocast drifted from f32";
  for (auto& [name, p] : m16->named_parameters()) EXPECT_EQ(p.dtype(), DType::f32) << name;
}

std::shared_ptr<nn::MLP> make_mlp() {
  Generator g(21);
  return std::make_shared<nn::MLP>(nn::MLPConfig{.input = 48, .hidden = {64, 32}, .classes = 7}, g);
}

std::shared_ptr<nn::CNN> make_cnn() {
  Generator g(22);
  return std::make_shared<nn::CNN>(
      nn::CNNConfig{.in_channels = 2, .channels = {4, 8}, .classes = 5, .batch_norm = false, .image_size = 8,
                    .hidden = 16},
      g);
}

const nn::GPTConfig kGpt{.vocab = 31, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32};

std::shared_ptr<nn::GPT> make_gpt() {
  Generator g(23);
  return std::make_shared<nn::GPT>(kGpt, g);
}

LossFn classifier_loss(nn::Module& m, const Tensor& x, const Tensor& y) {
  return [&m, x, y] { return cross_entropy(m(x), y); };
}

}  // namespace

TEST(AutocastModels, MlpGradientsMatchF32) {
  auto m = make_mlp();
  const Tensor x = randn({16, 48}, 1), y = labels(16, 7, 2);
  expect_grads_close(*m, classifier_loss(*m, x, y), DType::bf16, 2e-2, 0.99);
  expect_grads_close(*m, classifier_loss(*m, x, y), DType::f16, 2e-3, 0.999);
}

TEST(AutocastModels, CnnGradientsMatchF32) {
  auto m = make_cnn();
  const Tensor x = randn({8, 2, 8, 8}, 3), y = labels(8, 5, 4);
  expect_grads_close(*m, classifier_loss(*m, x, y), DType::bf16, 2e-2, 0.99);
}

TEST(AutocastModels, GptGradientsMatchF32) {
  auto m = make_gpt();
  const Tensor idx = random_tokens({4, 16}, kGpt.vocab, 5), tgt = random_tokens({4, 16}, kGpt.vocab, 6);
  nn::GPT* gpt = m.get();
  expect_grads_close(*m, [gpt, idx, tgt] { return gpt->loss(idx, tgt); }, DType::bf16, 2e-2, 0.99);
}

TEST(AutocastModels, SgdUnderBf16TrainsLikeF32) {
  const Tensor x = randn({32, 48}, 7), y = labels(32, 7, 8);
  expect_trains_like_f32(make_mlp, [&](nn::Module& m) { return classifier_loss(m, x, y); }, 25, 0.2);
  const Tensor idx = random_tokens({4, 16}, kGpt.vocab, 9), tgt = random_tokens({4, 16}, kGpt.vocab, 10);
  expect_trains_like_f32(
      make_gpt,
      [&](nn::Module& m) {
        auto* gpt = static_cast<nn::GPT*>(&m);
        return LossFn([gpt, idx, tgt] { return gpt->loss(idx, tgt); });
      },
      30, 0.1);
}

// Activation checkpointing recomputes each block inside backward in the precision its
// forward ran in: the bf16 gradients equal those of the same model without checkpointing.
TEST(AutocastModels, CheckpointedGptRecomputesUnderTheForwardsAutocast) {
  auto m = make_gpt();
  const Tensor idx = random_tokens({4, 16}, kGpt.vocab, 5), tgt = random_tokens({4, 16}, kGpt.vocab, 6);
  nn::GPT* gpt = m.get();
  const LossFn loss = [gpt, idx, tgt] { return gpt->loss(idx, tgt); };
  step_grads(*m, loss, DType::bf16);
  const auto plain = grads(*m);
  gpt->set_checkpointing(true);
  step_grads(*m, loss, DType::bf16);
  const auto ckpt = grads(*m);
  ASSERT_EQ(plain.size(), ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i)
    for (size_t k = 0; k < plain[i].size(); ++k)
      ASSERT_NEAR(ckpt[i][k], plain[i][k], 1e-6 + 1e-5 * std::abs(plain[i][k])) << "tensor " << i << " element " << k;
}
