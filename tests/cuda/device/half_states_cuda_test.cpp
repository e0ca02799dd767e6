// 16-bit model states (run.precision bf16_params / f16_params) on CUDA against the same run
// on the CPU: a tiny GPT, a tiny Llama (grouped key/value heads) and a small CNN with bf16
// parameters, activations and gradients, AdamW / SGD keeping f32 masters and state, for
// several steps; and the GPT in f16 with the GradScaler (a skipped overflow step, backoff
// and growth). Same init, same batches. The two sides compute each op in f32 and round
// once, in different orders (and the CPU's 16-bit attention is the composition, whose
// probabilities are rounded to 16 bits, where CUDA runs the fused kernel), so they agree
// within 16-bit rounding: per-step losses within kLossRel, parameters and f32 masters
// within kUlps ulps of each tensor's largest element. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "train_steps.h"
#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/nn/cnn.h>
#include <strata/nn/gpt.h>
#include <strata/nn/llama.h>
#include <strata/optim/adam.h>
#include <strata/optim/grad_scaler.h>
#include <strata/optim/sgd.h>

namespace strata {
namespace {

using test::kGpu;
using testing::random_tokens;

constexpr double kLossRel = 0.015;  // per-step loss, relative
constexpr double kUlps = 4;         // parameters / masters, in ulps of the tensor's largest element

// One ulp of the 16-bit dtype at 1.0 (bf16 keeps 8 significant bits, f16 11).
double unit_ulp(DType dt) { return dt == DType::bf16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10); }

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : ops::to_dtype(t.to(kCPU), DType::f64).to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto x = ops::to_dtype(a.to(kCPU), DType::f64).to_vector<double>();
  const auto y = ops::to_dtype(b.to(kCPU), DType::f64).to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// Every tensor of `got` (on the GPU) within kUlps 16-bit ulps of want's largest element.
void expect_within_ulps(const nn::NamedTensors& got, const nn::NamedTensors& want, DType dt, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first) << what;
    EXPECT_EQ(got[i].second.device(), kGpu) << what << " " << got[i].first;
    EXPECT_EQ(got[i].second.dtype(), want[i].second.dtype()) << what << " " << got[i].first;
    const double tol = kUlps * unit_ulp(dt) * max_abs(want[i].second);
    EXPECT_LE(max_abs_diff(got[i].second, want[i].second), tol) << what << " " << got[i].first;
  }
}

nn::NamedTensors snapshot(const nn::NamedTensors& ts) {
  nn::NamedTensors out;
  for (const auto& [n, t] : ts) out.emplace_back(n, ops::clone(t));
  return out;
}

// The training moved the parameters well beyond the comparison's tolerance, so the
// comparison can fail: some tensor changed by more than 4x its tolerance.
void expect_moved(const nn::NamedTensors& before, const nn::NamedTensors& after, DType dt) {
  double best = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    const double tol = kUlps * unit_ulp(dt) * max_abs(before[i].second);
    if (tol > 0) best = std::max(best, max_abs_diff(after[i].second, before[i].second) / tol);
  }
  EXPECT_GT(best, 4.0) << "the steps hardly moved the parameters: the tolerance would hide a wrong update";
}

// `steps` AdamW steps of a token model in 16-bit states on both devices (the GradScaler
// when `scaler` is given, checking that both skip the same steps at the same scales).
template <class Model>
void expect_half_steps_match(Model& cpu_m, Model& gpu_m, int64_t vocab, DType dt, int steps,
                             std::optional<optim::GradScalerOptions> scaler = std::nullopt) {
  cpu_m.to(dt);
  gpu_m.to(dt);
  gpu_m.to(kGpu);
  for (const auto& [n, p] : gpu_m.named_parameters()) ASSERT_EQ(p.dtype(), dt) << n;
  // eps 1e-3: a parameter with an exactly-zero true gradient (the attention key bias)
  // must not turn its 16-bit rounding noise into full-size steps of either sign
  const optim::AdamWOptions opt{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-3, .weight_decay = 0.1};
  optim::AdamW oc(cpu_m.named_parameters(), opt), og(gpu_m.named_parameters(), opt);
  ASSERT_TRUE(oc.has_masters() && og.has_masters());
  optim::GradScaler sc(scaler.value_or(optim::GradScalerOptions{.enabled = false}));
  optim::GradScaler sg(scaler.value_or(optim::GradScalerOptions{.enabled = false}));
  const nn::NamedTensors start = snapshot(cpu_m.named_parameters());
  int skipped = 0;
  for (int step = 0; step < steps; ++step) {
    const Tensor idx = random_tokens({4, 16}, vocab, 100 + uint64_t(step));
    const Tensor tgt = random_tokens({4, 16}, vocab, 200 + uint64_t(step));
    const Tensor lc = cpu_m.loss(idx, tgt);
    const Tensor lg = gpu_m.loss(idx.to(kGpu), tgt.to(kGpu));
    EXPECT_EQ(lg.device(), kGpu);
    EXPECT_EQ(lg.dtype(), DType::f32) << "16-bit logits give an f32 loss";
    const double want = lc.template item<double>();
    EXPECT_NEAR(lg.template item<double>(), want, kLossRel * std::abs(want)) << "loss at step " << step;
    EXPECT_EQ(sg.get_scale(), sc.get_scale()) << "scale at step " << step;
    backward(sc.scale(lc));
    backward(sg.scale(lg));
    for (const auto& [n, p] : gpu_m.named_parameters()) EXPECT_EQ(p.grad().dtype(), dt) << n;
    const bool stepped_c = sc.step(oc), stepped_g = sg.step(og);
    EXPECT_EQ(stepped_g, stepped_c) << "skip decision at step " << step;
    skipped += !stepped_c;
    sc.update();
    sg.update();
    oc.zero_grad();
    og.zero_grad();
  }
  if (scaler) {
    EXPECT_GT(skipped, 0) << "the scaler test should skip an overflowing step";
  }
  expect_within_ulps(gpu_m.named_parameters(), cpu_m.named_parameters(), dt, "param");
  expect_within_ulps(og.named_masters(), oc.named_masters(), dt, "f32 master");
  for (const auto& [n, w] : og.named_masters()) EXPECT_EQ(w.dtype(), DType::f32) << n;
  expect_moved(start, cpu_m.named_parameters(), dt);
}

