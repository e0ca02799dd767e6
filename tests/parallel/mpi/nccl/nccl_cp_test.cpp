// Context parallelism on CUDA over the nccl backend, run by ctest under `mpirun -np 2`
// with one GPU per rank (cuda:local_rank; the job reports SKIPPED otherwise): ring
// attention's output and gradient on each rank's GPU equal its rows of one process's
// causal attention on the CPU (with attention dropout too), its K/V and dK/dV blocks go
// over NCCL with the bytes of the formula, and a tiny GPT trained k steps at cp 2 (zigzag
// and plain splits, and with dropout) gives the single-process CPU run's losses, gradient
// norms and parameters.
//
// Tolerances (f32): the GPU sums in other orders than OpenBLAS (cuBLAS, the blockwise
// kernels' warps) and ring attention merges each row's key blocks in ring order, so
// outputs differ from the CPU's by rounding: ring attention 1e-5 (as on the cpu backends);
// losses and norms 1e-4 relative (as DDP over nccl); after 3 AdamW steps the parameters
// 2e-4 relative (Adam turns rounding noise of near-zero gradient entries into parameter
// differences of ~1e-5 relative: the cp test on the CPU allows 1e-4, the GPU's rounding
// adds a comparable share).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "../../../comm/mpi/nccl_world.h"
#include <strata/autograd/functions.h>
#include <strata/comm/mpi.h>
#include <strata/comm/nccl.h>
#include <strata/core/threads.h>
#include <strata/parallel/context/context_parallel.h>
#include <strata/tensor/cuda/runtime.h>
#include "cp_harness.h"

