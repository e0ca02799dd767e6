// ZeRO over the mpi backend (mpirun -np N, one process per rank, one thread each):
// stages 1-3 equal the single-process run, bytes sent per step match theory, and the
// static bytes each process holds by category match the ZeRO formulas within 5%.
#include <gtest/gtest.h>

#include "core/memory.h"
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

}  // namespace
}  // namespace strata::testing
