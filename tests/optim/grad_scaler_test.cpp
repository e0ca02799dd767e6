// GradScaler against PyTorch's GradScaler rules: overflowing steps are skipped and the
// parameter named in the log, the scale backs off and grows on schedule, unscaling is
// exact, and fp16-style training (activations and their gradients rounded to f16) with
// loss scaling matches f32 training where the unscaled run's gradients underflow to zero.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>
#include <sstream>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/lambda_node.h>
#include <strata/optim/grad_scaler.h>
#include <strata/optim/sgd.h>
#include <strata/tensor/ops.h>
#include "tests/test_tensors.h"

using namespace strata;
using optim::GradScaler;
using optim::GradScalerOptions;
using optim::NamedTensors;

namespace {

using strata::testing::leaf;

void set_grad(Tensor& p, const std::vector<float>& g) { p.set_grad(ops::from_vector<float>(g, p.shape())); }

// Captures what spdlog's default logger prints while alive.
class LogCapture {
 public:
  LogCapture() : prev_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  }
  ~LogCapture() { spdlog::set_default_logger(prev_); }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> prev_;
};

struct TwoParams {
  Tensor w = leaf({1.0f, -2.0f, 0.5f, 3.0f}, {2, 2});
  Tensor b = leaf({0.25f, -0.75f}, {2});
  NamedTensors named() { return {{"fc1.weight", w}, {"fc2.bias", b}}; }
};

TEST(GradScaler, OverflowSkipsTheStepAndNamesTheParameter) {
  TwoParams m;
  optim::SGD opt(m.named(), {.lr = 0.1});
  GradScaler scaler;
  const float inf = std::numeric_limits<float>::infinity();
  set_grad(m.w, {65536.0f, 0.0f, -65536.0f, 32768.0f});
  set_grad(m.b, {1.0f, inf});
  const std::vector<float> w0 = m.w.to_vector<float>(), b0 = m.b.to_vector<float>();
  LogCapture log;
  EXPECT_FALSE(scaler.step(opt));
  EXPECT_EQ(m.w.to_vector<float>(), w0);  // untouched, bit for bit
  EXPECT_EQ(m.b.to_vector<float>(), b0);
  EXPECT_EQ(opt.step_count(), 0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  const auto bad = scaler.non_finite(opt);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].name, "fc2.bias");
  EXPECT_FALSE(bad[0].nan);
  const std::string text = log.text();
  EXPECT_NE(text.find("'fc2.bias' (inf)"), std::string::npos) << text;
  EXPECT_EQ(text.find("fc1.weight"), std::string::npos) << text;
  EXPECT_NE(text.find("loss scale 65536"), std::string::npos) << text;
  EXPECT_NE(text.find("32768"), std::string::npos) << text;
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);

  // A NaN in the other parameter: named with its kind; the finite one is not.
  set_grad(m.w, {std::nanf(""), 0.0f, 0.0f, 0.0f});
  set_grad(m.b, {1.0f, 2.0f});
  EXPECT_FALSE(scaler.step(opt));
  ASSERT_EQ(scaler.non_finite(opt).size(), 1u);
  EXPECT_EQ(scaler.non_finite(opt)[0].name, "fc1.weight");
  EXPECT_TRUE(scaler.non_finite(opt)[0].nan);
  EXPECT_NE(log.text().find("'fc1.weight' (nan)"), std::string::npos) << log.text();
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 16384.0);

  // Finite gradients: the step runs with the true (unscaled) gradients.
  set_grad(m.w, {16384.0f, -16384.0f, 0.0f, 8192.0f});
  set_grad(m.b, {-4096.0f, 0.0f});
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  const std::vector<double> want_w = {w0[0] - 0.1, w0[1] + 0.1, w0[2], w0[3] - 0.05};
  const std::vector<double> want_b = {b0[0] + 0.025, b0[1]};
  for (size_t i = 0; i < want_w.size(); ++i) EXPECT_NEAR(m.w.to_vector<float>()[i], want_w[i], 1e-6) << i;
  for (size_t i = 0; i < want_b.size(); ++i) EXPECT_NEAR(m.b.to_vector<float>()[i], want_b[i], 1e-6) << i;
  EXPECT_EQ(opt.step_count(), 1);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(GradScaler, HugeFiniteF64GradientsAreNotOverflow) {
  Tensor p = ops::from_vector<double>({1.0, 2.0}, {2});
  p.set_requires_grad(true);
  optim::SGD opt({{"p", p}}, {.lr = 0.0});
  GradScaler scaler(GradScalerOptions{.init_scale = 1.0});
  p.set_grad(ops::from_vector<double>({1e200, -1e200}, {2}));  // sum of squares overflows f64
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_TRUE(scaler.non_finite(opt).empty());
}

