// Module tree: naming, state_dict round trip and its all-or-nothing checks, train/eval,
// child and parameter replacement, zero_grad and memory accounting.
#include <gtest/gtest.h>

#include <strata/autograd/engine.h>
#include <strata/nn/activation.h>
#include <strata/nn/cnn.h>
#include <strata/nn/container.h>
#include <strata/nn/gpt.h>
#include <strata/nn/linear.h>
#include <strata/nn/mlp.h>
#include "test_util.h"

using namespace strata;
using strata::testing::expect_close;
using strata::testing::randn;

namespace {

std::vector<std::string> names_of(const nn::NamedTensors& v) {
  std::vector<std::string> out;
  for (auto& [n, t] : v) out.push_back(n);
  return out;
}

std::shared_ptr<nn::Sequential> nested(Generator& g) {
  auto inner = std::make_shared<nn::Sequential>();
  inner->push_back(std::make_shared<nn::Linear>(4, 2, g));
  inner->push_back(std::make_shared<nn::Linear>(2, 2, g, /*bias=*/false));
  return std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::Linear>(3, 4, g), std::make_shared<nn::ReLU>(), inner});
}

std::vector<std::vector<float>> snapshot(const nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (auto& [n, t] : m.state_dict()) out.push_back(t.to_vector<float>());
  return out;
}

}  // namespace

TEST(Module, NamedParametersOfNestedSequential) {
  Generator g(1);
  auto m = nested(g);
  EXPECT_EQ(names_of(m->named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "2.0.weight", "2.0.bias", "2.1.weight"}));
  EXPECT_EQ(m->num_parameters(), 3 * 4 + 4 + 4 * 2 + 2 + 2 * 2);
  std::vector<std::string> mods;
  for (auto& [n, mod] : m->named_modules()) mods.push_back(n + ":" + mod->type_name());
  EXPECT_EQ(mods, (std::vector<std::string>{":Sequential", "0:Linear", "1:ReLU", "2:Sequential", "2.0:Linear",
                                            "2.1:Linear"}));
  for (auto& [n, p] : m->named_parameters()) EXPECT_TRUE(p.requires_grad()) << n;
}

TEST(Module, GptParameterNamesFollowNanoGpt) {
  Generator g(2);
  nn::GPT gpt({.vocab = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 8}, g);
  std::vector<std::string> expect{"wte.weight", "wpe.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    for (const char* s : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                          "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                          "mlp.c_proj.weight", "mlp.c_proj.bias"})
      expect.push_back(h + s);
  }
  expect.push_back("ln_f.weight");
  expect.push_back("ln_f.bias");
  EXPECT_EQ(names_of(gpt.named_parameters()), expect);
  EXPECT_EQ(names_of(gpt.state_dict()), expect);  // tied head is not listed twice
}

TEST(Module, StateDictRoundTripGivesIdenticalOutputs) {
  Generator g1(10), g2(20);
  nn::MLP a({.input = 12, .hidden = {8, 6}, .classes = 3}, g1);
  nn::MLP b({.input = 12, .hidden = {8, 6}, .classes = 3}, g2);
  Tensor x = randn({5, 12}, 3);
  ASSERT_NE(a.forward(x).to_vector<float>(), b.forward(x).to_vector<float>());
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(a.forward(x).to_vector<float>(), b.forward(x).to_vector<float>());
  // loading copies: the two models do not share storage afterwards
  EXPECT_FALSE(a.parameters()[0].shares_storage(b.parameters()[0]));
}

TEST(Module, StateDictIncludesBuffersAndRoundTripsBatchNormStats) {
  Generator g1(1), g2(2);
  nn::CNNConfig cfg{.in_channels = 1, .channels = {4, 6}, .classes = 3, .batch_norm = true, .image_size = 8,
                    .hidden = 10};
  nn::CNN a(cfg, g1), b(cfg, g2);
  Tensor x = randn({4, 1, 8, 8}, 5);
  a.forward(x);  // training step moves the running stats
  auto sd = a.state_dict();
  bool found = false;
  for (auto& [n, t] : sd)
    if (n == "features.1.num_batches_tracked") {
      found = true;
      EXPECT_EQ(t.dtype(), DType::i64);
      EXPECT_EQ(t.item<int64_t>(), 1);
    }
  EXPECT_TRUE(found);
  b.load_state_dict(sd);
  a.eval();
  b.eval();
  EXPECT_EQ(a.forward(x).to_vector<float>(), b.forward(x).to_vector<float>());
}

TEST(Module, LoadStateDictReportsEveryProblemAndLoadsNothing) {
  Generator g1(1), g2(2);
  auto a = nested(g1);
  auto b = nested(g2);
  const auto before = snapshot(*a);
  auto sd = b->state_dict();

  auto expect_error = [&](const nn::NamedTensors& bad, std::vector<std::string> mentions) {
    try {
      a->load_state_dict(bad);
      ADD_FAILURE() << "expected DataError";
    } catch (const DataError& e) {
      const std::string msg = e.what();
      for (auto& s : mentions) EXPECT_NE(msg.find(s), std::string::npos) << "'" << s << "' not in: " << msg;
    }
    EXPECT_EQ(snapshot(*a), before) << "model changed by a failed load";
  };

  auto missing = sd;
  missing.erase(missing.begin() + 2);  // 2.0.weight
  expect_error(missing, {"missing", "2.0.weight"});

  auto unexpected = sd;
  unexpected.emplace_back("3.weight", ops::zeros({2, 2}));
  expect_error(unexpected, {"unexpected", "3.weight"});

  auto wrong_shape = sd;
  wrong_shape[0].second = ops::zeros({4, 4});
  expect_error(wrong_shape, {"0.weight", "(4,4)", "(4,3)"});

  auto all = sd;
  all.erase(all.begin() + 4);  // 2.1.weight missing
  all[1].second = ops::zeros({5});
  all.emplace_back("extra", ops::zeros({1}));
  expect_error(all, {"2.1.weight", "0.bias", "extra"});

  a->load_state_dict(sd);
  EXPECT_EQ(snapshot(*a), snapshot(*b));
}

