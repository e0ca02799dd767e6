// DataParallel with one replica per GPU (torch.nn.DataParallel(module, device_ids=[0, 1],
// output_device=0)): an MLP and a tiny GPT trained 3 SGD steps on cuda:0 + cuda:1, on
// cuda:0 alone and with two replicas sharing cuda:0, against the whole batch on the CPU.
#include <gtest/gtest.h>

#include "../cuda_test_util.h"
#include <strata/parallel/data/data_parallel.h>
#include "tests/parallel/equivalence.h"

namespace strata {
namespace {

using testing::kModelSeed;
using testing::make_batch;
using testing::make_model;
using testing::make_optimizer;
using testing::max_relative_error;

constexpr Device kCuda0{DeviceType::CUDA, 0}, kCuda1{DeviceType::CUDA, 1};
constexpr int kSteps = 3;
constexpr int64_t kBatch = 10;  // uneven chunks on 2 and 3 replicas

/// Skips unless `n` CUDA devices are visible.
#define STRATA_REQUIRE_GPUS(n)                                                                              \
  do {                                                                                                      \
    STRATA_REQUIRE_GPU();                                                                                   \
    if (::strata::cuda::device_count() < (n))                                                              \
      GTEST_SKIP() << "needs " << (n) << " CUDA devices, " << ::strata::cuda::device_count() << " visible"; \
  } while (0)

// Mean cross-entropy of classifier logits (B, C) or GPT logits (B, T, V).
Tensor loss_of(const Tensor& out, const Tensor& y) {
  if (out.dim() == 3) return cross_entropy(reshape(out, {-1, out.size(2)}), ops::reshape(y, {-1}));
  return cross_entropy(out, y);
}

struct Run {
  std::vector<double> losses;
  nn::NamedTensors state;  // on the CPU
};

Run cpu_reference(const std::string& kind) {
  auto m = make_model(kind, kModelSeed);
  auto opt = make_optimizer("sgd", *m);
  Run r;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = make_batch(kind, kBatch, s);
    const Tensor loss = loss_of(m->forward(x), y);
    r.losses.push_back(loss.item<double>());
    backward(loss);
    opt->step();
    opt->zero_grad();
  }
  r.state = m->state_dict();
  return r;
}

// Trains under DataParallel (replicas from the factory, built on the CPU, land on their
// device); x arrives on the CPU, or already on the output device when input_on_device.
Run dp_run(const std::string& kind, int replicas, const std::vector<Device>& devices, bool input_on_device) {
  auto m = make_model(kind, kModelSeed);
  m->to(kCuda0);
  auto dp = std::make_shared<parallel::DataParallel>(
      m, [kind] { return make_model(kind, 4242); },
      parallel::DataParallelOptions{.replicas = replicas, .devices = devices});
  const int k_replicas = dp->replicas();
  EXPECT_EQ(dp->output_device(), kCuda0);
  for (int k = 0; k < k_replicas; ++k) {
    const Device want = devices.empty() ? kCuda0 : devices[size_t(k)];
    EXPECT_EQ(dp->device(k), want);
    for (const auto& [name, t] : dp->replica(k).state_dict()) EXPECT_EQ(t.device(), want) << "replica " << k << " " << name;
  }
  auto opt = make_optimizer("sgd", dp->module());
  Run r;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = make_batch(kind, kBatch, s);
    if (input_on_device) x = x.to(kCuda0);
    const Tensor out = dp->forward(x);
    EXPECT_EQ(out.device(), kCuda0);
    EXPECT_EQ(out.size(0), kBatch);
    const Tensor loss = loss_of(out, y.to(kCuda0));
    r.losses.push_back(loss.item<double>());
    backward(loss);
    for (const auto& [name, p] : dp->module().named_parameters()) {
      if (!p.grad().defined()) {
        ADD_FAILURE() << name << " has no gradient";
        continue;
      }
      EXPECT_EQ(p.grad().device(), kCuda0) << name;
    }
    for (int k = 1; k < k_replicas; ++k)  // reduced onto replica 0 and dropped
      for (const auto& p : dp->replica(k).parameters()) EXPECT_FALSE(p.grad().defined()) << "replica " << k;
    if (s == 0 && k_replicas > 1) {
      const auto mem = dp->memory_report(opt.get());
      const int64_t psi = dp->module().num_parameters() * 4;
      for (int k = 0; k < k_replicas; ++k) {
        EXPECT_EQ(mem[size_t(k)].params, psi) << "replica " << k;
        EXPECT_EQ(mem[size_t(k)].grads, psi) << "replica " << k;
      }
      // on another device, replica 1 also holds its output's gradient chunk
      const int64_t chunk_bytes = out.nbytes() / kBatch * (kBatch / k_replicas);
      const bool other_device = dp->device(1) != kCuda0;
      EXPECT_EQ(mem[1].outputs, chunk_bytes * (other_device ? 2 : 1));
    }
    opt->step();
    opt->zero_grad();
  }
  for (const auto& [name, t] : dp->module().state_dict()) r.state.emplace_back(name, t.to(kCPU));
  return r;
}

