// `strata bench pp`: pipeline step time, per-rank busy time and the measured bubble
// (1 - busy / step) beside the formula, per schedule and micro-batch count, on the
// mpirun world (one pp rank per process); rank 0 formats the table.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <strata/comm/process_group.h>
#include <strata/nn/module.h>
#include <strata/parallel/pipeline/stage.h>

namespace strata::bench {

struct PpBenchOptions {
  std::vector<int> microbatches{1, 2, 4, 8, 16};
  int steps = 3;        ///< timed steps per row (after one warm-up step)
  int64_t per_mb = 4;   ///< sequences per micro-batch
  int64_t seq = 64;     ///< tokens per sequence
  int64_t vocab = 256;  ///< token ids drawn in [0, vocab)
  /// How the executor's exchanges run: "auto" (the executor's default for this host,
  /// parallel::default_inline_exchanges), "thread" (each handed to its channel's comm
  /// thread), "inline" (posted and progressed by the compute thread), or "both": every
  /// row in both modes, their steps alternating, with the ratio.
  std::string exchanges = "auto";
  /// Schedules to run (names as parallel.pp_schedule; empty: all three).
  std::vector<std::string> schedules;
};

struct PpBenchRow {
  std::string schedule;
  int m = 0, v = 1;
  double step_s = 0;     ///< slowest rank's mean step (forward_backward + dp finalize)
  double busy_s = 0;     ///< mean over ranks of the forward/backward time per step
  double busy_cpu_s = 0; ///< mean over ranks of the CPU time in them (below busy_s: preempted)
  double bubble = 0;     ///< mean over ranks of 1 - busy / step
  /// The busiest rank's (most forward+backward time) 1 - busy / step, with the slowest
  /// rank's step: the bubble the formula describes (the others also idle for its extra work).
  double bubble_busiest = 0;
  /// The median over timed steps of that step's busiest rank's 1 - busy / step (slowest
  /// rank's step): the mean's figure without the steps another process stalled.
  double bubble_median = 0;
  double wait_s = 0;     ///< mean over ranks of the time blocked posting/waiting on exchanges
  double formula = 0;    ///< (p-1)/(m+p-1), interleaved (p-1)/(v m+p-1)
  /// The bubble an ideal pipeline of these stages would have: the busiest rank's, simulated
  /// with each rank's computes as long as its measured busy time (parallel::imbalance_bubble).
  /// Equals `formula` when every rank is equally busy.
  double formula_imbalance = 0;
  std::string exchanges;  ///< "inline" or "thread"
  double thread_ratio = 0;  ///< "both": this mode's step / the other mode's step (inline rows)
  int64_t peak_act = 0;  ///< rank 0's (stage 0's) peak activation bytes in a step
};

/// Every schedule (GPipe, 1F1B; interleaved with v 2 where m % pp == 0 and the model has
/// the blocks) x m at pp = world size. make_model builds the same model on every rank;
/// make_plan gives its pipeline plan. Collective over `world`.
std::vector<PpBenchRow> bench_pp(std::shared_ptr<comm::ProcessGroup> world,
                                 const std::function<std::shared_ptr<nn::Module>()>& make_model,
                                 const std::function<parallel::PipelinePlan(const nn::Module&)>& make_plan,
                                 const PpBenchOptions& o);

std::string format_pp_bench(const std::vector<PpBenchRow>& rows, int pp);

}  // namespace strata::bench
