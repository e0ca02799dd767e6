// The DDP measurements `strata bench ddp` prints (and the README quotes): step time with
// and without communication, how much of the all-reduce time backward hides, the effect
// of bucket_cap_mb, CNN throughput scaling from 1 to N ranks, and per-rank memory by
// category against the 4Ψ + 4Ψ + 8Ψ + 4Ψ formula.
#pragma once
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "nn/cnn.h"
#include "nn/gpt.h"

namespace strata::parallel {

struct DDPBenchOptions {
  /// gpt_char-sized GPT (byte vocabulary, configs' block_size 64).
  nn::GPTConfig gpt{.vocab = 256, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128};
  int64_t gpt_batch = 8;  ///< sequences per rank per step
  std::vector<double> bucket_caps_mb = {1, 5, 25, 100};
  /// fashion_cnn-sized CNN (28x28, conv 32-64 with BatchNorm, fc 128).
  nn::CNNConfig cnn{};
  int64_t cnn_batch = 32;  ///< images per rank per step (weak scaling)
  int steps = 10;          ///< timed steps per measurement
  int warmup = 2;          ///< untimed steps before each
  int threads = 1;         ///< compute threads per rank (restored afterwards)
};

/// Bytes per rank by category.
struct RankMemory {
  int64_t params = 0, grads = 0, buckets = 0, optimizer = 0;
  int64_t total() const { return params + grads + buckets + optimizer; }
};

/// DDP on the GPT at one bucket cap.
struct CapTiming {
  double cap_mb = 0;
  int64_t buckets = 0;
  double step_s = 0;           ///< DDP step (forward, backward, finalize, AdamW step)
  double comm_only_s = 0;      ///< the same buckets all-reduced alone, back to back
  double exposed_s = 0;        ///< finalize() wait of the rank that finished backward last (median)
  double hidden_fraction = 0;  ///< 1 - exposed_s / comm_only_s, clamped to [0, 1]
};

/// Timings are medians over the timed steps (the slowest rank's median).
struct DDPBenchReport {
  int ranks = 0;
  std::string backend;
  int threads = 0;
  int steps = 0;  ///< timed steps per measurement
  int64_t gpt_params = 0;
  int64_t gpt_buckets = 0;       ///< buckets at 25 MiB
  double compute_step_s = 0;     ///< forward + backward + AdamW step, no communication
  double ddp_step_s = 0;         ///< the same under DDP (25 MiB buckets)
  double comm_only_s = 0;        ///< the step's bucket all-reduces alone, back to back
  double exposed_comm_s = 0;     ///< per step: the last rank's finalize() wait (communication not hidden)
  double hidden_fraction = 0;    ///< 1 - exposed_comm_s / comm_only_s, clamped to [0, 1]
  std::vector<CapTiming> caps;   ///< every cap of DDPBenchOptions::bucket_caps_mb (and 25)
  int64_t cnn_params = 0;
  double cnn_samples_s_1 = 0;    ///< one rank alone
  double cnn_samples_s_n = 0;    ///< all ranks, summed
  double scaling_efficiency = 0; ///< cnn_samples_s_n / (ranks * cnn_samples_s_1)
  /// All ranks training at once with no communication at all: what the host allows
  /// (a 2-core machine shared with other work caps this well below ranks x one rank).
  double cnn_samples_s_n_nocomm = 0;
  int64_t psi = 0;               ///< GPT parameter count
  RankMemory tally, tally_view;  ///< counted from the tensors (Ψ-exact), without / with bucket views
  RankMemory tracked, tracked_view;  ///< MemoryTracker deltas per rank (params, grads, comm, optimizer)

  /// Markdown tables for the README.
  std::string to_string() const;
};

/// Runs every measurement on `group` (collective: every rank calls it with the same
/// options) and returns the same report on every rank. The variants being compared
/// (compute-only and each bucket cap; one rank alone and all ranks) run interleaved step
/// by step, so load from other processes affects them alike. Sets the compute thread count to
/// opts.threads while it runs.
DDPBenchReport bench_ddp(comm::ProcessGroup& group, const DDPBenchOptions& opts = {});
/// bench_ddp on a fresh local world of `ranks` threads.
DDPBenchReport bench_ddp_local(int ranks, const DDPBenchOptions& opts = {});

}  // namespace strata::parallel
