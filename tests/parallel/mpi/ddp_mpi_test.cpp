// DDP equivalence over the mpi backend: run under `mpirun -np N` (ctest: N = 2, 3, 4).
// Every rank computes the single-process reference itself and compares its own DDP
// result with it; one compute thread per rank.
#include <gtest/gtest.h>

#include <strata/comm/mpi.h>
#include <strata/core/threads.h>
#include "equivalence.h"
#include "mpi_world.h"

namespace strata::testing {
namespace {

double cap_mib(int64_t floats) { return double(floats * 4) / (1024.0 * 1024.0); }

void check_equivalent(const EquivCase& c) {
  comm::ProcessGroup& g = *g_world;
  const nn::NamedTensors ref = reference_state(c, g.size());
  const nn::NamedTensors got = ddp_state(g, c);
  std::string worst;
  const double err = max_relative_error(got, ref, &worst);
  EXPECT_LT(err, 1e-5) << c.model << "/" << c.optim << " N=" << g.size() << " rank " << g.rank() << ": worst "
                       << worst;
}

TEST(DDPMpi, MlpSgd) { check_equivalent(EquivCase{}); }
TEST(DDPMpi, MlpAdam) { check_equivalent(EquivCase{.optim = "adam"}); }

TEST(DDPMpi, OddBucketsAndBucketViews) {
  EquivCase c{.ddp = {.bucket_cap_mb = cap_mib(37), .first_bucket_mb = cap_mib(11)}};
  check_equivalent(c);
  c.ddp.gradient_as_bucket_view = true;
  c.optim = "adam";
  check_equivalent(c);
}

TEST(DDPMpi, CnnBatchNorm) { check_equivalent(EquivCase{.model = "cnn_bn", .ddp = {.bucket_cap_mb = cap_mib(64)}}); }

TEST(DDPMpi, GptTiedEmbeddings) {
  check_equivalent(EquivCase{.model = "gpt", .ddp = {.bucket_cap_mb = cap_mib(100), .first_bucket_mb = cap_mib(30)}});
}

TEST(DDPMpi, NoSyncAccumulation) {
  check_equivalent(EquivCase{.batch = 24, .accum = 2, .ddp = {.bucket_cap_mb = cap_mib(37), .first_bucket_mb = cap_mib(11)}});
}

TEST(DDPMpi, CountedBytesAcrossTheBucketRebuild) {
  // On the ring (bytes counted message by message), every synchronized step all-reduces
  // each gradient element once: 2(N-1) x 4Ψ bytes over all ranks, before and after the
  // first step rebuilds the buckets in backward's order, which for the GPT moves slots.
  comm::ProcessGroup& g = *g_world;
  const comm::Algorithm saved = g.algorithm();
  g.set_algorithm(comm::Algorithm::ring);
  auto model = make_model("gpt", kModelSeed);
  auto ddp = parallel::apply_ddp(model, g, {.bucket_cap_mb = cap_mib(100), .first_bucket_mb = cap_mib(30)});
  auto opt = make_optimizer("adam", *model);
  auto offsets = [&] {
    std::vector<int64_t> o;
    for (const auto& slot : ddp->reducer().plan().slots) o.push_back(slot.offset);
    return o;
  };
  const std::vector<int64_t> guessed = offsets();
  const int64_t psi = model->num_parameters(), n = g.size();
  for (int step = 0; step < 3; ++step) {
    auto [x, y] = make_batch("gpt", 2 * n, step);
    const comm::OpStats before = g.stats()[comm::OpKind::all_reduce];
    backward(ddp->forward_with([&] { return batch_loss(*model, ops::narrow(x, 0, 2 * g.rank(), 2),
                                                       ops::narrow(y, 0, 2 * g.rank(), 2)); }));
    ddp->finalize();
    const comm::OpStats after = g.stats()[comm::OpKind::all_reduce];
    const int64_t mine = after.bytes_sent - before.bytes_sent;
    EXPECT_EQ(after.bytes_modelled - before.bytes_modelled, 0) << "step " << step;
    const double total = rank_mean(g, double(mine)) * double(n);
    EXPECT_EQ(int64_t(total), 2 * (n - 1) * 4 * psi) << "step " << step;
    opt->step();
    ddp->zero_grad();
  }
  EXPECT_NE(offsets(), guessed) << "the GPT's ready order differs from reverse registration";
  g.set_algorithm(saved);
}

TEST(DDPMpi, UnusedParameterIsNamed) {
  // The CNN's classifier is skipped: its parameters never get a gradient.
  comm::ProcessGroup& g = *g_world;
  auto model = make_model("cnn", kModelSeed);
  auto ddp = parallel::apply_ddp(model, g, {});
  auto [x, y] = make_batch("cnn", 4, 0);
  Tensor feats = ddp->forward_with([&] { return model->child("features")->forward(x); });
  backward(sum(feats));
  try {
    ddp->finalize();
    ADD_FAILURE() << "finalize accepted parameters without gradients";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("classifier.1.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  strata::set_num_threads(1);
  strata::testing::g_world = strata::comm::init_mpi_world(strata::comm::CommOptions{.timeout_s = 60}, &argc, &argv);
  const int rc = RUN_ALL_TESTS();
  strata::testing::g_world.reset();
  return rc;
}
