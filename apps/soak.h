// strata bench soak: a long training run that checks that memory stays
// flat: the allocator's high-water marks when the run has settled (the probe step) must
// equal those at its last step. Checkpoints, evaluation and logging run on their usual
// schedule in between, through the Trainer itself.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::apps {

struct SoakArgs {
  std::string config;
  std::vector<std::string> sets;  ///< --set overrides, applied after the soak's own
  int64_t steps = 2000;
  int64_t checkpoint_every = 100;  ///< also the eval and log period, and the table's rows
  int64_t probe = 200;             ///< the step whose peaks the last step's must equal
  std::string backend = "mpi";     ///< mpi (every process of mpirun is a rank) | local (threads)
  int ranks = 8;                   ///< local backend only
  std::string dir;                 ///< run.dir (checkpoints, metrics); empty: the config's
  /// Start over in a run.dir that holds an earlier run (its metrics.jsonl and checkpoints/
  /// are removed); without it such a directory is refused (exit 2 naming run.dir).
  bool overwrite = false;
};

/// Trains a.config for a.steps steps on the chosen world, checkpointing every
/// a.checkpoint_every steps (keep_checkpoints 2), and prints one row per checkpoint step:
/// the tensor bytes' peak and current (cpu_memory()), the caching allocator's reserved
/// peak and current, and the process's RSS and its peak (VmHWM); per rank under mpi
/// (gathered to rank 0), per process under local (the ranks share the counters).
/// Returns 0 when every rank's tensor peak at the last step equals the one at a.probe,
/// and under mpi its reserved peak too (local: reported only, see report() in soak.cpp),
/// else 1 ("GREW", naming the rank and the growth). Collective under mpirun.
int bench_soak(const SoakArgs& a);

}  // namespace strata::apps
