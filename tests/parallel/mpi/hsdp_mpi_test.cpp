// HSDP over the mpi backend (mpirun -np 4: 2 shard groups of 2 consecutive ranks, ZeRO-3
// within each, the gradient slices averaged over the 2 replicas): trains as one process
// does, and every rank prints where its groups' ranks run and what each group sent. The
// shard group's all-gathers and reduce-scatters stay among ranks of one host when ranks
// fill hosts in order; the replicate group only all-reduces. A host is a network
// namespace (tests/multihost_hsdp.sh runs this on 2 of them x 2 ranks and sets
// STRATA_HSDP_HOSTS=2, which also requires the replicas to be on distinct hosts).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "mpi_world.h"
#include "zero_equivalence.h"

namespace strata::testing {
namespace {

// This process's network namespace: one per host of tests/netns_hosts.sh, and the same
// for every process of a plain machine.
double host_id() {
  struct stat st {};
  STRATA_CHECK(::stat("/proc/self/ns/net", &st) == 0, "[test] cannot stat /proc/self/ns/net");
  return double(st.st_ino);
}

std::vector<double> over(comm::ProcessGroup& g, double v) {
  return comm::all_gather_host(g, ops::full({1}, v, DType::f64)).to_vector<double>();
}

std::string list(const std::vector<double>& v) {
  std::string s;
  for (double x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(int64_t(x));
  }
  return s;
}

TEST(HsdpMpi, ShardGroupsStayOnAHostAndTrainAsOneProcess) {
  comm::ProcessGroup& g = *g_world;
  if (g.size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const int r = g.rank();
  // SGD: Adam would scale the attention key bias's gradient (zero but for rounding) up to lr.
  const EquivCase c{.model = "gpt", .optim = "sgd", .steps = 3, .batch = 8};
  std::vector<double> ref_losses;
  const nn::NamedTensors ref = reference_state(c, g.size(), &ref_losses);

  const comm::Algorithm saved = g.algorithm();
  g.set_algorithm(comm::Algorithm::ring);  // every byte counted as it is handed to the transport
  std::shared_ptr<comm::ProcessGroup> world(&g, [](comm::ProcessGroup*) {});
  const parallel::ParallelDims dims = parallel::ParallelDims{.zero_stage = 3, .dp_shard = 2}.resolve(g.size());
  auto model = make_model(c.model, r == 0 ? kModelSeed : kModelSeed + 77 * uint64_t(r));
  auto pm = parallel::parallelize(model, comm::DeviceMesh(world, dims.mesh_shape()),
                                  {.dims = dims, .ddp = {}, .fsdp_prefetch = true, .fsdp_wrap = {},
                                   .make_optimizer = optimizer_factory(c.optim)});
  g.set_algorithm(saved);
  parallel::ZeroDataParallel* z = pm->zero();
  ASSERT_NE(z, nullptr);
  ASSERT_NE(z->replicate_group(), nullptr);
  comm::ProcessGroup& shard = z->group();
  comm::ProcessGroup& rep = *z->replicate_group();
  const int64_t per = c.batch / g.size();
  std::vector<double> losses;
  for (int s = 0; s < c.steps; ++s) {
    auto [xb, yb] = make_batch(c.model, c.batch, s);
    const double loss = accumulate_micro_batches(*pm, *model, xb, yb, r, per, 1, true);
    pm->step();
    pm->zero_grad();
    losses.push_back(rank_mean(g, loss));
  }
  nn::NamedTensors state;
  {
    const auto full = pm->summon_full_params();
    for (const auto& [n, t] : model->state_dict()) state.emplace_back(n, ops::clone(t));
  }
  std::string worst;
  EXPECT_LT(max_relative_error(state, ref, &worst), 1e-5) << "rank " << r << ": worst " << worst;
  for (size_t s = 0; s < ref_losses.size(); ++s)
    EXPECT_NEAR(losses.at(s), ref_losses[s], 1e-5 * std::abs(ref_losses[s])) << "step " << s;

  const comm::CommStats ss = shard.stats(), rs = rep.stats();
  const int64_t ag = ss[comm::OpKind::all_gather].bytes_sent, rsc = ss[comm::OpKind::reduce_scatter].bytes_sent;
  const int64_t rep_ar = rs[comm::OpKind::all_reduce].bytes_sent;
  const int64_t rep_cross = rs[comm::OpKind::all_gather].bytes_sent + rs[comm::OpKind::reduce_scatter].bytes_sent;
  const double me = host_id();
  const std::vector<double> shard_ranks = over(shard, r), rep_ranks = over(rep, r);
  const std::vector<double> shard_hosts = over(shard, me), rep_hosts = over(rep, me);
  std::printf("rank %d host netns:%lld | shard group (world ranks %s) sent all_gather %lld B, reduce_scatter %lld B | "
              "replicate group (world ranks %s, hosts %s) sent all_reduce %lld B, all_gather + reduce_scatter %lld B\n",
              r, (long long)me, list(shard_ranks).c_str(), (long long)ag, (long long)rsc, list(rep_ranks).c_str(),
              list(rep_hosts).c_str(), (long long)rep_ar, (long long)rep_cross);
  std::fflush(stdout);
  EXPECT_EQ(shard_ranks, (std::vector<double>{double(r / 2 * 2), double(r / 2 * 2 + 1)}));
  EXPECT_EQ(rep_ranks, (std::vector<double>{double(r % 2), double(r % 2 + 2)}));
  for (double h : shard_hosts) EXPECT_EQ(h, me) << "rank " << r << ": a shard group spans hosts";
  EXPECT_GT(ag, 0);
  EXPECT_GT(rsc, 0);
  EXPECT_GT(rep_ar, 0);
  EXPECT_EQ(rep_cross, 0) << "a parameter gather or gradient reduce-scatter ran over the replicas";
  if (const char* h = std::getenv("STRATA_HSDP_HOSTS"); h && std::atoi(h) == 2) {
    EXPECT_NE(rep_hosts[0], rep_hosts[1]) << "rank " << r << ": the replicas share a host";
  }
}

}  // namespace
}  // namespace strata::testing
