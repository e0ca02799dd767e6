// The training driver behind `strata train`: builds everything from a TrainConfig,
// runs batch -> forward -> loss -> backward -> clip -> step -> schedule, evaluates,
// logs (progress bar on a TTY, plain lines otherwise or under mpirun, metrics.jsonl
// always), writes/resumes checkpoints bit-exactly and reports memory at the end.
#pragma once
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "apps/checkpoint.h"
#include "apps/config.h"
#include "apps/factory.h"
#include "comm/process_group.h"
#include "data/dataloader.h"
#include "parallel/data_parallel.h"
#include "parallel/ddp.h"
#include "parallel/memory_plan.h"
#include "optim/grad_scaler.h"
#include "parallel/zero.h"

namespace strata::apps {

/// Result of one pass over the eval split. accuracy is set for classifiers.
struct EvalResult {
  double loss = 0.0;
  std::optional<double> accuracy;
  int64_t samples = 0;
};

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

struct TrainerOptions {
  /// Print progress/log lines to stdout (false for bench and tests).
  bool verbose = true;
  /// Write metrics.jsonl and checkpoints under run.dir.
  bool write_files = true;
};

/// Owns the model, optimizer, data and loop state of one run. Not thread-safe.
///
/// parallel.mode ddp: under mpirun the world group comes from comm::init_mpi_world
/// (comm.* options), otherwise a 1-rank local world is used (same numbers as mode
/// none). Each rank reads its DistributedSampler share, train.batch_size / world
/// samples per step, and steps through parallel::apply_ddp; logged losses are the
/// world average, and progress, metrics, evaluation and checkpoints happen on rank 0
/// only (its checkpoint is a plain single-process one). Every rank must construct and
/// train() the Trainer (collective).
///
/// parallel.zero_stage 1|2|3 (with mode ddp): the model is sharded by
/// parallel::apply_zero (units of parallel.bucket_cap_mb for stages 1-2, one per
/// transformer block for stage 3, parallel.fsdp_prefetch); gradient clipping uses the
/// global norm, evaluation runs on rank 0 inside summon_full_params (stage 3), and
/// checkpoints are sharded (every rank writes its slices, see save_sharded_checkpoint),
/// loadable by eval/sample/resume at any world size and stage, or consolidated to one
/// file by `strata ckpt consolidate`.
///
/// parallel.mode dp: one process, parallel.replicas thread replicas of the model
/// (parallel::DataParallel; replicas k > 0 are built by build_model with their own
/// dropout streams and take replica 0's weights before every forward). Each batch of
/// train.batch_size is cut into `replicas` chunks, the loss is taken on the gathered
/// output and the gradients are summed onto replica 0, which is model(): the optimizer,
/// clipping, evaluation and checkpoints all use it, so checkpoints are prefix-free
/// single-process ones. run.threads is the process's total: every replica thread runs
/// its kernels with max(1, threads / replicas) intra-op threads (threads 0 = all cores).
/// Without dropout and BatchNorm the run equals mode none to float tolerance.
///
/// run.device cuda[:N]: the model, its optimizer state and every batch live on that GPU
/// (cuda without an index: the local rank's GPU under mpirun, else cuda:0); with mode ddp
/// the world group is on the nccl backend (comm.backend auto). Checkpoints are the same
/// files as on the CPU, so a GPU run resumes or evaluates on the CPU and back.
/// run.precision bf16 | f16: forward and loss run under autocast (matmul/linear/conv in
/// 16-bit, f32 master weights, backward and step outside); f16 also scales the loss
/// (optim::GradScaler: a step whose gradients overflowed is skipped with a warning naming
/// the parameters, clipping sees unscaled gradients, the scale is checkpointed).
///
/// At the end of train() (rank 0, verbose) a memory report compares the allocator's
/// bytes by category with parallel::plan_memory's prediction for the run's layout
/// (mode dp adds DataParallel's per-replica table).
class Trainer {
 public:
  /// Builds data, model, optimizer and schedule; with train.resume set, restores the
  /// checkpoint (DataError naming the file/tensor on mismatch; nothing half-loaded).
  explicit Trainer(TrainConfig cfg, TrainerOptions opts = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Runs to total_steps(), evaluating/logging/checkpointing on the configured
  /// schedule; returns the final evaluation.
  EvalResult train();
  /// One optimizer step (grad_accum_steps micro-batches). Returns the step's mean loss.
  double step();
  /// Evaluates on the eval split (eval mode, no grad; train.eval_batches caps it).
  EvalResult evaluate();
  /// Writes a checkpoint of the current state into `dir`.
  void save(const std::string& dir);

  int64_t step_count() const { return step_; }
  int64_t total_steps() const { return total_steps_; }
  /// Samples (or tokens, for token data) consumed by one optimizer step.
  int64_t units_per_step() const;
  const char* throughput_unit() const { return data_.tokens ? "tokens/s" : "samples/s"; }
  const DataBundle& data() const { return data_; }
  /// The trained module itself (mode dp: replica 0, unwrapped; names carry no prefix).
  nn::Module& model() { return *model_; }
  const TrainConfig& config() const { return cfg_; }
  /// This process's rank and the world size (0 and 1 unless parallel.mode is ddp).
  int rank() const { return rank_; }
  /// Where the model and batches live (run.device resolved; cuda under mpirun: the local rank's GPU).
  Device device() const { return device_; }
  /// The f16 loss scaler (null unless run.precision is f16).
  const optim::GradScaler* grad_scaler() const { return scaler_ ? &*scaler_ : nullptr; }
  int world_size() const { return world_; }
  /// The DataParallel wrapper of mode dp (null otherwise).
  parallel::DataParallel* data_parallel() const { return dp_.get(); }
  /// The planner's per-rank prediction for this run's layout (stage 0; world 1 unless ddp).
  parallel::MemoryPlan predicted_memory() const;
  /// The end-of-run memory report (what train() prints): allocator vs plan, and for
  /// mode dp the per-replica table of the last training step.
  std::string memory_report() const;

 private:
  double lr_at(int64_t step) const;
  TrainingState capture_state() const;
  void log_step(double loss, double lr);
  void log_eval(const EvalResult& r);
  void write_metrics(const nlohmann::json& j);
  void maybe_checkpoint(bool final);
  /// The optimizer: ZeRO's sharded one, or the plain one.
  optim::Optimizer& opt() const { return zero_ ? zero_->optimizer() : *optimizer_; }
  /// evaluate() on rank 0; under ZeRO-3 every rank gathers the parameters around it
  /// (collective). Other ranks return an empty result.
  EvalResult evaluate_collective();
  /// The mean loss of `batch` through the mode dp wrapper (gathered output).
  Tensor dp_loss(const data::Batch& batch);
  /// The batch's tensors on device_ (the loader builds them on the CPU).
  data::Batch on_device(data::Batch b) const;

  TrainConfig cfg_;
  TrainerOptions opts_;
  DataBundle data_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::optional<optim::LrSchedule> schedule_;
  std::shared_ptr<data::Sampler> sampler_;
  uint64_t sampler_seed_ = 0;
  std::unique_ptr<data::DataLoader> loader_;
  std::vector<Tensor> params_;
  // parallel.mode ddp (group_ outlives ddp_).
  std::shared_ptr<comm::ProcessGroup> group_;
  std::unique_ptr<parallel::DistributedDataParallel> ddp_;
  std::unique_ptr<parallel::ZeroDataParallel> zero_;  // parallel.zero_stage > 0
  bool write_files_any_rank_ = true;  // TrainerOptions::write_files as given (sharded saves are collective)
  // parallel.mode dp: wraps model_ (replica 0); last_dp_memory_ is the last step's report.
  std::shared_ptr<parallel::DataParallel> dp_;
  std::vector<parallel::ReplicaMemory> last_dp_memory_;
  Device device_ = kCPU;
  std::optional<DType> autocast_;          // run.precision bf16 | f16
  std::optional<optim::GradScaler> scaler_;  // run.precision f16
  int rank_ = 0;
  int world_ = 1;
  int64_t step_ = 0;
  int64_t total_steps_ = 0;
  int64_t steps_per_epoch_ = 1;
  int64_t last_checkpoint_step_ = -1;

  // Logging window.
  std::ofstream metrics_;
  bool draw_bar_ = false;  // ProgressStyle::bar and verbose
  double window_loss_ = 0.0;
  int64_t window_steps_ = 0;
  std::chrono::steady_clock::time_point window_start_, run_start_, last_draw_;
  int64_t run_start_step_ = 0;
  double ema_loss_ = 0.0;
  bool bar_open_ = false;
};

}  // namespace strata::apps
