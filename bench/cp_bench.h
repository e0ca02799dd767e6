// The context-parallel measurements `strata bench cp` prints: for cp 1, 2 and 4 at
// several sequence lengths on a GPT, the step time, the attention time (ring attention,
// forward and backward of one layer) against its compute-only twin (exposed
// communication = the difference, both timed in one run), the K/V bytes sent, and the
// per-rank activation peak; and the zigzag split against the plain one (per-rank busy
// time of causal ring attention).
#pragma once
#include <string>
#include <vector>

#include <strata/nn/gpt.h>

namespace strata::bench {

struct CpBenchOptions {
  /// The GPT (block_size is set to each sequence length).
  nn::GPTConfig gpt{.vocab = 256, .block_size = 256, .n_layer = 2, .n_head = 4, .n_embd = 64};
  int64_t batch = 2;  ///< sequences per step (the same global batch at every cp)
  int steps = 3;      ///< timed steps per layout
  int warmup = 1;
  std::vector<int> cps = {1, 2, 4};
  std::vector<int64_t> seqs = {256, 512, 1024};
};

struct CpBenchResult {
  int cp = 1;
  int64_t seq = 0;
  double step_s = 0;          ///< median training step (forward, backward, AdamW), slowest rank
  double attn_s = 0;          ///< one layer's attention forward + backward, slowest rank (cp 1: the fused op)
  double attn_compute_s = 0;  ///< the same without communication (cp 1: = attn_s)
  int64_t kv_bytes = 0;       ///< K/V and dK/dV bytes one rank sends per layer per step (counted)
  int64_t kv_bytes_formula = 0;
  int64_t peak_activations = 0;  ///< allocator: highest activation bytes per rank during a step
  int64_t predicted_activations = 0;  ///< cp_activation_bytes
  double exposed_s() const { return attn_s - attn_compute_s; }
};

/// Per-rank busy time of causal ring attention (forward + backward, compute only) at one
/// cp and sequence length, for each split: max / min over the ranks shows the balance.
struct CpBalanceResult {
  std::string split;
  int cp = 1;
  int64_t seq = 0;
  std::vector<double> busy_s;  ///< per rank
};

struct CpBenchReport {
  std::vector<CpBenchResult> rows;
  std::vector<CpBalanceResult> balance;
  /// Markdown tables for docs/benchmarks.md.
  std::string to_string() const;
};

/// Every (sequence length, cp) in turn on a fresh local world of cp threads, one compute
/// thread per rank. All ranks share one allocator: per-rank bytes are the totals / cp.
CpBenchReport bench_cp(const CpBenchOptions& opts);

}  // namespace strata::bench
