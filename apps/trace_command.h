// `strata trace merge|summary` and the trainer's run.trace window: turning the per-rank
// timelines that core/trace.h records into one Perfetto file, into the compute /
// communication / exposed / idle figures docs/observe.md defines, and into Gantt rows.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "apps/commands.h"

namespace strata::nn {
class Module;
}

namespace strata::apps {

/// The trainer's run.trace window: recording starts before step `start_step` + 1 (or the
/// first step of a run resumed inside the window) and stops after step `start_step` +
/// `steps`, then this rank writes <dir>/trace/rank<R>.json (no file when `dir` is empty).
/// Single-threaded use by the training loop.
class TraceWindow {
 public:
  TraceWindow(int64_t start_step, int64_t steps, int rank, std::string dir, nn::Module& model);
  /// `done` = steps completed so far (the trainer's step_).
  void before_step(int64_t done);
  void after_step(int64_t done);
  /// Writes what was recorded if the run ended inside the window.
  void finish();

 private:
  void write();
  int64_t start_, steps_;
  int rank_;
  std::string dir_;
  nn::Module& model_;
  bool recording_ = false, started_ = false;
};

/// Half-open time intervals [begin, end) in microseconds.
using Intervals = std::vector<std::pair<double, double>>;
/// Sorted, disjoint union of `v`.
Intervals union_of(Intervals v);
/// a minus b, and a intersected with b (both inputs as union_of returns them).
Intervals minus(const Intervals& a, const Intervals& b);
Intervals intersect(const Intervals& a, const Intervals& b);
double length(const Intervals& v);

/// One rank's timeline reduced to the sets the summary and the Gantt chart draw: each a
/// union_of, clipped to `steps` (docs/observe.md has the definitions).
struct RankTimeline {
  int rank = 0;
  Intervals steps;    ///< the traced training steps (category step)
  Intervals compute;  ///< compute and pipeline slices on any thread, minus waits and hooks
  Intervals waits;    ///< a thread blocked in Work::wait
  Intervals hooks;    ///< DDP/ZeRO gradient hooks on the main thread (communication work)
  Intervals comm;     ///< collectives running (comm threads)
  Intervals idle;     ///< steps minus (compute or comm or hooks)
  std::vector<std::string> comm_tracks;  ///< names of the threads that ran collectives
  /// Communication not hidden by compute: (comm or hooks) minus compute.
  Intervals exposed() const;
};
/// Per-rank timelines of a merged trace (or of one rank's file), in rank order. DataError
/// when the JSON is not a trace-event file.
std::vector<RankTimeline> rank_timelines(const nlohmann::json& trace);

/// The numbers `strata trace summary` prints for one rank (seconds, over all traced steps).
struct RankSummary {
  int rank = 0;
  int64_t steps = 0;
  double step_s = 0, compute_s = 0, comm_s = 0, hooks_s = 0, exposed_s = 0, idle_s = 0;
};
RankSummary summarize(const RankTimeline& t);
/// The summary table (ms per step and % of the step), one row per rank.
std::string format_summary(const std::vector<RankSummary>& s);

/// Reads <run_dir>/trace/rank*.json and merges them into one trace: pid = rank (a track
/// per rank), the threads of each rank (main, comm) as its tids, times rebased to the
/// earliest event. DataError naming the file when one is missing or malformed.
nlohmann::json merge_traces(const std::string& run_dir);
/// Reads a trace-event JSON file (DataError naming it on failure).
nlohmann::json read_trace(const std::string& path);

/// strata trace merge RUN_DIR [-o FILE] | strata trace summary RUN_DIR|FILE
Command add_trace_command(CLI::App& parent);

}  // namespace strata::apps
