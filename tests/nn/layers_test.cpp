// Layers against naive loops: Linear, Conv2d, BatchNorm2d, LayerNorm, pooling,
// Embedding, Dropout, CrossEntropyLoss; init ranges and reproducibility.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include <strata/autograd/engine.h>
#include <strata/nn/activation.h>
#include <strata/nn/container.h>
#include <strata/nn/conv.h>
#include <strata/nn/dropout.h>
#include <strata/nn/embedding.h>
#include <strata/nn/linear.h>
#include <strata/nn/loss.h>
#include <strata/nn/normalization.h>
#include <strata/nn/pooling.h>
#include "test_util.h"

using namespace strata;
using strata::testing::expect_close;
using strata::testing::randn;

TEST(Linear, ForwardMatchesNaiveLoops) {
  Generator g(1);
  nn::Linear lin(5, 3, g);
  Tensor x = randn({2, 4, 5}, 2);
  const auto xv = x.to_vector<float>(), w = lin.weight().to_vector<float>(), b = lin.bias().to_vector<float>();
  std::vector<float> ref(8 * 3);
  for (int r = 0; r < 8; ++r)
    for (int o = 0; o < 3; ++o) {
      double s = b[o];
      for (int i = 0; i < 5; ++i) s += double(xv[r * 5 + i]) * w[o * 5 + i];
      ref[r * 3 + o] = float(s);
    }
  Tensor y = lin.forward(x);
  EXPECT_EQ(y.shape(), (Shape{2, 4, 3}));
  expect_close(y.to_vector<float>(), ref, 1e-5);
}

TEST(Linear, InitIsPyTorchBoundAndReproducible) {
  Generator g1(7), g2(7), g3(8);
  nn::Linear a(64, 32, g1), b(64, 32, g2), c(64, 32, g3);
  EXPECT_EQ(a.weight().to_vector<float>(), b.weight().to_vector<float>());
  EXPECT_NE(a.weight().to_vector<float>(), c.weight().to_vector<float>());
  const double bound = 1.0 / std::sqrt(64.0);
  double mx = 0, sum = 0, sq = 0;
  for (float v : a.weight().to_vector<float>()) {
    mx = std::max(mx, double(std::abs(v)));
    sum += v;
    sq += double(v) * v;
  }
  const double n = 64 * 32;
  EXPECT_LE(mx, bound);
  EXPECT_GT(mx, 0.9 * bound);
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, bound * bound / 3, 0.1 * bound * bound / 3);  // var of U(-b,b)
  for (float v : a.bias().to_vector<float>()) EXPECT_LE(std::abs(v), bound);
  nn::Linear nb(4, 2, g1, /*bias=*/false);
  EXPECT_FALSE(nb.has_bias());
  EXPECT_EQ(nb.named_parameters().size(), 1u);
}

TEST(Conv2d, ForwardMatchesNaiveLoops) {
  Generator g(3);
  const int N = 2, C = 3, H = 6, W = 5, O = 4, K = 3, S = 2, P = 1;
  nn::Conv2d conv(C, O, K, g, S, P);
  Tensor x = randn({N, C, H, W}, 4);
  const int Ho = (H + 2 * P - K) / S + 1, Wo = (W + 2 * P - K) / S + 1;
  const auto xv = x.to_vector<float>(), w = conv.weight().to_vector<float>(), b = conv.bias().to_vector<float>();
  std::vector<float> ref(size_t(N * O * Ho * Wo));
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o)
      for (int i = 0; i < Ho; ++i)
        for (int j = 0; j < Wo; ++j) {
          double s = b[o];
          for (int c = 0; c < C; ++c)
            for (int ki = 0; ki < K; ++ki)
              for (int kj = 0; kj < K; ++kj) {
                const int hi = i * S - P + ki, wj = j * S - P + kj;
                if (hi < 0 || hi >= H || wj < 0 || wj >= W) continue;
                s += double(xv[((n * C + c) * H + hi) * W + wj]) * w[((o * C + c) * K + ki) * K + kj];
              }
          ref[((n * O + o) * Ho + i) * Wo + j] = float(s);
        }
  Tensor y = conv.forward(x);
  EXPECT_EQ(y.shape(), (Shape{N, O, Ho, Wo}));
  expect_close(y.to_vector<float>(), ref, 1e-5);
  const double bound = 1.0 / std::sqrt(double(C * K * K));
  for (float v : w) EXPECT_LE(std::abs(v), bound);
}