// The schedule as PyTorch's _amp_update_scale_ computes it, step by step.
TEST(GradScaler, ScaleBacksOffAndGrowsOnSchedule) {
  TwoParams m;
  optim::SGD opt(m.named(), {.lr = 0.0});
  GradScalerOptions o{.init_scale = 1024.0, .growth_factor = 4.0, .backoff_factor = 0.25, .growth_interval = 3};
  GradScaler scaler(o);
  // overflow pattern per iteration
  const std::vector<bool> overflow = {false, false, false, false, true, false, false, false, false, false, false, true};
  double want = o.init_scale;
  int64_t tracker = 0;
  for (size_t it = 0; it < overflow.size(); ++it) {
    set_grad(m.w, {1.0f, 2.0f, 3.0f, overflow[it] ? std::numeric_limits<float>::infinity() : 4.0f});
    set_grad(m.b, {0.0f, 0.0f});
    EXPECT_EQ(scaler.step(opt), !overflow[it]) << "iteration " << it;
    scaler.update();
    if (overflow[it]) {
      want *= o.backoff_factor;
      tracker = 0;
    } else if (++tracker == o.growth_interval) {
      want *= o.growth_factor;
      tracker = 0;
    }
    EXPECT_EQ(scaler.get_scale(), want) << "iteration " << it;
    EXPECT_EQ(scaler.growth_tracker(), tracker) << "iteration " << it;
  }
  EXPECT_EQ(scaler.skipped_steps(), 2);
  EXPECT_EQ(opt.step_count(), int64_t(overflow.size()) - 2);
  // 1024 *4 (it 2) = 4096; backoff at 4 -> 1024; growth at 7 and 10 -> 16384; backoff at 11 -> 4096.
  EXPECT_EQ(scaler.get_scale(), 4096.0);

  // Defaults are PyTorch's.
  GradScaler d;
  EXPECT_EQ(d.get_scale(), 65536.0);
  EXPECT_EQ(d.options().growth_interval, 2000);
  EXPECT_EQ(d.options().growth_factor, 2.0);
  EXPECT_EQ(d.options().backoff_factor, 0.5);
}

TEST(GradScaler, UnscaleBeforeClippingAndCallOrderChecks) {
  TwoParams m;
  optim::SGD opt(m.named(), {.lr = 1.0});
  GradScaler scaler(GradScalerOptions{.init_scale = 8.0});
  EXPECT_THROW(scaler.update(), Error);  // nothing recorded yet
  set_grad(m.w, {8.0f, -16.0f, 4.0f, 0.0f});
  set_grad(m.b, {2.0f, 1.0f});
  scaler.unscale_(opt);
  EXPECT_EQ(m.w.grad().to_vector<float>(), (std::vector<float>{1.0f, -2.0f, 0.5f, 0.0f}));
  EXPECT_EQ(m.b.grad().to_vector<float>(), (std::vector<float>{0.25f, 0.125f}));
  EXPECT_THROW(scaler.unscale_(opt), Error);  // twice before update()
  const std::vector<float> w0 = m.w.to_vector<float>();
  EXPECT_TRUE(scaler.step(opt));  // does not unscale a second time
  EXPECT_FLOAT_EQ(m.w.to_vector<float>()[1], w0[1] + 2.0f);
  EXPECT_THROW(scaler.step(opt), Error);      // twice before update()
  EXPECT_THROW(scaler.unscale_(opt), Error);  // after step()
  scaler.update();

  // step() with no gradient at all is a mistake worth naming.
  opt.zero_grad();
  EXPECT_THROW(scaler.step(opt), Error);

  // Validation names the key.
  try {
    GradScaler bad(GradScalerOptions{.backoff_factor = 1.5});
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("grad_scaler.backoff_factor"), std::string::npos) << e.what();
  }
}

TEST(GradScaler, HalfPrecisionGradients) {
  // f16 .grad tensors: unscaled through f32 and rounded back; an f16 inf is caught.
  Tensor p = leaf({1.0f, 1.0f, 1.0f}, {3});
  optim::SGD opt({{"h", p}}, {.lr = 0.0});
  GradScaler scaler(GradScalerOptions{.init_scale = 1024.0});
  const std::vector<float> scaled = {1024.0f * 3.0e-5f, -1024.0f * 0.5f, 1024.0f * 60000.0f};  // last overflows f16
  Tensor g16 = ops::to_dtype(ops::from_vector<float>(scaled, {3}), DType::f16);
  p.set_grad(g16);
  EXPECT_FALSE(scaler.step(opt));
  ASSERT_EQ(scaler.non_finite(opt).size(), 1u);
  EXPECT_EQ(scaler.non_finite(opt)[0].name, "h");
  scaler.update();

  Tensor ok = ops::to_dtype(ops::from_vector<float>({1024.0f * 3.0e-5f, -512.0f, 2048.0f}, {3}), DType::f16);
  const std::vector<float> in = ops::to_dtype(ok, DType::f32).to_vector<float>();
  p.set_grad(ok);
  scaler.unscale_(opt);  // scale 512 now: values / 512, in place
  ASSERT_EQ(p.grad().dtype(), DType::f16);
  const std::vector<float> got = ops::to_dtype(p.grad(), DType::f32).to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) {
    const float want = half_to_float(float_to_half(in[i] / 512.0f));
    EXPECT_EQ(got[i], want) << i;
  }
}

