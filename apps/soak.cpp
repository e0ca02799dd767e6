// strata bench soak: see soak.h. The probes run inside Trainer::train() (after_step), so
// the run is exactly `strata train`'s loop: steps, logging, evaluation, checkpoint writes
// and rotation.
#include "apps/soak.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "apps/run_dir.h"
#include "apps/trainer.h"
#include <strata/comm/local.h>
#include <strata/comm/mpi.h>
#include <strata/core/config.h>
#include <strata/core/error.h>
#include <strata/core/memory.h>
#include <strata/core/generator_override.h>
#include <strata/tensor/cpu_allocator.h>
#include <strata/tensor/ops.h>

namespace strata::apps {
namespace {

constexpr int kFields = 7;  // step, tensor peak, tensor current, reserved peak, reserved, rss, rss peak

// VmRSS and VmHWM of this process, in bytes.
std::pair<int64_t, int64_t> rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  int64_t rss = 0, hwm = 0;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    int64_t kib = 0;
    ls >> key >> kib;
    if (key == "VmRSS:") rss = kib * 1024;
    if (key == "VmHWM:") hwm = kib * 1024;
  }
  return {rss, hwm};
}

void probe(int64_t step, std::vector<int64_t>& out) {
  const MemoryTracker& m = cpu_memory();
  const CpuAllocatorStats s = cpu_allocator_stats();
  const auto [rss, hwm] = rss_bytes();
  for (int64_t v : {step, m.total_peak(), m.total_current(), s.peak_reserved_bytes, s.reserved_bytes, rss, hwm})
    out.push_back(v);
}

// The caching allocator's OS allocations per size class since `before`, as flat
// {class bytes, new blocks} pairs, at most kGrewPairs of them (a fixed size, gathered
// over mpi); zeros pad.
constexpr int kGrewPairs = 8;
std::vector<int64_t> classes_grown(const std::vector<std::pair<int64_t, int64_t>>& before) {
  std::vector<int64_t> out;
  for (const auto& [cls, n] : cpu_os_allocs_by_class()) {
    int64_t was = 0;
    for (const auto& [c, m] : before)
      if (c == cls) was = m;
    if (n > was && out.size() < 2 * size_t(kGrewPairs)) {
      out.push_back(cls);
      out.push_back(n - was);
    }
  }
  out.resize(2 * size_t(kGrewPairs), 0);
  return out;
}

// Trains one rank; `record` (or null) receives its probes, then the size classes the
// cache obtained new blocks of after the probe step (classes_grown).
void train_rank(const TrainConfig& cfg, std::shared_ptr<comm::ProcessGroup> world, int64_t every, int64_t probe_step,
                std::vector<int64_t>* record, std::vector<int64_t>* grew) {
  TrainerOptions opts{.verbose = false, .write_files = true};
  opts.world = std::move(world);
  std::vector<std::pair<int64_t, int64_t>> at_probe;
  if (record)
    opts.after_step = [every, probe_step, record, &at_probe](int64_t step) {
      if (step % every == 0) probe(step, *record);
      if (step == probe_step) at_probe = cpu_os_allocs_by_class();
    };
  Trainer trainer(cfg, opts);
  trainer.train();
  if (grew) *grew = classes_grown(at_probe);
}

double mib(int64_t b) { return double(b) / double(1 << 20); }

// Prints one block of rows (one rank's, or the process's) and returns whether it is flat:
// the tensor peak always; the reserved peak too when `reserved_counts` (one rank per
// process: with thread-ranks the cache's size classes depend on how the ranks' steps
// interleave, so its reserve may still creep up without any tensor being leaked).
bool report(const std::string& who, const std::vector<int64_t>& rows, const int64_t* grew, int64_t probe_step,
            bool reserved_counts) {
  std::printf("%s\n| step | tensor peak MiB | tensor now MiB | reserved peak MiB | reserved now MiB | RSS MiB | RSS peak MiB |\n"
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
              who.c_str());
  const int64_t* at_probe = nullptr;
  for (size_t i = 0; i + kFields <= rows.size(); i += kFields) {
    const int64_t* r = &rows[i];
    std::printf("| %lld | %.3f | %.3f | %.3f | %.3f | %.1f | %.1f |\n", (long long)r[0], mib(r[1]), mib(r[2]), mib(r[3]),
                mib(r[4]), mib(r[5]), mib(r[6]));
    if (r[0] == probe_step) at_probe = r;
  }
  STRATA_CHECK(at_probe && rows.size() >= size_t(kFields), "[bench soak] no probe at step ", probe_step);
  const int64_t* last = &rows[rows.size() - kFields];
  const bool flat = last[1] == at_probe[1] && (!reserved_counts || last[3] == at_probe[3]);
  std::printf("%s: tensor peak %lld B at step %lld, %lld B at step %lld (%+lld); reserved peak %lld B -> %lld B (%+lld); "
              "RSS %.1f -> %.1f MiB: %s\n\n",
              who.c_str(), (long long)at_probe[1], (long long)probe_step, (long long)last[1], (long long)last[0],
              (long long)(last[1] - at_probe[1]), (long long)at_probe[3], (long long)last[3],
              (long long)(last[3] - at_probe[3]), mib(at_probe[5]), mib(last[5]),
              flat ? "flat" : "GREW");
  // Which size classes the reserve grew in: the cache had no free block of the class
  // when one was asked for, so more blocks of it were live at once than ever before.
  std::string classes;
  for (int i = 0; i < kGrewPairs && grew[2 * i] > 0; ++i)
    classes += (i ? ", " : "") + std::to_string(grew[2 * i]) + " B x " + std::to_string(grew[2 * i + 1]);
  if (!classes.empty())
    std::printf("%s: new OS blocks after step %lld (size class x blocks): %s\n\n", who.c_str(), (long long)probe_step,
                classes.c_str());
  return flat;
}

}  // namespace