TEST(BatchNorm2d, TrainingNormalizesWithBatchStatsAndUpdatesRunningStats) {
  const int N = 3, C = 2, H = 2, W = 3;
  nn::BatchNorm2d bn(C, 1e-5, 0.1);
  Tensor x = ops::binary_scalar(ops::BinaryOp::add, randn({N, C, H, W}, 5), 2.0);
  const auto xv = x.to_vector<float>();
  Tensor y = bn.forward(x);
  const auto yv = y.to_vector<float>();
  const int m = N * H * W;
  for (int c = 0; c < C; ++c) {
    double mean = 0, var = 0;
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < H * W; ++k) mean += xv[(n * C + c) * H * W + k];
    mean /= m;
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < H * W; ++k) var += std::pow(xv[(n * C + c) * H * W + k] - mean, 2);
    const double biased = var / m, unbiased = var / (m - 1);
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < H * W; ++k) {
        const int i = (n * C + c) * H * W + k;
        EXPECT_NEAR(yv[i], (xv[i] - mean) / std::sqrt(biased + 1e-5), 1e-4);
      }
    EXPECT_NEAR(bn.running_mean().to_vector<float>()[c], 0.1 * mean, 1e-5);
    EXPECT_NEAR(bn.running_var().to_vector<float>()[c], 0.9 + 0.1 * unbiased, 1e-5);
  }
  EXPECT_EQ(bn.num_batches_tracked(), 1);
  // eval uses the running stats and leaves them alone
  bn.eval();
  const auto rm = bn.running_mean().to_vector<float>(), rv = bn.running_var().to_vector<float>();
  const auto ye = bn.forward(x).to_vector<float>();
  for (int c = 0; c < C; ++c)
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < H * W; ++k) {
        const int i = (n * C + c) * H * W + k;
        EXPECT_NEAR(ye[i], (xv[i] - rm[c]) / std::sqrt(rv[c] + 1e-5), 1e-4);
      }
  EXPECT_EQ(bn.running_mean().to_vector<float>(), rm);
  EXPECT_EQ(bn.num_batches_tracked(), 1);
}

// A Sequential runs a BatchNorm2d, the ReLU after it and a 2x2 stride-2 MaxPool2d after
// that as one op (BatchNormReluMaxPoolBackward), BatchNorm2d + ReLU as one when the pool has
// a forward hook, and each module alone when the ReLU has one; the outputs, gradients and
// running statistics are the same bits every way.
TEST(BatchNorm2d, SequentialFusesTheReluAndPoolAfterItWithTheSameResults) {
  using strata::testing::graph_has;
  Tensor x0 = ops::binary_scalar(ops::BinaryOp::add, randn({4, 3, 5, 6}, 7), 0.5);
  std::vector<std::vector<float>> outs, grads, stats;
  for (const int hooked : {0, 1, 2}) {  // none, the pool, the ReLU
    auto bn = std::make_shared<nn::BatchNorm2d>(3);
    auto relu = std::make_shared<nn::ReLU>();
    auto pool = std::make_shared<nn::MaxPool2d>(2);
    nn::Sequential seq({bn, relu, pool});
    int hook_calls = 0;
    if (hooked) (hooked == 1 ? *pool : static_cast<nn::Module&>(*relu)).register_forward_hooks([&](nn::Module&) { ++hook_calls; }, nullptr);
    Tensor x = ops::clone(x0);
    x.set_requires_grad(true);
    Tensor y = seq(x);
    const std::string what = "hooked " + std::to_string(hooked);
    EXPECT_EQ(graph_has(y, "BatchNormReluMaxPoolBackward"), hooked == 0) << what;
    EXPECT_EQ(graph_has(y, "BatchNormReluBackward"), hooked == 1) << what;
    EXPECT_EQ(graph_has(y, "MaxPool2dBackward"), hooked != 0) << what;
    EXPECT_EQ(graph_has(y, "ReluBackward"), hooked == 2) << what;
    EXPECT_EQ(hook_calls, hooked ? 1 : 0) << what;
    backward(sum(mul(y, y)));
    outs.push_back(y.to_vector<float>());
    grads.push_back(x.grad().to_vector<float>());
    grads.push_back(bn->weight().grad().to_vector<float>());
    grads.push_back(bn->bias().grad().to_vector<float>());
    stats.push_back(bn->running_mean().to_vector<float>());
    stats.push_back(bn->running_var().to_vector<float>());
  }
  for (size_t v = 1; v < 3; ++v) {
    EXPECT_EQ(outs[0], outs[v]) << v;
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(grads[i], grads[3 * v + i]) << "gradient " << i << ", variant " << v;
    EXPECT_EQ(stats[0], stats[2 * v]) << v;
    EXPECT_EQ(stats[1], stats[2 * v + 1]) << v;
  }
}

TEST(LayerNorm, ForwardMatchesNaive) {
  const int R = 6, D = 7;
  nn::LayerNorm ln(D);
  Tensor x = randn({2, 3, D}, 6);
  const auto xv = x.to_vector<float>();
  const auto yv = ln.forward(x).to_vector<float>();
  for (int r = 0; r < R; ++r) {
    double mean = 0, var = 0;
    for (int d = 0; d < D; ++d) mean += xv[r * D + d];
    mean /= D;
    for (int d = 0; d < D; ++d) var += std::pow(xv[r * D + d] - mean, 2);
    var /= D;
    for (int d = 0; d < D; ++d) EXPECT_NEAR(yv[r * D + d], (xv[r * D + d] - mean) / std::sqrt(var + 1e-5), 1e-4);
  }
  EXPECT_EQ(ln.weight().to_vector<float>(), std::vector<float>(D, 1.0f));
  EXPECT_EQ(ln.bias().to_vector<float>(), std::vector<float>(D, 0.0f));
}

