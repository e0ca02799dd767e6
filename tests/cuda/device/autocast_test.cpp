// Autocast on CUDA runs linear / matmul / conv2d natively in bf16 / f16 (cuBLAS, cuDNN)
// while the CPU emulates them on f32 copies of the rounded values: the same MLP, CNN and
// GPT give the same loss and gradients on both (to 16-bit rounding), the GPU's GPT forward
// holds clearly less activation memory than in f32, and f16 + GradScaler trains like f32.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <optional>

#include "tests/test_tensors.h"
#include "../cuda_test_util.h"
#include <strata/autograd/autocast.h>
#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/core/memory.h>
#include <strata/nn/cnn.h>
#include <strata/nn/gpt.h>
#include <strata/nn/mlp.h>
#include <strata/optim/grad_scaler.h>
#include <strata/optim/sgd.h>

namespace strata {
namespace {

using test::kGpu;
using testing::random_tokens;
using testing::rnd;

/// The loss of model m on the test's inputs moved to device d.
using LossFn = std::function<Tensor(nn::Module& m, Device d)>;
using MakeFn = std::function<std::shared_ptr<nn::Module>()>;

struct Grads {
  double loss = 0;
  std::vector<std::vector<float>> grads;  // per parameter, on the host
};

// Forward + loss under autocast dt, backward outside it; the f32 master weights must
// come out with f32 gradients on the model's device.
Grads forward_backward(nn::Module& m, const LossFn& loss_fn, Device d, DType dt) {
  m.zero_grad();
  Tensor loss;
  {
    AutocastGuard ac(dt);
    loss = loss_fn(m, d);
  }
  EXPECT_EQ(loss.dtype(), DType::f32) << "the loss is an f32 op's output";
  backward(loss);
  Grads r{loss.item<double>(), {}};
  for (const auto& [name, p] : m.named_parameters()) {
    EXPECT_EQ(p.dtype(), DType::f32) << name << ": master weights stay f32";
    EXPECT_EQ(p.device(), d) << name;
    if (!p.grad().defined()) {
      ADD_FAILURE() << name << " has no gradient";
      r.grads.emplace_back();
      continue;
    }
    EXPECT_EQ(p.grad().dtype(), DType::f32) << name << ": gradients reach the master weights as f32";
    EXPECT_EQ(p.grad().device(), d) << name;
    r.grads.push_back(p.grad().to_vector<float>());
  }
  return r;
}

// The same model (same init) on the GPU (native 16-bit) and on the CPU (emulated): the
// loss agrees to 16-bit tolerance, every gradient points the same way (cosine > 0.99)
// and the global gradient norms agree within 2%.
void expect_gpu_matches_cpu(const MakeFn& make, const LossFn& loss_fn, DType dt) {
  auto cpu_m = make(), gpu_m = make();
  gpu_m->to(kGpu);
  const Grads c = forward_backward(*cpu_m, loss_fn, kCPU, dt);
  const Grads g = forward_backward(*gpu_m, loss_fn, kGpu, dt);
  EXPECT_NEAR(g.loss, c.loss, test::tol_for(dt).rel * std::abs(c.loss)) << dtype_name(dt);
  ASSERT_EQ(c.grads.size(), g.grads.size());
  const auto names = cpu_m->named_parameters();
  double nc = 0, ng = 0;
  for (size_t t = 0; t < c.grads.size(); ++t) {
    ASSERT_EQ(c.grads[t].size(), g.grads[t].size()) << names[t].first;
    double dot = 0, a2 = 0, b2 = 0;
    for (size_t i = 0; i < c.grads[t].size(); ++i) {
      dot += double(c.grads[t][i]) * g.grads[t][i];
      a2 += double(c.grads[t][i]) * c.grads[t][i];
      b2 += double(g.grads[t][i]) * g.grads[t][i];
    }
    nc += a2, ng += b2;
    if (a2 == 0 && b2 == 0) continue;
    EXPECT_GT(dot / std::sqrt(a2 * b2), 0.99) << names[t].first << " " << dtype_name(dt);
  }
  EXPECT_NEAR(std::sqrt(ng), std::sqrt(nc), 0.02 * std::sqrt(nc)) << dtype_name(dt);
}

std::shared_ptr<nn::Module> make_mlp() {
  Generator g(21);
  return std::make_shared<nn::MLP>(nn::MLPConfig{.input = 48, .hidden = {64, 32}, .classes = 7}, g);
}

std::shared_ptr<nn::Module> make_cnn(bool batch_norm) {
  Generator g(22);
  // without batch norm the convs have biases (cuDNN's 16-bit bias add and bias gradient)
  return std::make_shared<nn::CNN>(nn::CNNConfig{.in_channels = 2, .channels = {4, 8}, .classes = 5,
                                                 .batch_norm = batch_norm, .image_size = 8, .hidden = 16},
                                   g);
}

const nn::GPTConfig kTinyGpt{.vocab = 31, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32};

std::shared_ptr<nn::Module> make_gpt(const nn::GPTConfig& cfg) {
  Generator g(23);
  return std::make_shared<nn::GPT>(cfg, g);
}

LossFn classifier_loss(const Tensor& x, const Tensor& y) {
  return [x, y](nn::Module& m, Device d) { return cross_entropy(m(x.to(d)), y.to(d)); };
}

LossFn gpt_loss(const Tensor& idx, const Tensor& tgt) {
  return [idx, tgt](nn::Module& m, Device d) { return static_cast<nn::GPT&>(m).loss(idx.to(d), tgt.to(d)); };
}

TEST(CudaAutocast, MlpMatchesTheCpuEmulation) {
  STRATA_REQUIRE_GPU();
  const Tensor x = rnd({16, 48}, DType::f32, 1), y = random_tokens({16}, 7, 2);
  for (DType dt : {DType::bf16, DType::f16}) expect_gpu_matches_cpu(make_mlp, classifier_loss(x, y), dt);
}

TEST(CudaAutocast, CnnMatchesTheCpuEmulation) {
  STRATA_REQUIRE_GPU();
#ifndef STRATA_WITH_CUDNN
  GTEST_SKIP() << "built without cuDNN";
#endif
  const Tensor x = rnd({8, 2, 8, 8}, DType::f32, 3), y = random_tokens({8}, 5, 4);
  for (DType dt : {DType::bf16, DType::f16})
    expect_gpu_matches_cpu([] { return make_cnn(false); }, classifier_loss(x, y), dt);
  expect_gpu_matches_cpu([] { return make_cnn(true); }, classifier_loss(x, y), DType::bf16);
}

TEST(CudaAutocast, GptMatchesTheCpuEmulation) {
  STRATA_REQUIRE_GPU();
  const Tensor idx = random_tokens({4, 16}, kTinyGpt.vocab, 5), tgt = random_tokens({4, 16}, kTinyGpt.vocab, 6);
  for (DType dt : {DType::bf16, DType::f16})
    expect_gpu_matches_cpu([] { return make_gpt(kTinyGpt); }, gpt_loss(idx, tgt), dt);
}

// The 16-bit ops save 16-bit inputs for backward, so the activations a GPT forward + loss
// holds shrink; the f32 ops around them (layer norm inputs, softmax outputs, GELU inputs,
// the residual stream, the logits) stay f32, which bounds the saving to about a third.
// Deep and narrow-headed so the per-block tensors dominate the count: counting the
// tensors gives about 0.70 of the f32 peak and 0.67 of what stays held for backward.
TEST(CudaAutocast, GptForwardHoldsLessActivationMemoryInBf16) {
  STRATA_REQUIRE_GPU();
  const nn::GPTConfig cfg{.vocab = 32, .block_size = 16, .n_layer = 8, .n_head = 2, .n_embd = 128};
  auto m = make_gpt(cfg);
  m->to(kGpu);
  const Tensor idx = random_tokens({256, 16}, cfg.vocab, 7).to(kGpu);
  const Tensor tgt = random_tokens({256, 16}, cfg.vocab, 8).to(kGpu);
  MemoryTracker& mem = cuda::cuda_memory(0);
  struct Use {
    int64_t peak, held;  // activation bytes: most at once during forward + loss, and still held after
  };
  auto measure = [&](std::optional<DType> dt) {
    { Tensor warm = static_cast<nn::GPT&>(*m).loss(idx, tgt); }  // caches the causal mask on the GPU
    const int64_t base = mem.stats(MemCategory::activations).current;
    mem.reset_peaks();
    Tensor loss;
    {
      AutocastGuard ac(dt);
      loss = static_cast<nn::GPT&>(*m).loss(idx, tgt);
    }
    const MemStats s = mem.stats(MemCategory::activations);
    return Use{s.peak - base, s.current - base};
  };
  const Use f32 = measure(std::nullopt), bf16 = measure(DType::bf16);
  ASSERT_GT(f32.peak, 0);
  EXPECT_LT(double(bf16.peak), 0.75 * double(f32.peak)) << "bf16 " << bf16.peak << " B, f32 " << f32.peak << " B";
  EXPECT_LT(double(bf16.held), 0.72 * double(f32.held)) << "bf16 " << bf16.held << " B, f32 " << f32.held << " B";
}

// f16 autocast with dynamic loss scaling (scale, backward, step through the scaler)
// trains the MLP on the GPU like plain f32 SGD does.
TEST(CudaAutocast, F16WithGradScalerTrainsLikeF32) {
  STRATA_REQUIRE_GPU();
  const Tensor x = rnd({32, 48}, DType::f32, 9).to(kGpu), y = random_tokens({32}, 7, 10).to(kGpu);
  auto m32 = make_mlp(), m16 = make_mlp();
  m32->to(kGpu);
  m16->to(kGpu);
  const optim::SGDOptions opt{.lr = 0.2};
  optim::SGD o32(m32->named_parameters(), opt), o16(m16->named_parameters(), opt);
  optim::GradScaler scaler(optim::GradScalerOptions{.init_scale = 1024.0});
  std::vector<double> l32, l16;
  for (int step = 0; step < 25; ++step) {
    o32.zero_grad();
    Tensor a = cross_entropy((*m32)(x), y);
    backward(a);
    o32.step();
    l32.push_back(a.item<double>());

    o16.zero_grad();
    Tensor b;
    {
      AutocastGuard ac(DType::f16);
      b = cross_entropy((*m16)(x), y);
    }
    backward(scaler.scale(b));
    EXPECT_TRUE(scaler.step(o16)) << "step " << step << " overflowed at scale " << scaler.get_scale();
    scaler.update();
    l16.push_back(b.item<double>());
  }
  EXPECT_EQ(scaler.skipped_steps(), 0);
  for (const auto& [name, p] : m16->named_parameters()) EXPECT_EQ(p.dtype(), DType::f32) << name;
  auto tail = [](const std::vector<double>& l) { return (l.end()[-1] + l.end()[-2] + l.end()[-3]) / 3; };
  EXPECT_LT(tail(l32), 0.8 * l32.front());
  EXPECT_LT(tail(l16), 0.8 * l16.front()) << "f16 autocast did not train";
  EXPECT_NEAR(tail(l16), tail(l32), 0.03 * l32.front()) << "f16 autocast drifted from f32";
  for (size_t s = 0; s < l32.size(); ++s) EXPECT_NEAR(l16[s], l32[s], 0.03 * l32.front()) << "step " << s;
}

}  // namespace
}  // namespace strata
