// strata's Llama forward and backward against PyTorch: tools/make_llama_reference.py wrote
// a small Llama's weights (grouped-query attention, untied head, Llama 3.1 rope scaling),
// a batch, the loss and every parameter gradient, computed in f64 from the same f32
// weights the way Hugging Face's LlamaForCausalLM does (rotate-half rotary layout,
// repeat_kv). Our f32 loss and gradients must match at rtol 1e-4.
#include "tests/reference/reference_fixture.h"

#include <gtest/gtest.h>

#include <strata/nn/llama.h>

using namespace strata;

TEST(LlamaReference, LossAndEveryGradientMatchPyTorch) {
  const strata::testing::ReferenceFixture f =
      strata::testing::load_reference_fixture(STRATA_SOURCE_DIR "/tests/data/llama_reference.safetensors");
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
  strata::testing::expect_loss_and_grads_match(*model, loss, f);
}