void expect_same_training(const std::string& kind, int replicas, const std::vector<Device>& devices,
                          bool input_on_device = false) {
  const Run want = cpu_reference(kind);
  const Run got = dp_run(kind, replicas, devices, input_on_device);
  std::string what = kind + " on";
  for (const Device& d : devices) what.append(" ").append(d.str());
  if (devices.empty()) what.append(" ").append(std::to_string(replicas)).append(" replicas sharing cuda:0");
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s)
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-5 * std::abs(want.losses[s])) << what << ": loss at step " << s;
  std::string worst;
  EXPECT_LT(max_relative_error(got.state, want.state, &worst), 1e-4) << what << ": after " << kSteps
                                                                       << " SGD steps, worst " << worst;
}

TEST(CudaDataParallel, TwoGpusEqualTheCpu) {
  STRATA_REQUIRE_GPUS(2);
  expect_same_training("mlp", 0, {kCuda0, kCuda1});
  expect_same_training("mlp", 2, {kCuda0, kCuda1}, /*input_on_device=*/true);
  expect_same_training("gpt", 0, {kCuda0, kCuda1});
}

TEST(CudaDataParallel, ReplicaOrderFollowsTheDeviceList) {
  STRATA_REQUIRE_GPUS(2);
  // devices[0] is the output device; the module must already be there.
  auto m = make_model("mlp", kModelSeed);
  m->to(kCuda0);
  try {
    parallel::DataParallel dp(m, [] { return make_model("mlp", 1); }, {.devices = {kCuda1, kCuda0}});
    FAIL() << "expected an error naming cuda:1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("on device cuda:1 (devices[0]) but"), std::string::npos) << e.what();
  }
  m->to(kCuda1);
  auto dp = std::make_shared<parallel::DataParallel>(m, [] { return make_model("mlp", 1); },
                                                     parallel::DataParallelOptions{.devices = {kCuda1, kCuda0}});
  EXPECT_EQ(dp->replica(1).parameters()[0].device(), kCuda0);
  auto [x, y] = make_batch("mlp", kBatch, 0);
  NoGradGuard ng;
  const Tensor out = dp->forward(x);
  EXPECT_EQ(out.device(), kCuda1);
  auto plain = make_model("mlp", kModelSeed);
  test::expect_close(out, plain->forward(x), "gathered output on cuda:1");
}

TEST(CudaDataParallel, OneGpuEqualsTheCpu) {
  STRATA_REQUIRE_GPU();
  expect_same_training("mlp", 0, {kCuda0});
  expect_same_training("gpt", 0, {kCuda0}, /*input_on_device=*/true);
  // no device list: the replicas share the module's device (two threads on cuda:0)
  expect_same_training("mlp", 2, {});
  expect_same_training("gpt", 3, {});
}

}  // namespace
}  // namespace strata
