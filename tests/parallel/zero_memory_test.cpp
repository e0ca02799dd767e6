// ZeRO's memory promises measured with the allocator while they matter, on N local ranks
// (threads sharing one allocator, so every bound is the sum of the per-rank bounds):
// gradient bytes at every gradient hook of backward (stages 2-3), gathered-parameter
// bytes through forward and backward (stage 3) and back to zero after the step, and the
// transient bytes of a stage-3 resume from a sharded checkpoint.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>

#include "comm/local.h"
#include "core/memory.h"
#include "parallel/checkpoint_io.h"
#include "zero_equivalence.h"

namespace strata::testing {
namespace {
namespace fs = std::filesystem;

int64_t cur(MemCategory c) { return cpu_memory().stats(c).current; }

void atomic_max(std::atomic<int64_t>& m, int64_t v) {
  int64_t prev = m.load();
  while (v > prev && !m.compare_exchange_weak(prev, v)) {
  }
}

// Four blocks, so that "everything at once" is clearly more than two units.
std::shared_ptr<nn::GPT> deep_gpt(uint64_t seed) {
  Generator gen(seed);
  return std::make_shared<nn::GPT>(
      nn::GPTConfig{.vocab = 16, .block_size = 8, .n_layer = 4, .n_head = 2, .n_embd = 32}, gen);
}

// Per-rank sizes of a ZeRO layout, in bytes (f32).
struct UnitBytes {
  int64_t shard = 0;        // this rank's slice of every unit
  int64_t max_unit = 0;     // the largest padded unit
  int64_t max_wrapped = 0;  // the largest padded unit other than unit 0 (stage 3's root)
  int64_t root = 0;         // unit 0 padded
};
UnitBytes unit_bytes(const parallel::ZeroDataParallel& z) {
  UnitBytes b;
  const auto units = z.units();
  for (size_t k = 0; k < units.size(); ++k) {
    b.shard += 4 * units[k].shard;
    b.max_unit = std::max(b.max_unit, 4 * units[k].padded());
    if (k > 0) b.max_wrapped = std::max(b.max_wrapped, 4 * units[k].padded());
  }
  b.root = units.empty() ? 0 : 4 * units[0].padded();
  return b;
}

void train_steps(parallel::ZeroDataParallel& z, nn::GPT& model, comm::ProcessGroup& g, int steps) {
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = make_batch("gpt", 2 * g.size(), s);
    Tensor xr = ops::narrow(x, 0, 2 * g.rank(), 2), yr = ops::narrow(y, 0, 2 * g.rank(), 2);
    backward(z.forward_with([&] { return model.loss(xr, yr); }));
    z.finalize();
    z.step();
    z.zero_grad();
  }
}

struct HookPeaks {
  std::atomic<int64_t> grads{0}, comm{0};
  std::atomic<int> samples{0};
  int64_t bound_grads = 0, bound_comm = 0, shard = 0;  // sums over ranks
};

// Trains 2 steps on n ranks at `stage`, sampling the grads and comm categories (above
// what was there before) at every parameter's post-accumulate hook (after ZeRO's own)
// and, when `forward_too`, at every block's forward pre/post hooks.
void watch(HookPeaks& peaks, int n, int stage, comm::Algorithm algo, bool forward_too) {
  const int64_t g0 = cur(MemCategory::grads), c0 = cur(MemCategory::comm);
  std::atomic<int64_t> bound_grads{0}, bound_comm{0}, shard{0};
  auto sample = [&] {
    atomic_max(peaks.grads, cur(MemCategory::grads) - g0);
    atomic_max(peaks.comm, cur(MemCategory::comm) - c0);
    ++peaks.samples;
  };
  comm::run_local(
      n,
      [&](comm::ProcessGroup& g) {
        auto model = deep_gpt(kModelSeed);
        // Stage 2: units of at most 16 KiB (c_fc's weight alone), 4 KiB first and last ones.
        parallel::ZeroOptions o{.stage = stage, .bucket_cap_mb = 16.0 / 1024, .wrap = {},
                                .first_unit_mb = 4.0 / 1024, .last_unit_mb = 4.0 / 1024};
        auto zero = parallel::apply_zero(model, g, o, optimizer_factory("adam"));
        const UnitBytes b = unit_bytes(*zero);
        bound_grads += b.shard + 2 * b.max_unit;
        bound_comm += b.root + 2 * b.max_wrapped;
        shard += b.shard;
        for (auto& [name, p] : model->named_parameters()) p.register_post_accumulate_grad_hook([&](Tensor&) { sample(); });
        if (forward_too)
          for (auto& [name, blk] : model->named_children())
            if (name == "h")
              for (auto& [i, m] : blk->named_children())
                m->register_forward_hooks([&](nn::Module&) { sample(); },
                                          [&](nn::Module&, const Tensor& out) {
                                            sample();
                                            return out;
                                          });
        train_steps(*zero, *model, g, 2);
        g.barrier().wait();
        EXPECT_EQ(cur(MemCategory::comm), c0) << "stage " << stage << ": comm bytes left after the step";
      },
      comm::CommOptions{.algorithm = algo, .timeout_s = 60});
  peaks.bound_grads = bound_grads;
  peaks.bound_comm = bound_comm;
  peaks.shard = shard;
}

TEST(ZeroMemory, Stage2And3GradientBytesDuringBackwardWithinShardPlusTwoUnits) {
  for (int stage : {2, 3})
    for (int n : {1, 2, 3}) {
      HookPeaks p;
      watch(p, n, stage, comm::Algorithm::ring, false);
      EXPECT_GT(p.samples.load(), 0);
      EXPECT_GT(p.grads.load(), p.shard) << "the hooks saw no gradient being staged";
      EXPECT_LE(p.grads.load(), p.bound_grads)
          << "stage " << stage << " N=" << n << ": gradient bytes " << p.grads << " > shard + 2 units "
          << p.bound_grads;
      std::printf("[zero memory] stage %d N=%d: peak gradient bytes at hooks %lld, shard %lld, bound %lld\n", stage,
                  n, (long long)p.grads.load(), (long long)p.shard, (long long)p.bound_grads);
    }
}

TEST(ZeroMemory, Stage3GatheredParamsWithinRootPlusTwoUnitsAndFreedAfterStep) {
  // native: the local backend's collectives allocate no scratch, so comm bytes are the
  // gathered parameters alone (ring's scratch would be counted too).
  for (int n : {1, 2, 3}) {
    HookPeaks p;
    watch(p, n, 3, comm::Algorithm::native, true);
    EXPECT_GT(p.comm.load(), 0) << "the hooks saw nothing gathered";
    EXPECT_LE(p.comm.load(), p.bound_comm)
        << "N=" << n << ": gathered bytes " << p.comm << " > root + 2 units " << p.bound_comm;
    std::printf("[zero memory] stage 3 N=%d: peak gathered bytes %lld, bound (root + 2 units) %lld\n", n,
                (long long)p.comm.load(), (long long)p.bound_comm);
  }
}

// A stage-3 resume from a sharded checkpoint holds at most this rank's part of the
// checkpoint (its parameter and optimizer-state slices, and the buffers) plus one unit
// above the memory the model needs before and after the load.
TEST(ZeroMemory, Stage3ResumeReadsOnlyThisRanksShard) {
  const fs::path dir = fs::temp_directory_path() / ("strata_zero_resume_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  for (int n : {2, 4}) {
    comm::run_local(n, [&](comm::ProcessGroup& g) {
      auto model = deep_gpt(kModelSeed);
      auto zero = parallel::apply_zero(model, g, {.stage = 3, .wrap = {}}, optimizer_factory("adam"));
      train_steps(*zero, *model, g, 1);
      const nlohmann::json meta = {{parallel::kOptimizerMetaKey, zero->optimizer().state_dict().scalars}};
      parallel::save_sharded(dir.string(), g, zero->state_pieces(), 3, meta);
    });
    // A stage-3 load issues no collective: the ranks load one at a time, so that each
    // one's transient bytes are measured alone on the shared allocator.
    comm::run_local(n, [&](comm::ProcessGroup& g) {
      auto model = deep_gpt(99 + uint64_t(g.rank()));
      auto zero = parallel::apply_zero(model, g, {.stage = 3, .wrap = {}}, optimizer_factory("adam"));
      train_steps(*zero, *model, g, 1);  // the optimizer state exists, as in a long run
      const UnitBytes b = unit_bytes(*zero);
      int64_t buffers = 0;
      for (auto& [nm, t] : model->named_buffers()) buffers += t.nbytes();
      const int64_t bound = 3 * b.shard + buffers + b.max_unit;  // parameter + exp_avg + exp_avg_sq slices
      parallel::ShardedCheckpointReader ck(dir.string());
      for (int r = 0; r < g.size(); ++r) {
        g.barrier().wait();
        if (g.rank() != r) continue;
        const int64_t before = cpu_memory().total_current();
        cpu_memory().reset_peaks();
        parallel::load_zero(ck, *zero, true);
        const int64_t transient = cpu_memory().total_peak() - std::max(before, cpu_memory().total_current());
        EXPECT_GT(transient, 0);
        EXPECT_LE(transient, bound) << "N=" << n << " rank " << r << ": a resume held " << transient
                                    << " bytes above the model, more than its shard + one unit " << bound;
        std::printf("[zero memory] stage 3 resume N=%d rank %d: transient %lld bytes, bound (shard + unit) %lld\n",
                    n, r, (long long)transient, (long long)bound);
      }
      g.barrier().wait();
      train_steps(*zero, *model, g, 1);  // the loaded state trains
    });
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace strata::testing
