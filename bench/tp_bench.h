// The tensor-parallel measurements `strata bench tp` prints: for tp 1, 2 and 4 (and SP at
// tp > 1) on gpt_char's GPT, the step time, the time inside tp collectives, the fraction
// of the step spent communicating, and the per-rank parameter and activation bytes.
#pragma once
#include <string>
#include <vector>

#include <strata/nn/gpt.h>

namespace strata::bench {

struct TpBenchOptions {
  /// gpt_char's model (configs/gpt_char.yaml): byte vocabulary, block 64, 4 x 128.
  nn::GPTConfig gpt{.vocab = 256, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128};
  int64_t batch = 16;  ///< sequences per step (the same global batch at every tp)
  int steps = 6;       ///< timed steps per layout
  int warmup = 2;
  std::vector<int> tps = {1, 2, 4};  ///< each under the GPT's own plan (nn::gpt_tp_plan), with and without SP
};

struct TpBenchResult {
  int tp = 1;
  bool sp = false;
  double step_s = 0;            ///< median step (forward, backward, AdamW), slowest rank
  double comm_s = 0;            ///< of which inside tp collectives (comm thread time), slowest rank
  int64_t bytes_sent = 0;       ///< per step, this rank, over tp
  int64_t params = 0;           ///< allocator: parameter bytes per rank
  int64_t params_predicted = 0; ///< plan_memory (TP-sharded / tp + replicated)
  int64_t peak_activations = 0; ///< allocator: highest activation bytes per rank during a step
  double comm_fraction() const { return step_s > 0 ? comm_s / step_s : 0; }
};

struct TpBenchReport {
  int64_t psi = 0;
  std::vector<TpBenchResult> rows;
  /// Markdown table for docs/benchmarks.md.
  std::string to_string() const;
};

/// Every layout in turn, each on a fresh local world of tp threads, one compute thread
/// per rank. All ranks share one allocator: per-rank bytes are the totals / tp.
TpBenchReport bench_tp(const TpBenchOptions& opts);

}  // namespace strata::bench