TEST(Module, TrainEvalPropagates) {
  Generator g(1);
  auto m = nested(g);
  m->eval();
  for (auto& [n, mod] : m->named_modules()) EXPECT_FALSE(mod->is_training()) << n;
  m->train();
  for (auto& [n, mod] : m->named_modules()) EXPECT_TRUE(mod->is_training()) << n;
}

TEST(Module, ReplaceChildTakesEffectInForward) {
  Generator g(1);
  auto m = nested(g);
  Tensor x = randn({3, 3}, 7);
  auto first = m->child("0");
  auto inner_last = m->child("2.1");
  auto new_last = std::make_shared<nn::Linear>(2, 2, g, false);
  m->replace_child("2.1", new_last);
  EXPECT_EQ(m->child("2.1"), new_last);
  // expected: new_last(inner0(relu(first(x))))
  Tensor h = m->child("2.0")->forward(relu(first->forward(x)));
  expect_close(m->forward(x), new_last->forward(h), 1e-6);
  EXPECT_NE(m->forward(x).to_vector<float>(), inner_last->forward(h).to_vector<float>());
  EXPECT_THROW(m->replace_child("2.7", new_last), Error);
  EXPECT_THROW(m->child("nope"), Error);
}

TEST(Module, SetParameterReplacesStorageAndForwardUsesIt) {
  Generator g(1);
  nn::Linear lin(3, 2, g);
  // The new weight is a view into a flat buffer, as ZeRO flattening would make it.
  Tensor flat = ops::zeros({10});
  Tensor w = ops::view(ops::narrow(flat, 0, 2, 6), {2, 3});
  ops::copy_(w, ops::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  lin.set_parameter("weight", w);
  EXPECT_TRUE(lin.weight().shares_storage(flat));
  EXPECT_TRUE(lin.weight().requires_grad());
  Tensor x = ops::from_vector<float>({1, 0, -1}, {1, 3});
  const auto b = lin.bias().to_vector<float>();
  auto y = lin.forward(x).to_vector<float>();
  EXPECT_NEAR(y[0], 1 - 3 + b[0], 1e-6);
  EXPECT_NEAR(y[1], 4 - 6 + b[1], 1e-6);
  backward(sum(lin.forward(x)));
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{1, 0, -1, 1, 0, -1}));
  // nested path, through the model
  Generator g2(3);
  auto m = nested(g2);
  m->set_parameter("2.0.bias", ops::full({2}, 100.0));
  EXPECT_EQ(m->parameter("2.0.bias").to_vector<float>(), (std::vector<float>{100, 100}));
  EXPECT_TRUE(m->parameter("2.0.bias").requires_grad());
  EXPECT_THROW(m->set_parameter("2.0.nope", ops::zeros({2})), Error);
}

TEST(Module, ZeroGradDropsGrads) {
  Generator g(1);
  auto m = nested(g);
  backward(sum(m->forward(randn({4, 3}, 2))));
  for (auto& p : m->parameters()) EXPECT_TRUE(p.grad().defined());
  m->zero_grad();
  for (auto& p : m->parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(Module, ParametersAreChargedToParamsCategory) {
  const int64_t before = cpu_memory().stats(MemCategory::params).current;
  {
    Generator g(1);
    nn::MLP m({.input = 20, .hidden = {16}, .classes = 4}, g);
    EXPECT_EQ(cpu_memory().stats(MemCategory::params).current - before, m.num_parameters() * 4);
  }
  EXPECT_EQ(cpu_memory().stats(MemCategory::params).current, before);
}

namespace strata {
namespace {

// Module::to(Device): moving to the device it is on changes nothing; moving to cuda:0
// either works (a GPU is visible: the values survive the round trip) or fails with an
// error naming CUDA, leaving the module usable on the CPU.
TEST(Module, ToDeviceMovesParametersAndBuffersOrSaysWhyNot) {
  Generator g(3);
  auto m = std::make_shared<nn::CNN>(nn::CNNConfig{.in_channels = 1, .channels = {2}, .classes = 3, .batch_norm = true,
                                                   .dropout = 0.0, .image_size = 4, .hidden = 4},
                                     g);
  const nn::NamedTensors before = m->state_dict();
  std::vector<std::vector<double>> values;
  for (const auto& [n, t] : before) values.push_back(t.to_vector<double>());
  m->to(kCPU);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(m->state_dict()[i].second.shares_storage(before[i].second));
  const Device gpu{DeviceType::CUDA, 0};
  try {
    m->to(gpu);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
    for (const auto& [n, t] : m->state_dict()) EXPECT_TRUE(t.device().is_cpu()) << n;
    return;
  }
  for (const auto& [n, t] : m->named_parameters()) {
    EXPECT_EQ(t.device(), gpu) << n;
    EXPECT_TRUE(t.requires_grad()) << n;
  }
  m->to(kCPU);
  const nn::NamedTensors after = m->state_dict();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].second.to_vector<double>(), values[i]) << after[i].first;
}

}  // namespace
}  // namespace strata