namespace strata::testing::cp {
namespace {

std::shared_ptr<comm::ProcessGroup> g_nccl;

constexpr double kLayerTol = 1e-5, kLossTol = 1e-4, kStateTol = 2e-4;

Tensor leaf(Tensor t) {
  t.set_requires_grad(true);
  return t;
}

// One process's attention on the CPU and its gradient for the loss sum(y * w): fused
// (p == 0) or, with dropout, softmax then dropout over the whole (B, H, T, T) as the GPT's
// unfused path draws it.
std::pair<Tensor, Tensor> cpu_attention(const Tensor& qkv0, const Tensor& w, int64_t hd, double p, Generator& gen) {
  Tensor qkv = leaf(ops::clone(qkv0));
  Tensor y;
  if (p == 0) {
    y = causal_attention(qkv, hd);
  } else {
    const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, H = C / hd;
    auto parts = split(qkv, {C, C, C}, -1);
    auto heads = [&](const Tensor& t) { return transpose(reshape(t, {B, T, H, hd}), 1, 2); };
    Tensor att = matmul(mul(heads(parts[0]), 1.0 / std::sqrt(double(hd))), transpose(heads(parts[1]), -1, -2));
    att = softmax(masked_fill(att, ops::causal_mask(T), -std::numeric_limits<double>::infinity()), -1);
    att = dropout(att, p, true, gen);
    y = reshape(contiguous(transpose(matmul(att, heads(parts[2])), 1, 2)), {B, T, C});
  }
  backward(sum(y * w));
  return {y.detach(), qkv.grad()};
}

TEST(ContextParallelNccl, RingAttentionOnTheGpuEqualsOneProcess) {
  comm::ProcessGroup& g = *g_nccl;
  const int n = g.size(), r = g.rank();
  const Device dev = g.device();
  const int64_t B = 2, T = 8 * n, H = 2, hd = 40, C = H * hd;  // hd 40: the lanes' share uneven
  Generator data(5);
  const Tensor qkv = ops::normal({B, T, 3 * C}, 0.0, 1.0, data), w = ops::normal({B, T, C}, 0.0, 1.0, data);
  for (double p : {0.0, 0.3})
    for (CpSplit split : {CpSplit::zigzag, CpSplit::plain}) {
      const std::string what = std::string(cp_split_name(split)) + (p > 0 ? " dropout" : "") + " rank " +
                               std::to_string(r) + " of " + std::to_string(n) + " on " + dev.str();
      Generator ref_gen(17), gen(17);
      const auto [y_ref, g_ref] = cpu_attention(qkv, w, hd, p, ref_gen);
      Tensor x = leaf(cp_shard(qkv, n, r, split).to(dev));
      Tensor y = ring_attention(x, hd, g_nccl, split, p, &gen);
      EXPECT_EQ(y.device(), dev) << what;
      EXPECT_EQ(gen.offset(), ref_gen.offset()) << what;
      st::expect_close(y.detach().to(kCPU), cp_shard(y_ref, n, r, split), kLayerTol, (what + " forward").c_str());
      backward(sum(y * cp_shard(w, n, r, split).to(dev)));
      ASSERT_TRUE(x.grad().defined()) << what;
      EXPECT_EQ(x.grad().device(), dev) << what;
      st::expect_close(x.grad().to(kCPU), cp_shard(g_ref, n, r, split), kLayerTol, (what + " backward").c_str());
    }
}

// The blocks travel over NCCL in device memory: the bytes the nccl group counts for one
// layer are the formula's.
TEST(ContextParallelNccl, KvBytesMatchTheFormula) {
  const std::shared_ptr<comm::ProcessGroup> g = g_nccl;
  const int n = g->size();
  const int64_t B = 2, T = 24, C = 8;
  Generator gen(3);
  Tensor x = leaf(cp_shard(ops::normal({B, T, 3 * C}, 0.0, 1.0, gen), n, g->rank(), CpSplit::zigzag).to(g->device()));
  const CpLayerBytes want = cp_layer_bytes(B, T, C, n, 4);
  g->reset_stats();
  Tensor y = ring_attention(x, 4, g, CpSplit::zigzag);
  EXPECT_EQ(g->stats()[comm::OpKind::batch_isend_irecv].bytes_sent, want.forward);
  backward(sum(y));
  EXPECT_EQ(g->stats()[comm::OpKind::batch_isend_irecv].bytes_sent, want.forward + want.backward);
}

// The harness's GPT at cp = world size on the GPUs through parallelize() (DDP over the
// dp x cp group on nccl), f32; then the whole model gathered to the CPU.
tpt::Run gpu_run(const CpCase& c, std::string* described) {
  std::shared_ptr<comm::ProcessGroup> world = g_nccl;
  const Device dev = world->device();
  const ParallelDims dims = ParallelDims{.dp = c.dp, .zero_stage = c.stage, .cp = c.cp}.resolve(world->size());
  const comm::DeviceMesh mesh(world, dims.mesh_shape());
  auto model = cp_model(c, st::kModelSeed + (c.dropout > 0 ? 0 : 77 * uint64_t(world->rank())));
  model->to(DType::f32);
  model->to(dev);
  auto pm = parallelize(model, mesh,
                        {.dims = dims, .ddp = {}, .fsdp_prefetch = true, .fsdp_wrap = {}, .tp_plan = TpPlan{},
                         .cp_split = c.split, .make_optimizer = tpt::adamw});
  *described = pm->describe();
  EXPECT_NE(pm->cp(), nullptr);
  tpt::Run out;
  const int64_t per = c.batch / c.dp;
  const int dr = mesh.rank("dp");
  for (int s = 0; s < c.steps; ++s) {
    auto [x, y] = st::make_batch("gpt", c.batch, s);
    Tensor xr = ops::narrow(x, 0, dr * per, per).to(dev), yr = ops::narrow(y, 0, dr * per, per).to(dev);
    Tensor loss = pm->forward_with([&] { return st::batch_loss(pm->module(), xr, yr); });
    EXPECT_EQ(loss.device(), dev);
    out.losses.push_back(st::rank_mean(*world, loss.item<double>()));
    backward(loss);
    pm->finalize();
    out.norms.push_back(pm->clip_grad_norm(c.clip));
    pm->step();
    pm->zero_grad();
  }
  const ParallelModel::FullParams full = pm->summon_full_params();
  for (const auto& [name, t] : pm->module().state_dict()) out.state.emplace_back(name, t.to(kCPU));
  if (world->rank() == 0) {
    auto [x, y] = st::make_batch("gpt", c.batch, c.steps);
    NoGradGuard no_grad;
    out.eval_loss = st::batch_loss(pm->module(), x.to(dev), y.to(dev)).item<double>();
  }
  return out;
}

void check_gpt(const CpCase& c) {
  tpt::Run want = reference(c);  // one process on the CPU, f32
  std::string described;
  const tpt::Run got = gpu_run(c, &described);
  const std::string what = name_of(c) + ": " + described + ", rank " + std::to_string(g_nccl->rank()) + " on " +
                           g_nccl->device().str();
  std::string worst;
  EXPECT_LT(st::max_relative_error(got.state, want.state, &worst), kStateTol) << what << " worst " << worst;
  if (g_nccl->rank() == 0) {
    EXPECT_NEAR(got.eval_loss, want.eval_loss, kLossTol * std::abs(want.eval_loss)) << what;
  }
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t s = 0; s < got.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], kLossTol * std::abs(want.losses[s])) << what << " loss " << s;
    EXPECT_NEAR(got.norms[s], want.norms[s], kLossTol * want.norms[s]) << what << " norm " << s;
  }
}

TEST(ContextParallelNccl, GptAtCpNEqualsOneProcessOnTheCpu) {
  const int n = g_nccl->size();
  if (8 % (2 * n) != 0) GTEST_SKIP() << "the test GPT's block of 8 needs 2 x cp to divide it";
  check_gpt({.cp = n, .f64 = false});
  check_gpt({.cp = n, .split = CpSplit::plain, .f64 = false});
}

// Token-wise dropout (masks drawn on the host for the global positions, applied on the
// GPU) and attention dropout (masks recomputed in the CUDA block kernels): the same
// masks as one process draws.
TEST(ContextParallelNccl, GptWithDropoutEqualsOneProcessOnTheCpu) {
  const int n = g_nccl->size();
  if (8 % (2 * n) != 0) GTEST_SKIP() << "the test GPT's block of 8 needs 2 x cp to divide it";
  check_gpt({.cp = n, .f64 = false, .dropout = 0.1});
}

}  // namespace
}  // namespace strata::testing::cp

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
  strata::testing::cp::g_nccl = comm::init_nccl_world(opts, device);
  if (mpi->rank() != 0) {  // one rank prints progress; failures print everywhere
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS() != 0;
  Tensor f = ops::full({1}, double(failed), DType::i32);
  mpi->all_reduce(f, comm::ReduceOp::max).wait();
  const int any = int(f.item<double>());
  if (mpi->rank() == 0 && any) std::fprintf(stderr, "some rank failed\n");
  strata::testing::cp::g_nccl.reset();
  mpi.reset();
  return any;
}