TEST(Pooling, MaxAndAvgMatchNaive) {
  const int N = 2, C = 3, H = 4, W = 6;
  Tensor x = randn({N, C, H, W}, 8);
  const auto xv = x.to_vector<float>();
  nn::MaxPool2d mp(2);
  nn::AvgPool2d ap(2);
  const auto my = mp.forward(x), ay = ap.forward(x);
  EXPECT_EQ(my.shape(), (Shape{N, C, H / 2, W / 2}));
  const auto mv = my.to_vector<float>(), av = ay.to_vector<float>();
  for (int p = 0; p < N * C; ++p)
    for (int i = 0; i < H / 2; ++i)
      for (int j = 0; j < W / 2; ++j) {
        float mx = -1e30f;
        double s = 0;
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b) {
            const float v = xv[(p * H + 2 * i + a) * W + 2 * j + b];
            mx = std::max(mx, v);
            s += v;
          }
        EXPECT_EQ(mv[(p * (H / 2) + i) * (W / 2) + j], mx);
        EXPECT_NEAR(av[(p * (H / 2) + i) * (W / 2) + j], s / 4, 1e-6);
      }
}

TEST(Embedding, LooksUpRowsAndInitsWithStd) {
  Generator g(9);
  nn::Embedding emb(50, 40, g, 0.5);
  double sq = 0;
  const auto w = emb.weight().to_vector<float>();
  for (float v : w) sq += double(v) * v;
  EXPECT_NEAR(std::sqrt(sq / w.size()), 0.5, 0.03);
  Tensor idx = ops::from_vector<int64_t>({3, 0, 49, 3}, {2, 2});
  Tensor y = emb.forward(idx);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 40}));
  const auto yv = y.to_vector<float>();
  const int64_t rows[] = {3, 0, 49, 3};
  for (int r = 0; r < 4; ++r)
    for (int d = 0; d < 40; ++d) EXPECT_EQ(yv[r * 40 + d], w[rows[r] * 40 + d]);
}

TEST(Dropout, TrainMasksAndScalesEvalIsIdentity) {
  Generator g(11);
  nn::Dropout drop(0.25, g);
  Tensor x = ops::ones({100, 100});
  const auto y = drop.forward(x).to_vector<float>();
  int zeros = 0;
  for (float v : y) {
    if (v == 0) ++zeros;
    else EXPECT_NEAR(v, 1.0 / 0.75, 1e-6);
  }
  EXPECT_NEAR(zeros / 10000.0, 0.25, 0.03);
  // the next call draws a fresh mask; a same-seeded layer reproduces the sequence
  EXPECT_NE(drop.forward(x).to_vector<float>(), y);
  Generator g2(11);
  nn::Dropout twin(0.25, g2);
  EXPECT_EQ(twin.forward(x).to_vector<float>(), y);
  drop.eval();
  EXPECT_EQ(drop.forward(x).to_vector<float>(), x.to_vector<float>());
}

TEST(Activations, SequentialChainsAndFlattens) {
  nn::Sequential s({std::make_shared<nn::Flatten>(), std::make_shared<nn::ReLU>(), std::make_shared<nn::Tanh>()});
  Tensor x = randn({2, 3, 4}, 12);
  Tensor y = s.forward(x);
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  const auto xv = x.to_vector<float>(), yv = y.to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(yv[i], std::tanh(std::max(xv[i], 0.0f)), 1e-6);
  nn::GELU gt(true);
  const auto gv = gt.forward(x).to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i];
    EXPECT_NEAR(gv[i], 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v))), 1e-5);
  }
  EXPECT_THROW(nn::make_activation("swish"), ConfigError);
}

TEST(CrossEntropyLoss, MatchesNaiveWithIgnoreIndex) {
  const int N = 5, C = 4;
  Tensor logits = randn({N, C}, 13);
  Tensor target = ops::from_vector<int64_t>({0, 3, -100, 1, 3}, {N});
  nn::CrossEntropyLoss ce;
  const double loss = ce(logits, target).item<double>();
  const auto lv = logits.to_vector<float>();
  const int64_t tv[] = {0, 3, -100, 1, 3};
  double s = 0;
  int cnt = 0;
  for (int n = 0; n < N; ++n) {
    if (tv[n] == -100) continue;
    double mx = -1e30, z = 0;
    for (int c = 0; c < C; ++c) mx = std::max(mx, double(lv[n * C + c]));
    for (int c = 0; c < C; ++c) z += std::exp(lv[n * C + c] - mx);
    s += -(lv[n * C + tv[n]] - mx - std::log(z));
    ++cnt;
  }
  EXPECT_NEAR(loss, s / cnt, 1e-5);
  // (B, T, C) logits are flattened
  const double l3 = ce(ops::reshape(logits, {1, N, C}), ops::reshape(target, {1, N})).item<double>();
  EXPECT_NEAR(l3, s / cnt, 1e-5);
  EXPECT_THROW(ce.Module::forward(logits), Error);
}