nn::GPTConfig tiny_gpt() {
  nn::GPTConfig cfg;
  cfg.vocab = 64;
  cfg.block_size = 16;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 32;
  cfg.dropout = 0.0;
  return cfg;
}

TEST(CudaHalfStates, GptBf16ParamsTracksTheCpu) {
  STRATA_REQUIRE_GPU();
  Generator gc(7), gg(7);
  auto cpu_m = std::make_shared<nn::GPT>(tiny_gpt(), gc), gpu_m = std::make_shared<nn::GPT>(tiny_gpt(), gg);
  expect_half_steps_match(*cpu_m, *gpu_m, 64, DType::bf16, 6);
}

TEST(CudaHalfStates, LlamaBf16ParamsTracksTheCpu) {
  STRATA_REQUIRE_GPU();
  nn::LlamaConfig cfg;
  cfg.vocab = 64;
  cfg.block_size = 16;
  cfg.n_layer = 2;
  cfg.n_head = 4;
  cfg.n_kv_head = 2;
  cfg.n_embd = 32;
  cfg.intermediate_size = 48;
  Generator gc(7), gg(7);
  auto cpu_m = std::make_shared<nn::Llama>(cfg, gc), gpu_m = std::make_shared<nn::Llama>(cfg, gg);
  expect_half_steps_match(*cpu_m, *gpu_m, 64, DType::bf16, 6);
}

// f16 with dynamic loss scaling: at 2^40 the first step's scaled gradients overflow f16 on
// both devices and the step is skipped; the scale backs off to 2^16 and grows to 2^17
// after three clean steps.
TEST(CudaHalfStates, GptF16ParamsWithGradScalerTracksTheCpu) {
  STRATA_REQUIRE_GPU();
  Generator gc(7), gg(7);
  auto cpu_m = std::make_shared<nn::GPT>(tiny_gpt(), gc), gpu_m = std::make_shared<nn::GPT>(tiny_gpt(), gg);
  expect_half_steps_match(*cpu_m, *gpu_m, 64, DType::f16, 6,
                          optim::GradScalerOptions{.init_scale = std::ldexp(1.0, 40),
                                                   .backoff_factor = std::ldexp(1.0, -24),
                                                   .growth_interval = 3});
}

TEST(CudaHalfStates, CnnBf16ParamsTracksTheCpu) {
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
  const DType dt = DType::bf16;
  Generator gc(3), gg(3);
  auto cpu_p = std::make_shared<nn::CNN>(cfg, gc), gpu_p = std::make_shared<nn::CNN>(cfg, gg);
  nn::CNN &cpu_m = *cpu_p, &gpu_m = *gpu_p;
  cpu_m.to(dt);
  gpu_m.to(dt);
  gpu_m.to(kGpu);
  const optim::SGDOptions opt{.lr = 0.1, .momentum = 0.9, .dampening = 0.0, .weight_decay = 1e-4, .nesterov = false};
  optim::SGD oc(cpu_m.named_parameters(), opt), og(gpu_m.named_parameters(), opt);
  const nn::NamedTensors start = snapshot(cpu_m.named_parameters());
  for (int step = 0; step < 5; ++step) {
    // images enter a 16-bit model as 16-bit tensors (the trainer casts them)
    const Tensor x = ops::to_dtype(test::rand_cpu({16, 1, 12, 12}, DType::f32, 300 + uint64_t(step), 0.0, 1.0), dt);
    const Tensor y = random_tokens({16}, 10, 400 + uint64_t(step));
    const Tensor lc = cross_entropy(cpu_m(x), y);
    const Tensor lg = cross_entropy(gpu_m(x.to(kGpu)), y.to(kGpu));
    EXPECT_NEAR(lg.item<double>(), lc.item<double>(), kLossRel * std::abs(lc.item<double>())) << "loss at step " << step;
    backward(lc);
    backward(lg);
    oc.step();
    og.step();
    oc.zero_grad();
    og.zero_grad();
  }
  expect_within_ulps(gpu_m.named_parameters(), cpu_m.named_parameters(), dt, "param");
  expect_within_ulps(og.named_masters(), oc.named_masters(), dt, "f32 master");
  expect_within_ulps(gpu_m.named_buffers(), cpu_m.named_buffers(), dt, "buffer");
  expect_moved(start, cpu_m.named_parameters(), dt);
}

}  // namespace
}  // namespace strata
