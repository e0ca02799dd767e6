// LR schedules at their key steps and grad-norm clipping against a hand-computed norm.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include <strata/optim/clip.h>
#include <strata/optim/lr_schedule.h>
#include <strata/tensor/ops.h>

using namespace strata;

TEST(LrSchedule, ConstantAndStep) {
  auto c = optim::make_schedule({.kind = "constant", .base_lr = 0.3});
  EXPECT_EQ(c.lr_at(0), 0.3);
  EXPECT_EQ(c.lr_at(100000), 0.3);
  auto s = optim::make_schedule({.kind = "step", .base_lr = 1.0, .step_size = 10, .gamma = 0.5});
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.5);
  EXPECT_DOUBLE_EQ(s.lr_at(29), 0.25);
  EXPECT_DOUBLE_EQ(s.lr_at(30), 0.125);
}

TEST(LrSchedule, CosineWithWarmup) {
  const double base = 6e-4, mn = 6e-5;
  auto s = optim::make_schedule(
      {.kind = "cosine", .base_lr = base, .warmup_steps = 10, .total_steps = 110, .min_lr = mn});
  EXPECT_DOUBLE_EQ(s.lr_at(0), base / 10);  // warmup start
  EXPECT_DOUBLE_EQ(s.lr_at(4), base * 5 / 10);
  EXPECT_DOUBLE_EQ(s.lr_at(9), base);       // warmup end
  EXPECT_DOUBLE_EQ(s.lr_at(10), base);      // cosine start
  EXPECT_NEAR(s.lr_at(60), (base + mn) / 2, 1e-15);  // half way
  EXPECT_NEAR(s.lr_at(35), mn + (base - mn) * 0.5 * (1 + std::cos(std::numbers::pi * 0.25)), 1e-15);
  EXPECT_DOUBLE_EQ(s.lr_at(110), mn);  // cosine end
  EXPECT_DOUBLE_EQ(s.lr_at(500), mn);
  for (int64_t t = 10; t < 110; ++t) EXPECT_GE(s.lr_at(t), s.lr_at(t + 1));  // monotone decay
  auto nw = optim::make_schedule({.kind = "cosine", .base_lr = 1.0, .warmup_steps = 0, .total_steps = 4});
  EXPECT_DOUBLE_EQ(nw.lr_at(0), 1.0);
  EXPECT_NEAR(nw.lr_at(2), 0.5, 1e-15);
}

TEST(LrSchedule, BadOptionsNameTheField) {
  auto expect_field = [](const optim::ScheduleOptions& o, const std::string& field) {
    try {
      optim::make_schedule(o);
      ADD_FAILURE() << "expected ConfigError for " << field;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  expect_field({.kind = "linear"}, "schedule.kind");
  expect_field({.kind = "step", .step_size = 0}, "schedule.step_size");
  expect_field({.kind = "cosine", .warmup_steps = 10, .total_steps = 10}, "schedule.total_steps");
  expect_field({.kind = "cosine", .base_lr = 0.1, .min_lr = 0.2}, "schedule.min_lr");
}

namespace {
Tensor param_with_grad(const std::vector<float>& g, const Shape& s) {
  Tensor p = ops::zeros(s);
  p.set_requires_grad(true);
  p.set_grad(ops::from_vector<float>(g, s));
  return p;
}
}  // namespace

TEST(Clip, ClipsToMaxNormAndReturnsPreClipNorm) {
  Tensor a = param_with_grad({3, 4}, {2}), b = param_with_grad({1, 2, 2, 0}, {2, 2});
  Tensor no_grad = ops::zeros({3});
  no_grad.set_requires_grad(true);
  const std::vector<Tensor> ps{a, b, no_grad};
  // |(3,4)|^2 + |(1,2,2,0)|^2 = 25 + 9 = 34
  EXPECT_DOUBLE_EQ(optim::grad_norm_sq(ps), 34.0);
  const double total = optim::clip_grad_norm(ps, 1.0);
  EXPECT_DOUBLE_EQ(total, std::sqrt(34.0));
  const double f = 1.0 / (std::sqrt(34.0) + 1e-6);
  const auto ga = a.grad().to_vector<float>(), gb = b.grad().to_vector<float>();
  EXPECT_NEAR(ga[0], 3 * f, 1e-7);
  EXPECT_NEAR(ga[1], 4 * f, 1e-7);
  EXPECT_NEAR(gb[1], 2 * f, 1e-7);
  EXPECT_NEAR(std::sqrt(optim::grad_norm_sq(ps)), 1.0, 1e-6);
  EXPECT_FALSE(no_grad.grad().defined());
}

TEST(Clip, BelowMaxNormLeavesGradsAlone) {
  Tensor a = param_with_grad({0.3f, -0.4f}, {2});
  EXPECT_NEAR(optim::clip_grad_norm({a}, 1.0), 0.5, 1e-7);
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{0.3f, -0.4f}));
  optim::scale_grads({a}, 2.0);
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{0.6f, -0.8f}));
  EXPECT_EQ(optim::clip_factor(0.5, 1.0), 1.0);
}
