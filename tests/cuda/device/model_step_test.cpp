// Whole training steps on the GPU against the same model on the CPU: a GPT (embeddings,
// attention with a causal mask, GELU MLP, layer norm, dropout, tied lm head,
// cross-entropy, AdamW; with and without activation checkpointing) and a CNN (cuDNN
// conv, batch norm, max pool, dropout, SGD with momentum). Same seed, same data, same
// dropout masks: losses, gradients and parameters must agree to f32 rounding.
#include <gtest/gtest.h>

#include "train_steps.h"
#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/nn/cnn.h>
#include <strata/nn/gpt.h>
#include <strata/optim/adam.h>
#include <strata/optim/sgd.h>

namespace strata {
namespace {

using namespace test;  // kGpu, Tol, tol_for, expect_close, rand_cpu, gpu
using testing::random_tokens;

void expect_same_grads(const nn::Module& gpu_m, const nn::Module& cpu_m, Tol tol) {
  const auto g = gpu_m.named_parameters(), c = cpu_m.named_parameters();
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_TRUE(g[i].second.grad().defined()) << g[i].first;
    EXPECT_EQ(g[i].second.grad().device(), kGpu) << g[i].first;
    expect_close(g[i].second.grad(), c[i].second.grad(), tol, "grad " + g[i].first);
  }
}

void gpt_steps(bool checkpoint) {
  nn::GPTConfig cfg;
  cfg.vocab = 64;
  cfg.block_size = 16;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 32;
  cfg.dropout = 0.1;
  cfg.checkpoint = checkpoint;
  Generator gc(7), gg(7);
  auto cpu_m = std::make_shared<nn::GPT>(cfg, gc);
  auto gpu_m = std::make_shared<nn::GPT>(cfg, gg);
  gpu_m->to(kGpu);
  expect_same_params(*gpu_m, *cpu_m, Tol{0, 0}, "initial");
  test::expect_adamw_steps_match(*cpu_m, *gpu_m, cfg.vocab, [&](int step) {
    if (step == 0) expect_same_grads(*gpu_m, *cpu_m, Tol{1e-5, 1e-3});
  });
  expect_same_params(*gpu_m, *cpu_m, Tol{2e-5, 1e-4}, "after 3 AdamW steps");
}

TEST(CudaModelStep, GptTrainingStepsMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  gpt_steps(/*checkpoint=*/false);
}

TEST(CudaModelStep, GptWithActivationCheckpointingMatchesTheCpu) {
  STRATA_REQUIRE_GPU();
  gpt_steps(/*checkpoint=*/true);
}

TEST(CudaModelStep, CnnTrainingStepsMatchTheCpu) {
  STRATA_REQUIRE_GPU();
#ifndef STRATA_WITH_CUDNN
  GTEST_SKIP() << "built without cuDNN";
#endif
  nn::CNNConfig cfg;
  cfg.channels = {4, 8};
  cfg.image_size = 12;
  cfg.hidden = 16;
  cfg.dropout = 0.25;
  cfg.batch_norm = true;
  Generator gc(3), gg(3);
  auto cpu_m = std::make_shared<nn::CNN>(cfg, gc);
  auto gpu_m = std::make_shared<nn::CNN>(cfg, gg);
  gpu_m->to(kGpu);
  const optim::SGDOptions opt{.lr = 0.05, .momentum = 0.9, .dampening = 0.0, .weight_decay = 1e-4, .nesterov = false};
  optim::SGD oc(cpu_m->named_parameters(), opt), og(gpu_m->named_parameters(), opt);
  for (int step = 0; step < 3; ++step) {
    const Tensor x = test::rand_cpu({8, 1, 12, 12}, DType::f32, 300 + uint64_t(step), 0.0, 1.0);
    const Tensor y = random_tokens({8}, 10, 400 + uint64_t(step));
    oc.zero_grad();
    og.zero_grad();
    const Tensor lc = cross_entropy((*cpu_m)(x), y);
    const Tensor lg = cross_entropy((*gpu_m)(x.to(kGpu)), y.to(kGpu));
    EXPECT_NEAR(lg.item<double>(), lc.item<double>(), 1e-5 * std::abs(lc.item<double>())) << "loss at step " << step;
    backward(lc);
    backward(lg);
    if (step == 0) expect_same_grads(*gpu_m, *cpu_m, Tol{1e-5, 1e-3});
    oc.step();
    og.step();
  }
  expect_same_params(*gpu_m, *cpu_m, Tol{2e-5, 1e-4}, "after 3 SGD steps");
  const auto gb = gpu_m->named_buffers(), cb = cpu_m->named_buffers();
  for (size_t i = 0; i < gb.size(); ++i) expect_close(gb[i].second, cb[i].second, "buffer " + gb[i].first);
}

}  // namespace
}  // namespace strata
