// What `strata train` shows and records: the progress bar or plain progress lines on
// stdout (for the user) and metrics.jsonl (for tools). The trainer hands it numbers;
// all formatting lives here.
#pragma once
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "apps/tensorboard.h"

namespace strata::apps {

/// How progress is shown on stdout.
enum class ProgressStyle {
  bar,    ///< one carriage-return line redrawn every 0.1 s (terminals)
  lines,  ///< a plain line every train.log_every steps (logs, pipes, mpirun)
};

/// The progress style of `strata train`. `forced` is $STRATA_PROGRESS: "bar" or "lines"
/// wins; null or "" picks automatically: the bar only when stdout is a terminal and the
/// process was not started by an MPI launcher (OpenMPI gives rank 0 a pty, so a bar
/// would be drawn into the job's log). Any other value: ConfigError naming STRATA_PROGRESS.
ProgressStyle choose_progress_style(bool stdout_is_tty, bool launched_by_mpi, const char* forced);

/// "1h02m", "3m05s", "42s" ("?" for a negative or non-finite value).
std::string format_duration(double seconds);
/// "1.23M", "45.6k", "789".
std::string format_count(double v);

/// One logged training window (train.log_every steps).
struct StepLog {
  int64_t step = 0, total_steps = 0;
  double epoch = 0, loss = 0, lr = 0;
  double throughput = 0;  ///< units per second over the window
  const char* unit = "samples/s";
  int64_t units = 0;      ///< samples (or tokens, as `unit` says) trained on since step 0, all ranks
  double elapsed_s = 0;   ///< since the run (not this process) started
  double eta_s = 0;
  double flops_per_s = 0;  ///< model FLOPs per second over the window, all ranks together
  double mfu = 0;          ///< flops_per_s per rank over the peak (0: not known)
  std::optional<double> loss_scale;      ///< f16's GradScaler
  std::optional<int64_t> skipped_steps;
  nlohmann::json moe;  ///< MoE routing of the step (apps/moe_metrics.h), null for a dense model
};

/// One evaluation.
struct EvalLog {
  int64_t step = 0;
  std::string split;
  double loss = 0;
  int64_t samples = 0;
  std::optional<double> accuracy;
  std::optional<double> bigram_entropy;
};

/// Before a run resumed at optimizer step `step` (of `total_steps`) appends to
/// metrics.jsonl at `path`: removes the records it will write again, so that every step and
/// evaluation appears once. Those are every record after `step` (an interrupted run got
/// past its last checkpoint) and, when `step` is the last step, the final evaluation at
/// `step` (resuming a finished run evaluates again). Other lines, unparsable ones included,
/// are kept in order. The file is replaced atomically; a missing file is left alone.
void prune_metrics_for_resume(const std::string& path, int64_t step, int64_t total_steps);

/// Stdout progress and metrics.jsonl of one run. Not thread-safe.
class Progress {
 public:
  /// verbose: print to stdout (style picks bar or lines). metrics_path empty: no file;
  /// append keeps the lines of the run being resumed. DataError naming the file when it
  /// cannot be opened.
  Progress(bool verbose, ProgressStyle style, const std::string& metrics_path, bool append);
  /// Also writes the scalars of every record as TensorBoard events into `dir`.
  void enable_tensorboard(const std::string& dir);

  bool verbose() const { return verbose_; }
  bool draws_bar() const { return bar_; }
  /// A metrics.jsonl record of the window, and a line unless the bar is drawn.
  void log_step(const StepLog& s);
  /// Redraws the bar (at most every 0.1 s, and always on the last step).
  void draw_bar(int64_t step, int64_t total_steps, int64_t epoch, double ema_loss, double lr, double rate,
                const char* unit, double eta_s);
  /// A metrics.jsonl record and a line for an evaluation.
  void log_eval(const EvalLog& e);
  /// A line of its own on stdout (closes an open bar first); nothing unless verbose.
  void line(const std::string& text);
  /// Ends an open bar with a newline.
  void close_bar();
  void write_metrics(const nlohmann::json& j);

 private:
  bool verbose_;
  bool bar_;
  bool bar_open_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
  std::ofstream metrics_;
  std::unique_ptr<TensorBoardWriter> tb_;
};

}  // namespace strata::apps
