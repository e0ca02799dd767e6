// Optimizers against the torch.optim update formulas written out in double, state_dict
// round trips and their all-or-nothing checks, zero_grad and skipped parameters.
#include <gtest/gtest.h>

#include <cmath>

#include <strata/optim/adam.h>
#include <strata/optim/sgd.h>
#include <strata/tensor/ops.h>
#include "tests/test_tensors.h"

using namespace strata;
using optim::NamedTensors;

namespace {

using strata::testing::leaf;

// Three fixed gradients for a 4-element parameter.
const std::vector<std::vector<double>> kGrads = {{0.5, -1.0, 2.0, 0.0}, {0.1, 0.3, -0.7, 1.5}, {-0.4, 0.2, 0.9, -2.0}};
const std::vector<double> kInit = {1.0, -2.0, 0.5, 3.0};

std::vector<float> to_f(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

void set_grad(Tensor& p, const std::vector<double>& g) { p.set_grad(ops::from_vector<float>(to_f(g), p.shape())); }

void expect_vec_near(const std::vector<float>& a, const std::vector<double>& b, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol * (1 + std::abs(b[i]))) << what << " [" << i << "]";
}

struct SgdRef {
  double lr, mom, damp, wd;
  bool nesterov;
  std::vector<double> p, buf;
  bool first = true;
  void step(const std::vector<double>& g) {
    for (size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + wd * p[i];
      if (mom != 0) {
        buf[i] = first ? d : mom * buf[i] + (1 - damp) * d;
        d = nesterov ? d + mom * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
    first = false;
  }
};

struct AdamRef {
  double lr, b1, b2, eps, wd;
  bool decoupled;
  std::vector<double> p, m, v;
  int t = 0;
  void step(const std::vector<double>& g0) {
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = g0[i];
      if (decoupled) p[i] *= 1 - lr * wd;
      else g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
    }
  }
};

}  // namespace

TEST(SGD, MomentumNesterovWeightDecayMatchFormula) {
  for (bool nesterov : {true, false}) {
    Tensor p = leaf(to_f(kInit), {4});
    const double damp = nesterov ? 0.0 : 0.3;
    optim::SGD opt({{"p", p}}, {.lr = 0.1, .momentum = 0.9, .dampening = damp, .weight_decay = 0.05, .nesterov = nesterov});
    SgdRef ref{0.1, 0.9, damp, 0.05, nesterov, kInit, std::vector<double>(4, 0.0)};
    for (const auto& g : kGrads) {
      set_grad(p, g);
      opt.step();
      ref.step(g);
      expect_vec_near(p.to_vector<float>(), ref.p, 1e-6, nesterov ? "nesterov" : "dampening");
    }
    EXPECT_EQ(opt.step_count(), 3);
  }
}

TEST(SGD, PlainStepIsLrTimesGrad) {
  Tensor p = leaf(to_f(kInit), {4});
  optim::SGD opt({{"p", p}}, {.lr = 0.5});
  set_grad(p, kGrads[0]);
  opt.step();
  std::vector<double> expect(4);
  for (int i = 0; i < 4; ++i) expect[i] = kInit[i] - 0.5 * kGrads[0][i];
  expect_vec_near(p.to_vector<float>(), expect, 1e-7, "sgd");
  EXPECT_TRUE(opt.state_dict().tensors.empty());
  EXPECT_THROW((optim::SGD({{"p", p}}, {.lr = 0.1, .momentum = 0.0, .nesterov = true})), Error);
}

TEST(Adam, AdamAndAdamWMatchFormula) {
  for (bool decoupled : {false, true}) {
    Tensor p = leaf(to_f(kInit), {4});
    std::unique_ptr<optim::Optimizer> opt;
    if (decoupled) opt = std::make_unique<optim::AdamW>(NamedTensors{{"p", p}}, optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
    else opt = std::make_unique<optim::Adam>(NamedTensors{{"p", p}}, optim::AdamOptions{.lr = 0.01, .beta1 = 0.8, .weight_decay = 0.1});
    AdamRef ref{0.01, decoupled ? 0.9 : 0.8, 0.999, 1e-8, 0.1, decoupled, kInit, std::vector<double>(4), std::vector<double>(4)};
    for (const auto& g : kGrads) {
      set_grad(p, g);
      opt->step();
      ref.step(g);
      expect_vec_near(p.to_vector<float>(), ref.p, 1e-6, opt->type_name());
    }
    auto st = opt->state_dict();
    ASSERT_EQ(st.tensors.size(), 2u);
    EXPECT_EQ(st.tensors[0].first, "exp_avg.p");
    EXPECT_EQ(st.tensors[1].first, "exp_avg_sq.p");
    expect_vec_near(st.tensors[0].second.to_vector<float>(), ref.m, 1e-6, "exp_avg");
    expect_vec_near(st.tensors[1].second.to_vector<float>(), ref.v, 1e-6, "exp_avg_sq");
  }
  optim::AdamW w({}, {});
  EXPECT_EQ(w.options().weight_decay, 0.01);
}

TEST(Adam, SkipsParamsWithoutGradAndCountsStepsPerParam) {
  Tensor a = leaf(to_f(kInit), {4}), b = leaf(to_f(kInit), {4});
  optim::Adam opt({{"a", a}, {"b", b}}, {.lr = 0.1});
  set_grad(a, kGrads[0]);
  opt.step();
  EXPECT_EQ(b.to_vector<float>(), to_f(kInit));  // no grad: untouched, no state
  EXPECT_EQ(opt.state_dict().tensors.size(), 2u);
  set_grad(a, kGrads[1]);
  set_grad(b, kGrads[1]);
  opt.step();
  // b's first update uses bias correction for t = 1, like torch's per-parameter state['step']
  AdamRef ref{0.1, 0.9, 0.999, 1e-8, 0, false, kInit, std::vector<double>(4), std::vector<double>(4)};
  ref.step(kGrads[1]);
  expect_vec_near(b.to_vector<float>(), ref.p, 1e-6, "b");
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
}

TEST(Adam, StateIsChargedToOptimizerCategory) {
  Tensor p = leaf(std::vector<float>(1000, 1.0f), {1000});
  const int64_t before = cpu_memory().stats(MemCategory::optimizer).current;
  optim::Adam opt({{"p", p}}, {});
  p.set_grad(ops::ones({1000}));
  opt.step();
  EXPECT_EQ(cpu_memory().stats(MemCategory::optimizer).current - before, 2 * 1000 * 4);
}

TEST(OptimizerState, RoundTripContinuesIdentically) {
  auto make = [] { return NamedTensors{{"a", leaf(to_f(kInit), {4})}, {"b", leaf({1, 2, 3, 4, 5, 6}, {2, 3})}}; };
  auto grads = [](NamedTensors& ps, int s) {
    set_grad(ps[0].second, kGrads[size_t(s) % 3]);
    std::vector<float> gb(6);
    for (int i = 0; i < 6; ++i) gb[size_t(i)] = float(std::sin(1.0 + s * 6 + i));
    ps[1].second.set_grad(ops::from_vector<float>(gb, {2, 3}));
  };
  for (int kind = 0; kind < 2; ++kind) {
    NamedTensors p1 = make();
    std::unique_ptr<optim::Optimizer> o1, o2;
    auto build = [&](NamedTensors ps, double lr) -> std::unique_ptr<optim::Optimizer> {
      if (kind == 0) return std::make_unique<optim::AdamW>(ps, optim::AdamWOptions{.lr = lr});
      return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = lr, .momentum = 0.9, .nesterov = true});
    };
    o1 = build(p1, 0.05);
    for (int s = 0; s < 2; ++s) {
      grads(p1, s);
      o1->step();
    }
    auto st = o1->state_dict();
    NamedTensors p2 = make();
    for (size_t i = 0; i < p2.size(); ++i) ops::copy_(p2[i].second, p1[i].second);
    o2 = build(p2, 123.0);
    o2->load_state_dict(st);
    EXPECT_EQ(o2->lr(), 0.05);
    EXPECT_EQ(o2->step_count(), 2);
    for (int s = 2; s < 5; ++s) {
      grads(p1, s);
      grads(p2, s);
      o1->step();
      o2->step();
      for (size_t i = 0; i < p1.size(); ++i)
        EXPECT_EQ(p1[i].second.to_vector<float>(), p2[i].second.to_vector<float>()) << o1->type_name() << " step " << s;
    }
  }
}

