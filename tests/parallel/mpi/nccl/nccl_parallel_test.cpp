// DDP and ZeRO stages 1-3 over the nccl backend, run by ctest under `mpirun -np N` with
// one GPU per rank (cuda:local_rank; the job reports SKIPPED otherwise): k steps of an MLP
// and a tiny GPT give the loss per step and the parameters of the single-process CPU run
// on the full batch (equivalence.h / zero_equivalence.h, f32 tolerance for cuBLAS vs
// OpenBLAS), and DDP puts its first bucket's all-reduce on the wire while backward runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "../../../comm/mpi/nccl_world.h"
#include <strata/comm/mpi.h>
#include <strata/comm/nccl.h>
#include <strata/core/threads.h>
#include <strata/tensor/cuda/runtime.h>
#include "nccl_test_world.h"
#include "zero_equivalence.h"

namespace strata::testing {
namespace {

// f32 on the GPU (cuBLAS, CUDA's libm) against f32 on the CPU (OpenBLAS), 3 steps.
constexpr double kTol = 1e-4;

double cap_mib(int64_t floats) { return double(floats * 4) / (1024.0 * 1024.0); }

std::string where(const EquivCase& c) {
  return c.model + "/" + c.optim + " N=" + std::to_string(g_nccl->size()) + " rank " +
         std::to_string(g_nccl->rank()) + " on " + g_nccl->device().str();
}

void expect_losses(const std::vector<double>& got, const std::vector<double>& ref, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t s = 0; s < ref.size(); ++s)
    EXPECT_NEAR(got[s], ref[s], kTol * std::abs(ref[s])) << what << ": loss of step " << s;
}

void expect_state(const nn::NamedTensors& got, const nn::NamedTensors& ref, const std::string& what) {
  for (const auto& [name, t] : got) EXPECT_EQ(t.device(), g_nccl->device()) << what << ": " << name;
  std::string worst;
  EXPECT_LT(max_relative_error(got, ref, &worst), kTol) << what << ": worst " << worst;
}

void check_ddp(EquivCase c) {
  comm::ProcessGroup& g = *g_nccl;
  c.device = g.device();
  std::vector<double> ref_losses, losses;
  const nn::NamedTensors ref = reference_state(c, g.size(), &ref_losses);
  const nn::NamedTensors got = ddp_state(g, c, &losses);
  expect_losses(losses, ref_losses, where(c));
  expect_state(got, ref, where(c));
}

TEST(DDPNccl, MlpSgdSeveralBuckets) {
  check_ddp(EquivCase{.ddp = {.bucket_cap_mb = cap_mib(37), .first_bucket_mb = cap_mib(11)}});
}

TEST(DDPNccl, MlpAdamBucketViews) {
  check_ddp(EquivCase{.optim = "adam",
                      .ddp = {.bucket_cap_mb = cap_mib(37), .first_bucket_mb = cap_mib(11), .gradient_as_bucket_view = true}});
}

TEST(DDPNccl, GptTiedEmbeddings) {
  check_ddp(EquivCase{.model = "gpt", .ddp = {.bucket_cap_mb = cap_mib(100), .first_bucket_mb = cap_mib(30)}});
}

TEST(DDPNccl, NoSyncAccumulation) {
  check_ddp(EquivCase{.batch = 24, .accum = 2, .ddp = {.bucket_cap_mb = cap_mib(37), .first_bucket_mb = cap_mib(11)}});
}

// Buckets are all-reduced while backward still runs: when the middle layer's weight
// gradient arrives, the first layer's gradients do not exist yet, and every bucket
// holding only later layers (the first bucket among them) has been handed to the group.
TEST(DDPNccl, FirstBucketLaunchedWhileBackwardRuns) {
  comm::ProcessGroup& g = *g_nccl;
  auto m = make_model("mlp", kModelSeed);
  m->to(g.device());
  // 10-float buckets after a 5-float first one (exactly the last layer's bias).
  auto ddp = parallel::apply_ddp(m, g, {.bucket_cap_mb = 40.0 / 1048576, .first_bucket_mb = 20.0 / 1048576});
  // Parameters: 0 net.1.weight, 1 net.1.bias, 2 net.3.weight, 3 net.3.bias, 4 net.5.weight, 5 net.5.bias.
  ASSERT_EQ(ddp->reducer().param_names()[2], "net.3.weight");
  const auto& plan = ddp->reducer().plan();
  const int64_t total = int64_t(plan.buckets.size());
  const int64_t only_later = buckets_only_from(plan, 2);  // layers 2 and 3: ready once net.3.weight is
  ASSERT_GT(only_later, 5);
  ASSERT_LT(only_later, total);
  ASSERT_EQ(plan.buckets[0].params, std::vector<int>{5});
  int64_t launched_mid = -1;
  bool first_layer_done = true;
  Tensor w = m->parameter("net.3.weight");
  w.register_post_accumulate_grad_hook([&](Tensor&) {
    launched_mid = ddp->reducer().launched_buckets();
    first_layer_done = m->parameter("net.1.weight").grad().defined();
  });
  auto [xb, yb] = make_batch("mlp", 8, 0);
  backward(cross_entropy(ddp->forward(xb.to(g.device())), yb.to(g.device())));
  EXPECT_FALSE(first_layer_done) << "the hook ran after backward reached the first layer";
  EXPECT_EQ(launched_mid, only_later);
  ddp->finalize();
  const parallel::ReducerStats& st = ddp->reducer().last_stats();
  EXPECT_EQ(st.buckets, total);
  EXPECT_LE(st.launched_at_s[0], st.finalize_at_s);
  // The all-reduces ran on the GPU: the averaged gradient is on the group's device and
  // equal on every rank (each rank fed the same batch, so it is also the local one).
  Tensor grad = m->parameter("net.5.bias").grad();
  EXPECT_EQ(grad.device(), g.device());
  Tensor mx = ops::clone(grad), mn = ops::clone(grad);
  g.all_reduce(mx, comm::ReduceOp::max).wait();
  g.all_reduce(mn, comm::ReduceOp::min).wait();
  EXPECT_EQ(mx.to_vector<float>(), mn.to_vector<float>());
}

void check_zero(ZeroCase zc) {
  comm::ProcessGroup& g = *g_nccl;
  zc.base.device = g.device();
  const std::string what = where(zc.base) + " stage " + std::to_string(zc.stage);
  std::vector<double> ref_norms, ref_losses, losses;
  const nn::NamedTensors ref = reference_state_clipped(zc, &ref_norms, &ref_losses);
  const ZeroResult got = zero_state(g, zc, &losses);
  expect_losses(losses, ref_losses, what);
  expect_state(got.state, ref, what);
  ASSERT_EQ(got.norms.size(), ref_norms.size()) << what;
  for (size_t s = 0; s < ref_norms.size(); ++s)
    EXPECT_NEAR(got.norms[s], ref_norms[s], kTol * ref_norms[s]) << what << ": grad norm of step " << s;
  // Bytes sent per step (nccl-tests bus model), as on the cpu backends.
  const int64_t n = g.size();
  const int64_t unit = (n - 1) * (got.padded_elems / n) * 4;
  EXPECT_EQ(got.bytes_per_step, (zc.stage == 3 ? 2 * zc.base.accum + 1 : 2) * unit) << what;
}

TEST(ZeroNccl, MlpAdamStages123) {
  for (int stage = 1; stage <= 3; ++stage) check_zero(ZeroCase{.base = {.optim = "adam"}, .stage = stage});
}

TEST(ZeroNccl, GptStages123WithClipping) {
  for (int stage = 1; stage <= 3; ++stage)
    check_zero(ZeroCase{.base = {.model = "gpt"}, .stage = stage, .clip = 0.5});
}

TEST(ZeroNccl, NoSyncAccumulation) {
  check_zero(ZeroCase{.base = {.batch = 24, .accum = 2}, .stage = 2});
  check_zero(ZeroCase{.base = {.model = "gpt", .batch = 24, .accum = 2}, .stage = 3});
}

}  // namespace
}  // namespace strata::testing

int main(int argc, char** argv) {
  using namespace strata;
  ::testing::InitGoogleTest(&argc, argv);
  set_num_threads(1);
  const comm::CommOptions opts{.timeout_s = 60};
  std::shared_ptr<comm::ProcessGroup> mpi = comm::init_mpi_world(opts, &argc, &argv);
  if (const std::string why = comm::testing::gpu_shortage(*mpi); !why.empty()) {
    if (mpi->rank() == 0) std::printf("SKIPPED: needs one GPU per rank: %s\n", why.c_str());
    mpi.reset();
    return 0;
  }
  const int device = comm::local_rank();
  cuda::DeviceGuard current(device);  // stray CUDA calls of this rank go to its own GPU
  strata::testing::g_nccl = comm::init_nccl_world(opts, device);
  if (mpi->rank() != 0) {  // one rank prints progress; failures print everywhere
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS() != 0;
  Tensor f = ops::full({1}, double(failed), DType::i32);
  mpi->all_reduce(f, comm::ReduceOp::max).wait();
  const int any = int(f.item<double>());
  if (mpi->rank() == 0 && any) std::fprintf(stderr, "some rank failed\n");
  strata::testing::g_nccl.reset();
  mpi.reset();
  return any;
}
