// The ZeRO measurements `strata bench zero` prints (and the README quotes): per stage
// (0 = DDP, 1, 2, 3) on a gpt_char-sized GPT, the step time, the static bytes per rank by
// category beside the planner's prediction, and the peak bytes during a step; and for
// stages 1-2 how much of the communication backward hides, end to end.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <strata/comm/process_group.h>
#include <strata/nn/gpt.h>

namespace strata::bench {

struct ZeroBenchOptions {
  /// gpt_char's model (configs/gpt_char.yaml): byte vocabulary, block 64, 4 x 128.
  nn::GPTConfig gpt{.vocab = 256, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128};
  int64_t batch = 8;  ///< sequences per rank per step
  int steps = 6;      ///< timed steps per stage
  int warmup = 2;
  int threads = 1;    ///< compute threads per rank (restored afterwards)
  bool overlap = true;  ///< also measure ZeroOverlapResult (3 timings x steps per layout)
  /// Also run every stage with 16-bit model states (run.precision bf16_params: bf16
  /// params and grads, f32 masters and moments), each row beside its f32 one.
  bool bf16_params = false;
  /// Overrides of the group's algorithm and comm.reduce_dtype for the stage rows
  /// (unset: the group's own). `ring` counts bytes message by message.
  std::optional<comm::Algorithm> algorithm;
  std::optional<comm::ReduceDtype> reduce_dtype;
  /// > 0 and below the rank count: also HSDP rows, ZeRO-1/2/3 within shard groups of this
  /// many consecutive ranks with the gradient slices all-reduced over the replicas.
  int dp_shard = 0;
};

/// Bytes per rank by category.
struct ZeroBenchMemory {
  int64_t params = 0, grads = 0, optimizer = 0, comm = 0;
  int64_t total() const { return params + grads + optimizer + comm; }
};

struct ZeroStageResult {
  int stage = 0;                 ///< 0 = DDP (separate gradient buckets)
  bool bf16_params = false;      ///< 16-bit model states (else f32)
  double step_s = 0;             ///< median step (forward, backward, reduce, AdamW), slowest rank
  ZeroBenchMemory measured;      ///< allocator: static bytes held after the steps
  ZeroBenchMemory predicted;     ///< plan_memory()
  int64_t peak = 0;              ///< allocator: highest total during the steps, above the start
  int64_t peak_activations = 0;  ///< allocator: highest activation bytes during the steps
  int64_t bytes_sent = 0;        ///< comm bytes this rank sent per step
  int dp_shard = 0;              ///< HSDP: ranks per shard group (0: ZeRO over every rank)
  int64_t shard_bytes_sent = 0;      ///< of bytes_sent: within the shard group (every rank when not HSDP)
  int64_t replicate_bytes_sent = 0;  ///< of bytes_sent: over the replicate group (HSDP)
  int64_t padded = 0;                ///< elements of the flat units, padded (ZeRO)
};

/// End-to-end overlap of one stage-1/2 layout, from three steps timed interleaved in one
/// loop with every other layout's (medians, slowest rank): the ZeRO step; the same step without communication
/// (forward and backward under no_sync, then the optimizer on this rank's slice); and the
/// step's reduce-scatters and all-gathers alone, on buffers of the units' sizes.
struct ZeroOverlapResult {
  int stage = 1;
  int units = 0;            ///< flat units (reduce-scatters per step)
  double first_unit_mb = 0; ///< the layout's caps (MiB)
  double cap_mb = 0;
  double step_s = 0;        ///< ZeRO step
  double compute_s = 0;     ///< compute-only step
  double comm_s = 0;        ///< reduce-scatter + all-gather alone
  /// step_s - compute_s: what ZeRO adds to the step.
  double exposed_s() const { return step_s - compute_s; }
  /// 1 - exposed / comm alone. Not clamped: negative when ZeRO adds more than its
  /// communication costs alone, above 1 when the difference is inside the noise.
  double hidden() const { return comm_s > 0 ? 1.0 - exposed_s() / comm_s : 0.0; }
};

struct ZeroBenchReport {
  int ranks = 0;
  std::string backend;
  int64_t psi = 0;  ///< parameters
  std::string algorithm, reduce_dtype;  ///< what the stage rows ran with
  std::vector<ZeroStageResult> stages;
  std::vector<ZeroOverlapResult> overlap;  ///< stages 1-2: DDP-like units, then one unit of everything
  /// Markdown table for the README.
  std::string to_string() const;
};

/// Every stage in turn on `group` (collective). With the local backend all ranks share
/// one allocator, so per-rank bytes are the totals divided by the rank count.
ZeroBenchReport bench_zero(comm::ProcessGroup& group, const ZeroBenchOptions& opts = {});
/// bench_zero on a fresh local world of `ranks` threads.
ZeroBenchReport bench_zero_local(int ranks, const ZeroBenchOptions& opts = {});

}  // namespace strata::bench
