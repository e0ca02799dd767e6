// The ZeRO measurements `strata bench zero` prints (and the README quotes): per stage
// (0 = DDP, 1, 2, 3) on a gpt_char-sized GPT, the step time, the static bytes per rank by
// category beside the planner's prediction, and the peak bytes during a step.
#pragma once
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "nn/gpt.h"

namespace strata::parallel {

struct ZeroBenchOptions {
  /// gpt_char's model (configs/gpt_char.yaml): byte vocabulary, block 64, 4 x 128.
  nn::GPTConfig gpt{.vocab = 256, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128};
  int64_t batch = 8;  ///< sequences per rank per step
  int steps = 6;      ///< timed steps per stage
  int warmup = 2;
  int threads = 1;    ///< compute threads per rank (restored afterwards)
};

/// Bytes per rank by category.
struct ZeroBenchMemory {
  int64_t params = 0, grads = 0, optimizer = 0, comm = 0;
  int64_t total() const { return params + grads + optimizer + comm; }
};

struct ZeroStageResult {
  int stage = 0;                 ///< 0 = DDP (separate gradient buckets)
  double step_s = 0;             ///< median step (forward, backward, reduce, AdamW), slowest rank
  ZeroBenchMemory measured;      ///< allocator: static bytes held after the steps
  ZeroBenchMemory predicted;     ///< plan_memory()
  int64_t peak = 0;              ///< allocator: highest total during the steps, above the start
  int64_t peak_activations = 0;  ///< allocator: highest activation bytes during the steps
  int64_t bytes_sent = 0;        ///< comm bytes this rank sent per step
};

struct ZeroBenchReport {
  int ranks = 0;
  std::string backend;
  int64_t psi = 0;  ///< parameters
  std::vector<ZeroStageResult> stages;
  /// Markdown table for the README.
  std::string to_string() const;
};

/// Every stage in turn on `group` (collective). With the local backend all ranks share
/// one allocator, so per-rank bytes are the totals divided by the rank count.
ZeroBenchReport bench_zero(comm::ProcessGroup& group, const ZeroBenchOptions& opts = {});
/// bench_zero on a fresh local world of `ranks` threads.
ZeroBenchReport bench_zero_local(int ranks, const ZeroBenchOptions& opts = {});

}  // namespace strata::parallel
