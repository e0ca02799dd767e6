// ZeRO over the mpi backend (mpirun -np N, one process per rank, one thread each):
// stages 1-3 equal the single-process run, bytes sent per step match theory, the
// static bytes each process holds by category match the ZeRO formulas within 5%, and,
// with one allocator per process, each rank's bytes during backward and during a
// stage-3 resume stay within its own bounds.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include <strata/core/memory.h>
#include "mpi_world.h"
#include "zero_equivalence.h"

namespace strata::testing {
namespace {

void check_equivalent(const ZeroCase& zc) {
  comm::ProcessGroup& g = *g_world;
  std::vector<double> ref_norms;
  const nn::NamedTensors ref =
      zc.clip > 0 ? reference_state_clipped(zc, &ref_norms) : reference_state(zc.base, g.size());
  // Bytes on a counted algorithm: ring hands every byte it sends to the transport.
  const comm::Algorithm saved = g.algorithm();
  g.set_algorithm(comm::Algorithm::ring);
  const ZeroResult got = zero_state(g, zc);
  g.set_algorithm(saved);
  std::string worst;
  const double err = max_relative_error(got.state, ref, &worst);
  EXPECT_LT(err, 1e-5) << zc.base.model << "/" << zc.base.optim << " stage " << zc.stage << " N=" << g.size()
                       << " rank " << g.rank() << ": worst " << worst;
  for (size_t s = 0; s < ref_norms.size(); ++s) EXPECT_NEAR(got.norms.at(s), ref_norms[s], 1e-5 * ref_norms[s]);
  const int64_t n = g.size();
  const int64_t unit = (n - 1) * (got.padded_elems / n) * 4;
  // Stage 3 gathers for every micro-batch's forward and backward, reduces once.
  EXPECT_EQ(got.bytes_per_step, (zc.stage == 3 ? 2 * zc.base.accum + 1 : 2) * unit) << "stage " << zc.stage;
}

TEST(ZeroMpi, MlpAdamStages123) {
  for (int stage = 1; stage <= 3; ++stage) check_equivalent(ZeroCase{.base = {.optim = "adam"}, .stage = stage});
}

TEST(ZeroMpi, GptStages123WithClipping) {
  for (int stage = 1; stage <= 3; ++stage) check_equivalent(ZeroCase{.base = {.model = "gpt"}, .stage = stage, .clip = 0.5});
}

TEST(ZeroMpi, NoSyncAccumulation) {
  check_equivalent(ZeroCase{.base = {.batch = 24, .accum = 2}, .stage = 2});
  check_equivalent(ZeroCase{.base = {.model = "gpt", .batch = 24, .accum = 2}, .stage = 3});
}

// Static bytes per rank after a step: params, grads and Adam state by category.
TEST(ZeroMpi, StaticMemoryMatchesFormulas) {
  comm::ProcessGroup& g = *g_world;
  const double n = g.size();
  for (int stage = 1; stage <= 3; ++stage) {
    auto cur = [](MemCategory c) { return double(cpu_memory().stats(c).current); };
    const double p0 = cur(MemCategory::params), g0 = cur(MemCategory::grads), o0 = cur(MemCategory::optimizer);
    {
      Generator gen(7);
      auto model = std::make_shared<nn::GPT>(
          nn::GPTConfig{.vocab = 64, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 64}, gen);
      const double psi = double(model->num_parameters());
      auto zero = parallel::apply_zero(model, g, {.stage = stage, .wrap = {}}, optimizer_factory("adam"));
      auto [x, y] = make_batch("gpt", 4, 0);
      Tensor idx = ops::narrow(x, 0, g.rank(), 1), tgt = ops::narrow(y, 0, g.rank(), 1);
      for (int s = 0; s < 2; ++s) {
        backward(zero->forward_with([&] { return model->loss(idx, tgt); }));
        zero->finalize();
        zero->step();
        zero->zero_grad();
      }
      const double params = cur(MemCategory::params) - p0, grads = cur(MemCategory::grads) - g0,
                   optst = cur(MemCategory::optimizer) - o0;
      const double want_p = stage == 3 ? 4 * psi / n : 4 * psi;
      const double want_g = stage == 1 ? 4 * psi : 4 * psi / n;
      const double want_o = 8 * psi / n;
      EXPECT_NEAR(params / want_p, 1.0, 0.05) << "stage " << stage << " params " << params << " vs " << want_p;
      EXPECT_NEAR(grads / want_g, 1.0, 0.05) << "stage " << stage << " grads " << grads << " vs " << want_g;
      EXPECT_NEAR(optst / want_o, 1.0, 0.05) << "stage " << stage << " optimizer " << optst << " vs " << want_o;
      EXPECT_NEAR((params + grads + optst) / (want_p + want_g + want_o), 1.0, 0.05);
    }
  }
}

// Per process: gradient bytes at every hook (stages 2-3, ring) within shard + L + 1 units
// (stage 3: + the root unit);
// stage 3's gathered bytes (native: no collective scratch) within root + 2 units during
// forward and backward, and none left after the step.
TEST(ZeroMpi, BytesDuringBackwardWithinBounds) {
  comm::ProcessGroup& g = *g_world;
  const comm::Algorithm saved = g.algorithm();
  for (int stage : {2, 3}) {
    g.set_algorithm(comm::Algorithm::ring);
    MemoryWatch w;
    const UnitBytes b = watch_rank(g, stage, false, w);
    EXPECT_GT(w.grads.load(), b.shard);
    EXPECT_LE(w.grads.load(), b.grads_bound(stage)) << "stage " << stage << " rank " << g.rank();
    std::printf("[zero mpi memory] stage %d rank %d: peak gradient bytes at hooks %lld, shard %lld, bound %lld\n",
                stage, g.rank(), (long long)w.grads.load(), (long long)b.shard, (long long)b.grads_bound(stage));
  }
  g.set_algorithm(comm::Algorithm::native);
  MemoryWatch w;
  const UnitBytes b = watch_rank(g, 3, true, w);
  EXPECT_GT(w.comm.load(), 0);
  EXPECT_LE(w.comm.load(), b.gathered_bound()) << "rank " << g.rank();
  std::printf("[zero mpi memory] stage 3 rank %d: peak gathered bytes %lld, bound (root + 2 units) %lld\n", g.rank(),
              (long long)w.comm.load(), (long long)b.gathered_bound());
  EXPECT_EQ(mem_now(MemCategory::comm), w.c0) << "rank " << g.rank() << ": gathered bytes left after the step";
  g.set_algorithm(saved);
}

TEST(ZeroMpi, Stage3ResumeHoldsShardPlusOneUnit) {
  comm::ProcessGroup& g = *g_world;
  // One directory for the job: rank 0's pid.
  const int64_t pid = int64_t(comm::all_reduce_host(g, ops::full({1}, g.rank() == 0 ? double(::getpid()) : 0.0,
                                                                  DType::f64), comm::ReduceOp::sum).item<double>());
  const auto dir = std::filesystem::temp_directory_path() / ("strata_zero_mpi_resume_" + std::to_string(pid));
  save_trained_stage3(g, dir.string());
  const ResumeBytes r = measure_resume(g, dir.string());
  EXPECT_GT(r.transient, 0);
  EXPECT_LE(r.transient, r.bound) << "rank " << g.rank() << " of " << g.size();
  std::printf("[zero mpi memory] stage 3 resume rank %d of %d: transient %lld bytes, bound (shard + unit) %lld\n",
              g.rank(), g.size(), (long long)r.transient, (long long)r.bound);
  g.barrier().wait();
  if (g.rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::testing