TEST(GradScaler, StateDictRoundTripAndChecks) {
  TwoParams m;
  optim::SGD opt(m.named(), {.lr = 0.0});
  GradScaler a(GradScalerOptions{.init_scale = 256.0, .growth_interval = 5});
  for (int i = 0; i < 3; ++i) {
    set_grad(m.w, {1, 1, 1, 1});
    set_grad(m.b, {1, 1});
    a.step(opt);
    a.update();
  }
  const nlohmann::json st = a.state_dict();
  EXPECT_EQ(st.at("scale").get<double>(), 256.0);
  EXPECT_EQ(st.at("_growth_tracker").get<int64_t>(), 3);
  EXPECT_EQ(st.at("growth_interval").get<int64_t>(), 5);

  GradScaler b;
  b.load_state_dict(st);
  EXPECT_EQ(b.get_scale(), 256.0);
  EXPECT_EQ(b.growth_tracker(), 3);
  EXPECT_EQ(b.options().growth_interval, 5);
  // Two more clean steps grow both the same way.
  for (GradScaler* s : {&a, &b})
    for (int i = 0; i < 2; ++i) {
      set_grad(m.w, {1, 1, 1, 1});
      set_grad(m.b, {1, 1});
      s->step(opt);
      s->update();
    }
  EXPECT_EQ(a.get_scale(), 512.0);
  EXPECT_EQ(b.get_scale(), 512.0);

  nlohmann::json missing = st;
  missing.erase("backoff_factor");
  try {
    b.load_state_dict(missing);
    ADD_FAILURE() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("'backoff_factor' is missing"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b.get_scale(), 512.0);  // unchanged by the failed load
  EXPECT_THROW(b.load_state_dict(nlohmann::json::object()), DataError);

  GradScaler off(GradScalerOptions{.enabled = false});
  EXPECT_TRUE(off.state_dict().empty());
  EXPECT_EQ(off.get_scale(), 1.0);
}

TEST(GradScaler, DisabledIsAPassThrough) {
  TwoParams m;
  optim::SGD opt(m.named(), {.lr = 1.0});
  GradScaler off(GradScalerOptions{.enabled = false});
  Tensor loss = ops::full({}, 3.0);
  EXPECT_EQ(off.scale(loss).impl(), loss.impl());
  set_grad(m.w, {1, 1, 1, 1});
  set_grad(m.b, {std::numeric_limits<float>::infinity(), 0});
  EXPECT_TRUE(off.step(opt));  // no checks: the optimizer steps
  off.update();
  EXPECT_EQ(opt.step_count(), 1);
}

// ---------------------------------------------------------------- fp16-style training

// Identity whose forward and backward round through f16, as an autocast region does with
// its activations and their gradients.
Tensor f16_round_trip(const Tensor& x) {
  Tensor y = ops::to_dtype(ops::to_dtype(x, DType::f16), DType::f32);
  return record_fn("F16RoundTrip", y, {x}, [](const Tensor& g) {
    return std::vector<Tensor>{ops::to_dtype(ops::to_dtype(g, DType::f16), DType::f32)};
  });
}

// A 2-layer MLP on a fixed batch whose loss carries a tiny weight, so its activation
// gradients (~1e-9) are below f16's smallest subnormal (6e-8) and round to zero; the
// learning rate undoes the weight, so the f32 run trains like plain MSE with lr 0.1.
constexpr double kLossWeight = 1e-8;
constexpr double kLr = 0.1 / kLossWeight;

struct Mlp {
  Tensor w1, b1, w2;
  Tensor x, y;
  explicit Mlp(uint64_t seed) {
    Generator g(seed);
    w1 = ops::normal({8, 16}, 0.0, 0.4, g).set_requires_grad(true);
    b1 = ops::zeros({16}).set_requires_grad(true);
    w2 = ops::normal({16, 1}, 0.0, 0.3, g).set_requires_grad(true);
    x = ops::normal({32, 8}, 0.0, 1.0, g);
    y = ops::normal({32, 1}, 0.0, 1.0, g);
  }
  NamedTensors named() { return {{"w1", w1}, {"b1", b1}, {"w2", w2}}; }
  Tensor loss(bool fp16) {
    auto rt = [&](const Tensor& t) { return fp16 ? f16_round_trip(t) : t; };
    Tensor h = rt(tanh(matmul(x, w1) + b1));
    Tensor out = rt(matmul(h, w2));
    Tensor d = out - y;
    return mean(d * d) * kLossWeight;
  }
};

struct RunResult {
  std::vector<double> losses;
  std::vector<float> w1, w2;
  int64_t skipped = 0;
};

// steps iterations of SGD; scaler may be null (no loss scaling).
RunResult train(int steps, bool fp16, GradScaler* scaler) {
  Mlp m(7);
  optim::SGD opt(m.named(), {.lr = kLr});
  RunResult r;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss = m.loss(fp16);
    r.losses.push_back(loss.item<double>());
    if (scaler) {
      backward(scaler->scale(loss));
      scaler->step(opt);
      scaler->update();
    } else {
      backward(loss);
      opt.step();
    }
  }
  r.w1 = m.w1.to_vector<float>();
  r.w2 = m.w2.to_vector<float>();
  r.skipped = scaler ? scaler->skipped_steps() : 0;
  return r;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, double(std::abs(b[i])));
    d = std::max(d, double(std::abs(a[i] - b[i])));
  }
  return d / scale;
}

