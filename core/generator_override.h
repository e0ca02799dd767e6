// A per-thread override of default_generator() (core/rng.h). Kept apart from rng.h so
// that the many files including rng.h do not depend on it.
#pragma once
#include <strata/core/rng.h>

namespace strata {

/// RAII: while alive, default_generator() (and manual_seed) on the calling thread use
/// `gen` instead of the process-wide generator, which is neither read nor written. Nests;
/// other threads are not affected. Activation checkpointing replays a segment's draws on
/// a private copy of the recorded state this way, so a replay on one thread-rank (the
/// local backend) never writes the state other ranks read (PyTorch forks the RNG for the
/// same reason, torch.random.fork_rng); `strata bench soak --backend local` gives each
/// rank thread a generator of its own, as each process has under mpirun. `gen` must
/// outlive the override; overrides end in reverse order of creation.
class DefaultGeneratorOverride {
 public:
  explicit DefaultGeneratorOverride(Generator& gen);
  ~DefaultGeneratorOverride();
  DefaultGeneratorOverride(const DefaultGeneratorOverride&) = delete;
  DefaultGeneratorOverride& operator=(const DefaultGeneratorOverride&) = delete;

 private:
  Generator* prev_;
};

}  // namespace strata
