// `strata plot`: the curves of one or more runs as one SVG a person can look at: training
// loss (smoothed) against steps, evaluation points, and the learning rate on a second
// axis. Several run dirs overlay (e.g. one process against DDP against ZeRO-3). With
// --trace, a Gantt chart of a merged timeline (apps/trace_command.h).
#pragma once
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

namespace strata::apps {

/// Mixture-of-experts routing from the train records that carry a "moe" object:
/// {"layers": [L], "tokens": [L][E_l], "dropped": [L], "aux_loss": x, "z_loss": x} per record.
/// Every record has the same layers and the same expert count per layer.
struct MoeCurves {
  std::vector<int> layers;  ///< block index of each MoE layer, (L)
  std::vector<double> step;  ///< (R): the train steps whose record has "moe"
  /// (R, L, E_l): tokens routed to expert e of layer l in that step (all ranks, all micro-batches).
  std::vector<std::vector<std::vector<double>>> tokens;
  std::vector<std::vector<double>> dropped;  ///< (R, L): token-expert assignments over capacity
  std::vector<double> aux_loss, z_loss;      ///< (R): summed over layers, coefficients applied
  bool empty() const { return step.empty(); }
};

/// One run's records from <run dir>/metrics.jsonl.
struct RunCurves {
  std::string name;  ///< the run dir as given
  std::vector<double> step, loss, lr;        ///< train records
  /// Samples or tokens trained on at each train record (empty when metrics.jsonl has none).
  std::vector<double> units;
  std::string unit_name;  ///< "samples" or "tokens"
  std::vector<double> eval_step, eval_loss;  ///< eval records
  MoeCurves moe;  ///< empty unless train records carry "moe"
};

/// Reads <dir>/metrics.jsonl (DataError naming the file when it is missing or has no train
/// record; malformed lines, a malformed "moe" object among them, are errors too).
RunCurves read_run_curves(const std::string& dir);

/// Exponential moving average (weight `alpha` on the new value), bias-corrected as
/// TensorBoard smooths: out[i] = sum_k alpha (1-alpha)^(i-k) v[k] / (1 - (1-alpha)^(i+1)).
std::vector<double> ema(const std::vector<double>& v, double alpha);

/// How unevenly one MoE layer's tokens spread over its experts in one step: max_e / mean_e of
/// `tokens` (one count per expert). 1 is perfectly balanced, E means every token went to one
/// expert; NaN when no token was routed.
double expert_load_ratio(std::span<const double> tokens);

/// "Nice" axis ticks covering [lo, hi]: 1, 2 or 5 x 10^k apart, about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

/// The SVG (width x height px per panel): loss panel with one smoothed line per run plus
/// its raw points faint, eval losses as circles, the learning rate dashed on the right
/// axis, axes with ticks and labels, a legend naming each run. When every run records
/// samples or tokens (the same kind), a second panel below shows the loss against them.
/// When a run has MoE data, panels follow: expert load (expert_load_ratio per layer and run
/// against the step, a dashed line at 1), the auxiliary (and z-) loss against the step, and
/// a heatmap of the first MoE run's token share per expert (rows: layers) at its last step.
std::string plot_runs_svg(const std::vector<RunCurves>& runs, int width = 960, int height = 540);

/// `strata plot --trace`: a Gantt chart of a merged trace (apps/trace_command.h): per rank a
/// row of its threads' compute, exposed communication and idle time, and a row of its
/// collectives running, across the traced steps (x in ms, step starts marked).
std::string plot_trace_svg(const nlohmann::json& trace, int width = 1200);

}  // namespace strata::apps