TEST(GradScaler, ScaledFp16StyleTrainingMatchesF32Training) {
  constexpr int kSteps = 60;
  const RunResult ref = train(kSteps, /*fp16=*/false, nullptr);
  const RunResult plain16 = train(kSteps, /*fp16=*/true, nullptr);
  // 2^24 puts the scaled gradients (~1e-2) in f16's normal range; no overflow, no growth.
  GradScaler scaler(GradScalerOptions{.init_scale = std::ldexp(1.0, 24)});
  const RunResult scaled16 = train(kSteps, /*fp16=*/true, &scaler);

  ASSERT_LT(ref.losses.back(), 0.6 * ref.losses.front()) << "the f32 reference should learn";
  EXPECT_EQ(scaled16.skipped, 0);
  // With the loss scaled, only f16 rounding separates the runs (measured: parameters
  // 5e-5 and final loss 3e-4 apart, relative).
  EXPECT_LT(max_rel_diff(scaled16.w1, ref.w1), 1e-3);
  EXPECT_LT(max_rel_diff(scaled16.w2, ref.w2), 1e-3);
  EXPECT_NEAR(scaled16.losses.back(), ref.losses.back(), 2e-3 * ref.losses.back());
  // Unscaled, every gradient underflows in f16: nothing moves, and the run ends far
  // from the reference.
  const Mlp init(7);
  EXPECT_EQ(plain16.w1, init.w1.to_vector<float>());
  EXPECT_EQ(plain16.w2, init.w2.to_vector<float>());
  EXPECT_GT(std::abs(plain16.losses.back() - ref.losses.back()), 10 * std::abs(scaled16.losses.back() - ref.losses.back()));
}

TEST(GradScaler, TooLargeInitialScaleBacksOffThenTrainsLikeTheReference) {
  // 2^52 overflows f16 in backward: steps are skipped (parameters and optimizer state
  // untouched) while the scale halves, so k skipped steps + (n - k) real ones equal a
  // plain run of n - k steps on the same fixed batch.
  constexpr int kSteps = 40;
  GradScaler scaler(GradScalerOptions{.init_scale = std::ldexp(1.0, 52)});
  LogCapture log;
  const RunResult scaled16 = train(kSteps, /*fp16=*/true, &scaler);
  ASSERT_GT(scaled16.skipped, 0);
  ASSERT_LT(scaled16.skipped, 20);
  EXPECT_EQ(scaler.get_scale(), std::ldexp(1.0, 52 - int(scaled16.skipped)));  // growth_interval not reached
  const RunResult ref = train(kSteps - int(scaled16.skipped), /*fp16=*/false, nullptr);
  EXPECT_LT(max_rel_diff(scaled16.w1, ref.w1), 1e-3);
  EXPECT_LT(max_rel_diff(scaled16.w2, ref.w2), 1e-3);
  // Every skip was logged, naming a parameter whose gradient overflowed.
  const std::string text = log.text();
  size_t n = 0;
  for (size_t pos = text.find("skipped SGD step"); pos != std::string::npos; pos = text.find("skipped SGD step", pos + 1))
    ++n;
  EXPECT_EQ(int64_t(n), scaled16.skipped) << text;
  EXPECT_NE(text.find("'w2' ("), std::string::npos) << text;
}

}  // namespace
