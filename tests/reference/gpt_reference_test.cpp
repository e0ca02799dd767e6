// strata's GPT forward and backward against PyTorch: tools/make_reference.py wrote a
// small GPT's weights, a batch, the loss and every parameter gradient (computed in
// f64 from the same f32 weights). Our f32 loss and gradients must match at rtol 1e-4.
#include <gtest/gtest.h>

#include <cmath>

#include <strata/autograd/engine.h>
#include <strata/nn/gpt.h>
#include <strata/tensor/safetensors.h>

using namespace strata;

namespace {
struct Fixture {
  NamedTensors params;
  std::map<std::string, Tensor> rest;
  SafetensorsMetadata meta;
};

Fixture load_fixture() {
  Fixture f;
  for (auto& [name, t] : load_safetensors(STRATA_SOURCE_DIR "/tests/data/gpt_reference.safetensors", &f.meta)) {
    if (name.rfind("grad.", 0) == 0 || name.rfind("input.", 0) == 0 || name.rfind("output.", 0) == 0)
      f.rest[name] = t;
    else
      f.params.emplace_back(name, t);
  }
  return f;
}

// Elements failing allclose(rtol, atol = 1e-6 * max|b|): f32 rounding in a sum is
// proportional to the tensor's scale, not to an element that cancels to ~0.
int64_t count_mismatches(const Tensor& a, const Tensor& b, double rtol, double* worst) {
  auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  double scale = 0;
  for (double x : bv) scale = std::max(scale, std::abs(x));
  int64_t bad = 0;
  *worst = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    const double err = std::abs(av[i] - bv[i]);
    *worst = std::max(*worst, err / (std::abs(bv[i]) + 1e-6 * scale));
    if (err > 1e-6 * scale + rtol * std::abs(bv[i])) ++bad;
  }
  return bad;
}
}  // namespace

TEST(GptReference, LossAndEveryGradientMatchPyTorch) {
  Fixture f = load_fixture();
  nn::GPTConfig cfg{.vocab = std::stoll(f.meta.at("vocab")),
                    .block_size = std::stoll(f.meta.at("block_size")),
                    .n_layer = std::stoll(f.meta.at("n_layer")),
                    .n_head = std::stoll(f.meta.at("n_head")),
                    .n_embd = std::stoll(f.meta.at("n_embd"))};
  Generator gen(0);
  auto model = std::make_shared<nn::GPT>(cfg, gen);
  model->load_state_dict(f.params);
  model->train();
  Tensor loss = model->loss(f.rest.at("input.idx"), f.rest.at("input.targets"));
  const double ref = f.rest.at("output.loss").item<double>();
  EXPECT_NEAR(loss.item<double>(), ref, 1e-4 * std::abs(ref));
  backward(loss);
  int checked = 0;
  for (auto& [name, p] : model->named_parameters()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.rest.count("grad." + name)) << "fixture has no gradient for " << name;
    ASSERT_TRUE(p.grad().defined());
    double worst = 0;
    EXPECT_EQ(count_mismatches(p.grad(), f.rest.at("grad." + name), 1e-4, &worst), 0) << "worst " << worst;
    ++checked;
  }
  EXPECT_EQ(checked, int(f.params.size()));
}
