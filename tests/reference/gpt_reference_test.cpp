// strata's GPT forward and backward against PyTorch: tools/make_reference.py wrote a
// small GPT's weights, a batch, the loss and every parameter gradient (computed in
// f64 from the same f32 weights). Our f32 loss and gradients must match at rtol 1e-4.
#include "tests/reference/reference_fixture.h"

#include <gtest/gtest.h>

#include <strata/nn/gpt.h>

using namespace strata;

TEST(GptReference, LossAndEveryGradientMatchPyTorch) {
  const strata::testing::ReferenceFixture f =
      strata::testing::load_reference_fixture(STRATA_SOURCE_DIR "/tests/data/gpt_reference.safetensors");
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
  strata::testing::expect_loss_and_grads_match(*model, loss, f);
}