TEST(OptimizerState, BadStateIsRejectedWholeAndNamesTensors) {
  auto make = [] { return NamedTensors{{"a", leaf(to_f(kInit), {4})}, {"b", leaf({1, 2, 3, 4, 5, 6}, {2, 3})}}; };
  NamedTensors p1 = make(), p2 = make(), p3 = make();
  optim::Adam o1(p1, {.lr = 0.1}), o2(p2, {.lr = 0.1}), ref(p3, {.lr = 0.1});
  for (auto* ps : {&p1, &p2, &p3}) {
    set_grad((*ps)[0].second, kGrads[0]);
    (*ps)[1].second.set_grad(ops::ones({2, 3}));
  }
  o1.step();
  o1.step();
  o2.step();
  ref.step();
  auto good = o1.state_dict();
  auto bad = good;
  bad.tensors[0].second = ops::zeros({5});                 // exp_avg.a wrong shape
  bad.tensors.erase(bad.tensors.begin() + 3);             // exp_avg_sq.b missing
  bad.tensors.emplace_back("exp_avg.zzz", ops::zeros({4}));  // unknown parameter
  try {
    o2.load_state_dict(bad);
    ADD_FAILURE() << "expected DataError";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    for (const char* s : {"exp_avg.a", "exp_avg_sq.b", "exp_avg.zzz"}) EXPECT_NE(msg.find(s), std::string::npos) << msg;
  }
  optim::SGD sgd(make(), {});
  EXPECT_THROW(o2.load_state_dict(sgd.state_dict()), DataError);
  // o2 is untouched: it continues exactly like ref
  EXPECT_EQ(o2.step_count(), 1);
  o2.step();
  ref.step();
  for (size_t i = 0; i < p2.size(); ++i) EXPECT_EQ(p2[i].second.to_vector<float>(), p3[i].second.to_vector<float>());
}
