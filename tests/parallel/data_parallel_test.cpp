// DataParallel (K thread replicas in one process) against the single-process reference,
// its device list (all-CPU lists here, CUDA placement errors raised before any CUDA call),
// its per-replica memory report, and the "module." checkpoint prefix rules.
#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <optional>

#include <strata/autograd/autocast.h>
#include "equivalence.h"
#include <strata/parallel/data/data_parallel.h>
#include <strata/parallel/checkpoint/state_dict_keys.h>

namespace strata::testing {
namespace {

std::shared_ptr<parallel::DataParallel> wrap(const std::string& kind, int k, std::vector<Device> devices = {}) {
  auto m = make_model(kind, kModelSeed);
  return std::make_shared<parallel::DataParallel>(
      m, [kind] { return make_model(kind, 4242); },
      parallel::DataParallelOptions{.replicas = k, .devices = std::move(devices)});
}

nn::NamedTensors dp_state(const EquivCase& c, int k, int64_t batch, std::vector<Device> devices = {}) {
  auto dp = wrap(c.model, k, std::move(devices));
  auto opt = make_optimizer(c.optim, dp->module());
  for (int s = 0; s < c.steps; ++s) {
    auto [x, y] = make_batch(c.model, batch, s);
    backward(cross_entropy(dp->forward(x), y));
    opt->step();
    opt->zero_grad();
  }
  return dp->module().state_dict();
}

void check_dp(const EquivCase& c, int k, int64_t batch, std::vector<Device> devices = {}) {
  EquivCase ref_case = c;
  ref_case.batch = batch;
  std::string worst;
  const double err = max_relative_error(dp_state(c, k, batch, std::move(devices)), reference_state(ref_case, 1), &worst);
  EXPECT_LT(err, 1e-5) << c.model << "/" << c.optim << " K=" << k << " B=" << batch << ": " << worst;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

constexpr Device kCuda0{DeviceType::CUDA, 0}, kCuda1{DeviceType::CUDA, 1};

TEST(DataParallel, EqualsSingleProcess) {
  for (int k = 1; k <= 4; ++k) check_dp(EquivCase{}, k, 12);
  check_dp(EquivCase{.optim = "adam"}, 3, 12);
  check_dp(EquivCase{.model = "cnn"}, 2, 12);
}

TEST(DataParallel, CpuDeviceListEqualsSingleProcess) {
  // replicas 0 = derived from the list; the explicit count must agree with it
  check_dp(EquivCase{}, 0, 12, {kCPU, kCPU, kCPU});
  check_dp(EquivCase{.optim = "adam"}, 3, 10, {kCPU, kCPU, kCPU});
  check_dp(EquivCase{.model = "cnn"}, 0, 12, {kCPU, kCPU});
  check_dp(EquivCase{.model = "gpt"}, 0, 6, {kCPU, kCPU, kCPU});
  auto dp = wrap("mlp", 0, {kCPU, kCPU, kCPU});
  EXPECT_EQ(dp->replicas(), 3);
  EXPECT_EQ(dp->output_device(), kCPU);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(dp->device(k), kCPU);
  EXPECT_EQ(wrap("mlp", 0)->replicas(), 2);  // neither given: two replicas on the module's device
}

TEST(DataParallel, DeviceListErrorsComeBeforeAnyCudaCall) {
  // The wrapped module sits on the CPU: cuda:0 as devices[0] names both devices.
  std::string e = error_of([] { wrap("mlp", 0, {kCuda0, kCuda1}); });
  EXPECT_NE(e.find("module must have its parameters and buffers on device cuda:0"), std::string::npos) << e;
  EXPECT_NE(e.find("is on cpu"), std::string::npos) << e;
  e = error_of([] { wrap("mlp", 0, {kCuda1, kCuda1}); });
  EXPECT_NE(e.find("cuda:1 is listed twice (devices[0] and devices[1])"), std::string::npos) << e;
  e = error_of([] { wrap("mlp", 3, {kCPU, kCPU}); });
  EXPECT_NE(e.find("parallel.replicas is 3 but 2 devices were given"), std::string::npos) << e;
  e = error_of([] { wrap("mlp", 0, {kCPU, kCuda0}); });
  EXPECT_NE(e.find("devices mix cpu (devices[0]) and cuda:0 (devices[1])"), std::string::npos) << e;
  e = error_of([] { wrap("mlp", -1); });
  EXPECT_NE(e.find("parallel.replicas must be >= 1"), std::string::npos) << e;
  // A replica that would sit on a CUDA device is never built when replica 0 is misplaced.
  int built = 0;
  auto m = make_model("mlp", kModelSeed);
  e = error_of([&] {
    parallel::DataParallel(m, [&] { ++built; return make_model("mlp", 1); }, {.devices = {kCuda0, kCuda1}});
  });
  EXPECT_FALSE(e.empty());
  EXPECT_EQ(built, 0);
}

// Every replica thread runs under the caller's autocast mode (thread-local state), so a
// bf16 forward is bf16 on all K chunks, and mode "off" stays off.
TEST(DataParallel, ReplicasInheritAutocast) {
  struct Probe : nn::Module {
    std::mutex* mu;
    std::vector<std::optional<DType>>* seen;
    Probe(std::mutex* m, std::vector<std::optional<DType>>* s) : mu(m), seen(s) {}
    Tensor forward(const Tensor& x) override {
      std::lock_guard<std::mutex> lk(*mu);
      seen->push_back(autocast_dtype());
      return x;
    }
    std::string type_name() const override { return "Probe"; }
  };
  std::mutex mu;
  std::vector<std::optional<DType>> seen;
  parallel::DataParallel dp(std::make_shared<Probe>(&mu, &seen), [&] { return std::make_shared<Probe>(&mu, &seen); },
                            {.replicas = 3});
  const Tensor x = ops::zeros({6, 2});
  for (const std::optional<DType> mode : {std::optional<DType>(DType::bf16), std::optional<DType>()}) {
    seen.clear();
    AutocastGuard ac(mode);
    dp.forward(x);
    ASSERT_EQ(seen.size(), 3u);
    for (const auto& s : seen) EXPECT_EQ(s, mode);
  }
}

TEST(DataParallel, UnevenChunksAndSmallBatches) {
  check_dp(EquivCase{.optim = "adam"}, 4, 10);  // chunks 3, 3, 2, 2
  check_dp(EquivCase{}, 4, 2);                  // only two replicas run
}

TEST(DataParallel, ForwardEqualsModule) {
  auto dp = wrap("cnn", 3);
  auto plain = make_model("cnn", kModelSeed);
  auto [x, y] = make_batch("cnn", 7, 0);
  NoGradGuard ng;
  expect_close(dp->forward(x), plain->forward(x), 1e-6, "gathered output");
}

TEST(DataParallel, ReplicaZeroHoldsMore) {
  auto dp = wrap("mlp", 3);
  auto opt = make_optimizer("adam", dp->module());
  auto [x, y] = make_batch("mlp", 12, 0);
  backward(cross_entropy(dp->forward(x), y));
  opt->step();
  const auto mem = dp->memory_report(opt.get());
  ASSERT_EQ(mem.size(), 3u);
  const int64_t psi = dp->module().num_parameters() * 4;
  for (const auto& m : mem) {
    EXPECT_EQ(m.params, psi);
    EXPECT_EQ(m.grads, psi);       // every replica holds a full gradient before the reduction
    EXPECT_EQ(m.outputs % (4 * kClasses), 0);
  }
  EXPECT_EQ(mem[0].optimizer, 2 * psi);  // Adam's two moments, on replica 0 only
  EXPECT_EQ(mem[1].optimizer, 0);
  // Replica 0 also holds the gathered logits (12 x 5) and their gradient.
  EXPECT_EQ(mem[0].outputs, 4 * kClasses * (4 + 12 + 12));
  EXPECT_EQ(mem[1].outputs, 4 * kClasses * 4);
  EXPECT_GT(mem[0].total(), mem[1].total());
  // After the reduction only replica 0 keeps gradients.
  EXPECT_FALSE(dp->replica(1).parameters()[0].grad().defined());
  const std::string table = parallel::DataParallel::format_memory(mem);
  EXPECT_NE(table.find("replica 0 holds"), std::string::npos) << table;
  std::printf("%s", table.c_str());
}

TEST(DataParallel, RejectsMismatchedReplicas) {
  auto m = make_model("mlp", kModelSeed);
  EXPECT_THROW(parallel::DataParallel(m, [] { return make_model("cnn", 1); }, {.replicas = 2}), Error);
  EXPECT_THROW(parallel::DataParallel(m, nullptr, {.replicas = 2}), Error);
}

TEST(CheckpointPrefix, WrappedAndUnwrappedLoadIntoEachOther) {
  auto dp = wrap("mlp", 2);
  const auto wrapped = dp->state_dict();
  for (const auto& [name, t] : wrapped) EXPECT_EQ(name.rfind("module.", 0), 0u) << name;
  EXPECT_EQ(&parallel::unwrap(*dp), &dp->module());

  // wrapped checkpoint -> plain model
  auto plain = make_model("mlp", 777);
  EXPECT_EQ(parallel::load_state_dict_any(*plain, wrapped), 1);
  EXPECT_EQ(max_relative_error(plain->state_dict(), dp->module().state_dict(), nullptr), 0.0);

  // plain checkpoint -> wrapped model
  auto other = make_model("mlp", 555);
  auto dp2 = wrap("mlp", 2);
  EXPECT_EQ(parallel::load_state_dict_any(*dp2, other->state_dict()), -1);
  EXPECT_EQ(max_relative_error(dp2->module().state_dict(), other->state_dict(), nullptr), 0.0);

  // same form loads as is; a DataParallel of a DataParallel has two prefixes
  EXPECT_EQ(parallel::load_state_dict_any(*dp2, wrapped), 0);
  auto inner = wrap("mlp", 1);
  auto outer = std::make_shared<parallel::DataParallel>(inner, nullptr, parallel::DataParallelOptions{.replicas = 1});
  EXPECT_EQ(outer->state_dict()[0].first.rfind("module.module.", 0), 0u);
  EXPECT_EQ(parallel::load_state_dict_any(*outer, other->state_dict()), -2);
  EXPECT_EQ(parallel::load_state_dict_any(*plain, outer->state_dict()), 2);
  EXPECT_EQ(&parallel::unwrap(*outer), &inner->module());

  // helpers and errors
  EXPECT_EQ(parallel::strip_prefix(parallel::add_prefix(other->state_dict()))[0].first,
            other->state_dict()[0].first);
  EXPECT_THROW(parallel::strip_prefix(other->state_dict()), DataError);
  auto cnn = make_model("cnn", 1);
  EXPECT_THROW(parallel::load_state_dict_any(*cnn, wrapped), DataError);
}

}  // namespace
}  // namespace strata::testing
