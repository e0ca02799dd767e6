// strata's Llama forward and backward against PyTorch: tools/make_llama_reference.py wrote
// a small Llama's weights (grouped-query attention, untied head, Llama 3.1 rope scaling),
// a batch, the loss and every parameter gradient, computed in f64 from the same f32
// weights the way Hugging Face's LlamaForCausalLM does (rotate-half rotary layout,
// repeat_kv). Our f32 loss and gradients must match at rtol 1e-4.
#include <gtest/gtest.h>

#include <cmath>

#include <strata/autograd/engine.h>
#include <strata/nn/llama.h>
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
  for (auto& [name, t] : load_safetensors(STRATA_SOURCE_DIR "/tests/data/llama_reference.safetensors", &f.meta)) {
    if (name.rfind("grad.", 0) == 0 || name.rfind("input.", 0) == 0 || name.rfind("output.loss", 0) == 0)
      f.rest[name] = t;
    else
      f.params.emplace_back(name, t);
  }
  return f;
}

// Elements failing allclose(rtol, atol = 1e-6 * max|b|), as the GPT reference test.
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

TEST(LlamaReference, LossAndEveryGradientMatchPyTorch) {
  Fixture f = load_fixture();
  const auto& m = f.meta;
  nn::LlamaConfig cfg{.vocab = std::stoll(m.at("vocab")),
                      .block_size = std::stoll(m.at("block_size")),
                      .n_layer = std::stoll(m.at("n_layer")),
                      .n_head = std::stoll(m.at("n_head")),
                      .n_kv_head = std::stoll(m.at("n_kv_head")),
                      .n_embd = std::stoll(m.at("n_embd")),
                      .intermediate_size = std::stoll(m.at("intermediate_size")),
                      .norm_eps = std::stod(m.at("norm_eps")),
                      .rope_theta = std::stod(m.at("rope_theta")),
                      .rope_scaling = nn::RopeScaling{
                          .factor = std::stod(m.at("rope_factor")),
                          .low_freq_factor = std::stod(m.at("rope_low_freq_factor")),
                          .high_freq_factor = std::stod(m.at("rope_high_freq_factor")),
                          .original_max_position_embeddings = std::stoll(m.at("rope_original_max_position_embeddings"))},
                      .tie_weights = false};
  Generator gen(0);
  auto model = std::make_shared<nn::Llama>(cfg, gen);
  ASSERT_EQ(model->named_parameters().size(), f.params.size());
  model->load_state_dict(f.params);
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
