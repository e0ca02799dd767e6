// ZeRO's memory promises measured with the allocator while they matter, on N local ranks
// (threads sharing one allocator, so every bound is the sum of the per-rank bounds):
// gradient bytes at every gradient hook of backward (stages 2-3), gathered-parameter
// bytes through forward and backward (stage 3) and back to zero after the step, and the
// transient bytes of a stage-3 resume from a sharded checkpoint.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>

#include <strata/comm/local.h>
#include <strata/core/memory.h>
#include "zero_equivalence.h"

namespace strata::testing {
namespace {
namespace fs = std::filesystem;

struct HookPeaks {
  MemoryWatch w;
  int64_t bound_grads = 0, bound_comm = 0, shard = 0;  // sums over ranks
};

// watch_rank() on n local ranks: every rank samples the shared allocator, so the bounds
// are the sums of the ranks' bounds.
void watch(HookPeaks& peaks, int n, int stage, comm::Algorithm algo, bool forward_too) {
  std::atomic<int64_t> bound_grads{0}, bound_comm{0}, shard{0};
  comm::run_local(
      n,
      [&](comm::ProcessGroup& g) {
        const UnitBytes b = watch_rank(g, stage, forward_too, peaks.w);
        bound_grads += b.grads_bound(stage);
        bound_comm += b.gathered_bound();
        shard += b.shard;
        g.barrier().wait();
        EXPECT_EQ(mem_now(MemCategory::comm), peaks.w.c0) << "stage " << stage << ": comm bytes left after the step";
      },
      comm::CommOptions{.algorithm = algo, .timeout_s = 60});
  peaks.bound_grads = bound_grads;
  peaks.bound_comm = bound_comm;
  peaks.shard = shard;
}

// Shard + L staged units + the one being filled (L = reduce_scatter_depth, 2); stage 3
// adds the root unit (see UnitBytes::grads_bound). The exact peak: HalfStatesLayouts.*.
// From N = 2, where the bound is below what the ranks hold if each keeps its whole
// gradients beside its slice (at N = 1 the slice is the whole model, and no peak could
// exceed the bound).
TEST(ZeroMemory, Stage2And3GradientBytesDuringBackwardWithinShardPlusTwoUnits) {
  for (int stage : {2, 3})
    for (int n : {2, 3}) {
      HookPeaks p;
      watch(p, n, stage, comm::Algorithm::ring, false);
      // p.shard sums the ranks' slices: one whole model's gradient bytes (padded).
      ASSERT_LT(p.bound_grads, (n + 1) * p.shard) << "stage " << stage << " N=" << n << ": the bound allows whole gradients";
      EXPECT_GT(p.w.samples.load(), 0);
      EXPECT_GT(p.w.grads.load(), p.shard) << "the hooks saw no gradient being staged";
      EXPECT_LE(p.w.grads.load(), p.bound_grads)
          << "stage " << stage << " N=" << n << ": gradient bytes " << p.w.grads << " > shard + (L + 1) units (+ root) "
          << p.bound_grads;
      std::printf("[zero memory] stage %d N=%d: peak gradient bytes at hooks %lld, shard %lld, bound %lld\n", stage,
                  n, (long long)p.w.grads.load(), (long long)p.shard, (long long)p.bound_grads);
    }
}

TEST(ZeroMemory, Stage3GatheredParamsWithinRootPlusTwoUnitsAndFreedAfterStep) {
  // native: the local backend's collectives allocate no scratch, so comm bytes are the
  // gathered parameters alone (ring's scratch would be counted too).
  for (int n : {1, 2, 3}) {
    HookPeaks p;
    watch(p, n, 3, comm::Algorithm::native, true);
    EXPECT_GT(p.w.comm.load(), 0) << "the hooks saw nothing gathered";
    EXPECT_LE(p.w.comm.load(), p.bound_comm)
        << "N=" << n << ": gathered bytes " << p.w.comm << " > root + 2 units " << p.bound_comm;
    std::printf("[zero memory] stage 3 N=%d: peak gathered bytes %lld, bound (root + 2 units) %lld\n", n,
                (long long)p.w.comm.load(), (long long)p.bound_comm);
  }
}

// A stage-3 resume from a sharded checkpoint holds at most this rank's part of the
// checkpoint plus one unit above what the model holds before and after the load.
TEST(ZeroMemory, Stage3ResumeReadsOnlyThisRanksShard) {
  const fs::path dir = fs::temp_directory_path() / ("strata_zero_resume_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  for (int n : {2, 4}) {
    comm::run_local(n, [&](comm::ProcessGroup& g) { save_trained_stage3(g, dir.string()); });
    comm::run_local(n, [&](comm::ProcessGroup& g) {
      const ResumeBytes r = measure_resume(g, dir.string());
      EXPECT_GT(r.transient, 0);
      EXPECT_LE(r.transient, r.bound) << "N=" << n << " rank " << g.rank() << ": a resume held " << r.transient
                                      << " bytes above the model, more than its shard + one unit " << r.bound;
      std::printf("[zero memory] stage 3 resume N=%d rank %d: transient %lld bytes, bound (shard + unit) %lld\n", n,
                  g.rank(), (long long)r.transient, (long long)r.bound);
    });
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace strata::testing