int bench_soak(const SoakArgs& a) {
  if (a.probe <= 0 || a.probe % a.checkpoint_every != 0 || a.probe >= a.steps || a.steps % a.checkpoint_every != 0)
    STRATA_THROW(ConfigError, "bench soak: --probe (", a.probe, ") and --steps (", a.steps,
                 ") must be multiples of --checkpoint-every (", a.checkpoint_every, "), with probe < steps");
  const std::string e = std::to_string(a.checkpoint_every);
  std::vector<std::string> sets{"train.max_steps=" + std::to_string(a.steps),
                                "train.checkpoint_every=" + e, "train.eval_every=" + e, "train.log_every=" + e,
                                "train.keep_checkpoints=2", "train.save_final=false",
                                "run.threads=1"};
  if (!a.dir.empty()) sets.push_back("run.dir=" + a.dir);
  sets.insert(sets.end(), a.sets.begin(), a.sets.end());
  TrainConfig cfg = TrainConfig::load(a.config, sets);
  cfg.train.resume.clear();  // a fresh run
  // As `strata train`: rank 0 holds the directory, and an earlier run in it is not
  // overwritten (its checkpoints rotated away) unless asked.
  const bool rank0 = comm::launcher_rank() == 0;
  std::optional<RunDirLock> lock;
  if (rank0) lock.emplace(cfg.run.dir);
  if (holds_earlier_run(cfg.run.dir)) {
    if (!a.overwrite)
      config_fail("run.dir", "'" + cfg.run.dir + "' holds an earlier run (metrics.jsonl / checkpoints/) whose checkpoints "
                             "the soak would rotate away: give a new --dir, or --overwrite to start over");
    if (rank0) remove_earlier_run(cfg.run.dir);
  }

  if (a.backend == "local") {
    std::vector<int64_t> rows, grew;
    // Each rank thread gets a default generator of its own, as each process has under
    // mpirun (the Trainer seeds it; the ranks' threads must not share one).
    comm::run_local(
        a.ranks,
        [&](comm::ProcessGroup& g) {
          Generator own(cfg.run.seed);
          DefaultGeneratorOverride use(own);
          // Non-owning: the group outlives the Trainer, which lives in this call.
          std::shared_ptr<comm::ProcessGroup> world(std::shared_ptr<void>(), &g);
          train_rank(cfg, world, a.checkpoint_every, a.probe, g.rank() == 0 ? &rows : nullptr,
                     g.rank() == 0 ? &grew : nullptr);
        },
        cfg.comm);
    std::printf("soak: %s, %d ranks (local backend: threads of one process), %lld steps, checkpoint every %lld\n\n",
                a.config.c_str(), a.ranks, (long long)a.steps, (long long)a.checkpoint_every);
    return report("process (all ranks)", rows, grew.data(), a.probe, /*reserved_counts=*/false) ? 0 : 1;
  }

  if (!comm::launched_by_mpi()) STRATA_THROW(ConfigError, "bench soak --backend mpi: start it under mpirun");
  auto world = comm::init_mpi_world(cfg.comm);
  std::vector<int64_t> rows, grew;
  train_rank(cfg, world, a.checkpoint_every, a.probe, &rows, &grew);
  const Tensor all = comm::all_gather_host(*world, ops::from_vector<int64_t>(rows, {int64_t(rows.size())}));
  const std::vector<int64_t> grew_all =
      comm::all_gather_host(*world, ops::from_vector<int64_t>(grew, {int64_t(grew.size())})).to_vector<int64_t>();
  if (world->rank() != 0) return 0;
  std::printf("soak: %s, %d ranks (mpi), %lld steps, checkpoint every %lld\n\n", a.config.c_str(), world->size(),
              (long long)a.steps, (long long)a.checkpoint_every);
  const std::vector<int64_t> v = all.to_vector<int64_t>();
  bool flat = true;
  for (int r = 0; r < world->size(); ++r) {
    const std::vector<int64_t> mine(v.begin() + ptrdiff_t(r) * ptrdiff_t(rows.size()),
                                    v.begin() + ptrdiff_t(r + 1) * ptrdiff_t(rows.size()));
    flat &= report("rank " + std::to_string(r), mine, &grew_all[size_t(r) * 2 * kGrewPairs], a.probe,
                   /*reserved_counts=*/true);
  }
  std::fflush(stdout);
  return flat ? 0 : 1;
}

}  // namespace strata::apps
