// The DDP measurements `strata bench ddp` prints (and docs/ddp.md quotes): for the GPT and
// the CNN, the DDP step against the compute-only step measured interleaved in one run,
// the all-reduce of the same buckets alone, the exposed and hidden communication that
// follow from them end to end, where the added time goes, the host's own ceiling, bucket
// caps, and per-rank memory by category against the 4Ψ + 4Ψ + 8Ψ + 4Ψ formula.
#pragma once
#include <string>
#include <vector>

#include <strata/comm/process_group.h>
#include <strata/nn/cnn.h>
#include <strata/nn/gpt.h>

namespace strata::bench {

struct DDPBenchOptions {
  /// gpt_char-sized GPT (byte vocabulary, configs' block_size 64).
  nn::GPTConfig gpt{.vocab = 256, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128};
  int64_t gpt_batch = 8;  ///< sequences per rank per step
  /// Extra GPT rows at these caps (bucket views); the 25 MiB rows are always there.
  std::vector<double> bucket_caps_mb = {1, 5, 100};
  /// fashion_cnn-sized CNN (28x28, conv 32-64 with BatchNorm, fc 128).
  nn::CNNConfig cnn{};
  int64_t cnn_batch = 32;  ///< images per rank per step (weak scaling)
  int steps = 20;          ///< timed steps per measurement
  int warmup = 2;          ///< untimed steps before them (the first one rebuilds the buckets)
  int threads = 1;         ///< compute threads per rank (restored afterwards)
};

/// Bytes per rank by category.
struct RankMemory {
  int64_t params = 0, grads = 0, buckets = 0, optimizer = 0;
  int64_t total() const { return params + grads + buckets + optimizer; }
};

/// One DDP configuration of a model, timed beside that model's compute-only step.
/// Step times (DDP, compute-only, all-reduce alone) are the slowest rank's time of each
/// step, then the median over steps; the parts of the breakdown are each rank's median,
/// then the largest over ranks.
struct OverlapRow {
  double cap_mb = 25;
  bool bucket_view = true;  ///< gradient_as_bucket_view
  int64_t buckets = 0;
  double step_s = 0;       ///< DDP step: pre_forward, forward, backward, finalize, optimizer
  std::vector<double> steps;  ///< every timed DDP step (slowest rank), paired with compute_steps
  double allreduce_s = 0;  ///< the same buckets all-reduced alone, back to back
  /// What DDP adds to a step, end to end: the median over steps i of steps[i] -
  /// compute_steps[i] (each pair measured back to back, so load that drifts during the run
  /// cancels).
  double exposed_s = 0;
  /// 1 - exposed_s / allreduce_s, not clamped: below 0 when DDP adds more than the
  /// whole all-reduce, 1 when it adds nothing.
  double hidden = 0;
  // Where the added time goes (each a median per step, slowest rank):
  double broadcast_s = 0;  ///< pre_forward(): rank 0's buffers broadcast (broadcast_buffers)
  double hook_s = 0;       ///< inside the gradient hooks: slot copies, bookkeeping, launching
  double copy_s = 0;       ///< bucket copies in and out (part of hook_s and finalize_s)
  double finalize_s = 0;   ///< finalize(): the wait below and the copies back to .grad
  double wait_s = 0;       ///< of which blocked on all-reduces still running
  double comm_cpu_s = 0;   ///< CPU time of the comm thread during the step (shares the cores)
  double allreduce_cpu_s = 0;  ///< CPU time of the comm thread for the all-reduce alone
  int64_t launched_in_backward = 0;  ///< buckets launched before the last gradient arrived
  int64_t bytes_sent = 0;   ///< per step by rank 0
  std::string bytes_kind;   ///< "counted" (send/recv algorithms) or "modelled" (native)
};

/// A model's rows and the compute-only references they are measured against.
struct ModelOverlap {
  std::string model;
  int64_t params = 0;
  int64_t batch = 0;          ///< samples per rank per step
  double compute_step_s = 0;  ///< every rank at once, same work, no DDP and no communication
  std::vector<double> compute_steps;  ///< every timed compute-only step (slowest rank)
  double solo_step_s = 0;     ///< rank 0 alone while the others idle, no communication
  std::vector<OverlapRow> rows;  ///< rows[0]: the headline (25 MiB, bucket views)
};

struct DDPBenchReport {
  int ranks = 0;
  std::string backend, algorithm;
  int threads = 0;
  int steps = 0;  ///< timed steps per measurement
  ModelOverlap gpt, cnn;
  int64_t psi = 0;               ///< GPT parameter count
  RankMemory tally, tally_view;  ///< counted from the tensors (Ψ-exact), without / with bucket views
  RankMemory tracked, tracked_view;  ///< MemoryTracker deltas per rank (params, grads, comm, optimizer)

  /// Markdown tables.
  std::string to_string() const;
};

/// Runs every measurement on `group` (collective: every rank calls it with the same
/// options) and returns the same report on every rank. Per model, the compute-only step,
/// rank 0's solo step, each DDP row's step and its all-reduce alone run interleaved step by
/// step (a barrier before each), so load from other processes affects them alike. Sets the
/// compute thread count to opts.threads while it runs.
DDPBenchReport bench_ddp(comm::ProcessGroup& group, const DDPBenchOptions& opts = {});
/// bench_ddp on a fresh local world of `ranks` threads.
DDPBenchReport bench_ddp_local(int ranks, const DDPBenchOptions& opts = {});

}  // namespace strata::bench
