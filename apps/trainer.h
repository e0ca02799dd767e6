// The training driver behind `strata train`: builds everything from a TrainConfig,
// runs batch -> forward -> loss -> backward -> clip -> step -> schedule, evaluates,
// logs (progress bar on a TTY, plain lines otherwise or under mpirun, metrics.jsonl
// always), writes/resumes checkpoints bit-exactly and reports memory at the end.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <strata/parallel/checkpoint/async_writer.h>
#include <strata/parallel/checkpoint/training.h>
#include "apps/config.h"
#include "apps/factory.h"
#include "apps/moe_metrics.h"
#include "apps/progress.h"
#include <strata/comm/process_group.h>
#include <strata/data/dataloader.h>
#include <strata/optim/grad_scaler.h>
#include <strata/parallel/data/data_parallel.h>
#include <strata/parallel/memory_plan.h>
#include <strata/parallel/parallelize.h>

namespace strata::apps {

/// Result of one pass over the eval split. accuracy is set for classifiers.
struct EvalResult {
  double loss = 0.0;
  std::optional<double> accuracy;
  int64_t samples = 0;
};

struct TrainerOptions {
  /// Print progress/log lines to stdout (false for bench and tests).
  bool verbose = true;
  /// Write metrics.jsonl and checkpoints under run.dir.
  bool write_files = true;
  /// Print the per-category memory table (allocator vs plan) at the end of train().
  bool memory_report = false;
  /// The world group to train on, e.g. one rank of a local (threads) world, for `strata
  /// bench soak`. Null: mpirun's world, else one local rank (apps/world.h's init_world).
  std::shared_ptr<comm::ProcessGroup> world = nullptr;
  /// Called by train() on every rank after each optimizer step and its log, eval and
  /// checkpoint, with the step number (the soak's memory probes).
  std::function<void(int64_t step)> after_step = nullptr;
};

/// Owns the model, optimizer, data and loop state of one run. Not thread-safe.
///
/// The layout comes from parallel.{dp, tp, pp, zero_stage} (apps/layout.h): under mpirun
/// every process is a rank of the world group (comm.* options), otherwise the world is
/// one local rank. The degrees are resolved against it (dp: auto = every rank), the model
/// is composed by parallel::parallelize() on the mesh, and the loop drives the returned
/// handle without knowing the strategies: DDP at dp > 1, ZeRO at zero_stage 1-3 (units of
/// parallel.bucket_cap_mb for stages 1-2, one per transformer block for stage 3). Each dp
/// rank reads its DistributedSampler share, train.batch_size / dp samples per step;
/// logged losses are the world average; progress, metrics and evaluation happen on rank 0
/// (ZeRO-3 gathers the parameters around it); checkpoints are written through one path by
/// every rank (replicated tensors by rank 0, ZeRO slices by their owners; see
/// save_sharded_checkpoint) and resume at any world size and stage, each rank reading only
/// what it holds. Every rank must construct and train() the Trainer (collective).
///
/// parallel.replicas K: one process, K thread replicas of the model
/// (parallel::DataParallel; replicas k > 0 have their own dropout streams and take replica
/// 0's weights before every forward). Each batch is cut into K chunks, the loss is taken
/// on the gathered output and the gradients are summed onto replica 0, which is model():
/// the optimizer, clipping, evaluation and checkpoints all use it. run.threads is the
/// process's total: every replica runs with max(1, threads / K) intra-op threads.
///
/// run.device cuda[:N]: the model, its optimizer state and every batch live on that GPU
/// (cuda without an index: the local rank's GPU under mpirun, else cuda:0); the world group
/// is then on the nccl backend (comm.backend auto). Checkpoints are the same files as on
/// the CPU. run.precision bf16 | f16: forward and loss run under autocast (f32 master
/// weights); f16 also scales the loss (optim::GradScaler: a step whose gradients
/// overflowed is skipped with a warning naming the parameters, the scale is checkpointed).
///
/// At the end of train() (rank 0, verbose) a memory report compares the allocator's
/// bytes by category with parallel::plan_memory's prediction for the run's layout.
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
  /// Evaluates on the eval split, or on the test split (data().test, which must be set)
  /// when `test` (eval mode, no grad; train.eval_batches caps it).
  EvalResult evaluate(bool test = false);
  /// Writes a checkpoint of the current state into `dir` (synchronously, whatever
  /// train.checkpoint_async says).
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
  /// This process's rank and the world size (0 and 1 outside mpirun).
  int rank() const { return rank_; }
  /// Where the model and batches live (run.device resolved; cuda under mpirun: the local rank's GPU).
  Device device() const { return device_; }
  /// The f16 loss scaler (null unless run.precision is f16).
  const optim::GradScaler* grad_scaler() const { return scaler_ ? &*scaler_ : nullptr; }
  int world_size() const { return world_; }
  /// The composed model (parallelize()'s handle).
  parallel::ParallelModel& parallel_model() { return *pm_; }
  /// The DataParallel wrapper of parallel.replicas (null otherwise).
  parallel::DataParallel* data_parallel() const { return pm_->data_parallel(); }
  /// The planner's per-rank prediction for this run's layout.
  parallel::MemoryPlan predicted_memory() const;
  /// The end-of-run memory report (what train() prints): allocator vs plan, and for
  /// parallel.replicas the per-replica table of the last training step.
  std::string memory_report() const;

 private:
  double lr_at(int64_t step) const;
  parallel::TrainingState capture_state() const;
  /// Restores model, optimizer, RNGs and loader position from cfg_.train.resume
  /// ("auto": <run.dir>'s newest checkpoint when it has one, else a fresh start).
  data::LoaderState resume(int64_t batches_per_epoch);
  /// model.init_from: the weights of a Hugging Face directory, read at this layout.
  void init_from_hf();
  void log_window(double lr);
  void log_eval(const EvalResult& r, bool test = false);
  void maybe_checkpoint();
  /// save(), then `after_commit`; with train.checkpoint_async and an `after_commit`, the
  /// state is captured and copied now and both are done by the background writer.
  void save_checkpoint_state(const std::string& dir, const std::function<void()>& after_commit);
  /// After a commit: LATEST names `name`, and rotation keeps train.keep_checkpoints (the
  /// writing rank only). Runs on the background writer's thread for async checkpoints.
  void publish_checkpoint(const std::string& root, const std::string& name, int64_t step) const;
  /// The world agrees whether the background write has ended everywhere; if so, its
  /// outcome is collected (an error is thrown, naming the checkpoint). Collective.
  void poll_async_checkpoint();
  /// Waits for the background write and throws its error, if it failed.
  void finish_async_checkpoint();
  /// evaluate() on rank 0 with the full parameters in place (collective). Other ranks
  /// return an empty result.
  EvalResult evaluate_collective(bool test = false);
  /// The batch's tensors on device_ (the loader builds them on the CPU).
  data::Batch on_device(data::Batch b) const;

  TrainConfig cfg_;
  TrainerOptions opts_;
  bool write_files_any_rank_ = true;  // TrainerOptions::write_files as given (saves are collective)
  DataBundle data_;
  std::shared_ptr<nn::Module> model_;
  // The whole model's state names, taken before parallelize() (under pp a rank keeps only
  // its stages): a checkpoint's model_tensors list, written by rank 0, names every stage's.
  std::vector<std::string> whole_state_names_;
  std::unique_ptr<parallel::ParallelModel> pm_;  // the layout: owns the optimizer
  std::unique_ptr<MoeMetrics> moe_metrics_;      // the routers' stats (MoE models)
  std::unique_ptr<parallel::AsyncCheckpointWriter> async_ckpt_;  // train.checkpoint_async
  std::optional<optim::LrSchedule> schedule_;
  std::shared_ptr<data::Sampler> sampler_;  // this rank's dp share
  uint64_t sampler_seed_ = 0;
  std::unique_ptr<data::DataLoader> loader_;
  Device device_ = kCPU;
  std::optional<DType> autocast_;          // run.precision bf16 | f16 (core/precision.h)
  std::optional<optim::GradScaler> scaler_;  // run.precision f16 | f16_params
  int rank_ = 0;
  int world_ = 1;
  int64_t step_ = 0;
  int64_t total_steps_ = 0;
  int64_t steps_per_epoch_ = 1;
  int64_t last_checkpoint_step_ = -1;
  bool async_reported_ = false;  // the first async checkpoint's cost was printed
  std::string async_pending_;    // the checkpoint being written in the background
  double elapsed_before_ = 0;  // training seconds of the run before this process resumed it
  std::string resumed_from_;   // the checkpoint directory train.resume resolved to ("" for a fresh start)
  double flops_per_step_ = 0;  // model FLOPs of one optimizer step, all ranks (apps/flops.h)
  int64_t model_parameters_ = 0;  // the whole model's, counted before tp / pp split it
  double peak_flops_ = 0;      // per rank: run.peak_flops or the measured GEMM throughput

  // Logging window.
  std::unique_ptr<Progress> progress_;
  double window_loss_ = 0.0;
  int64_t window_steps_ = 0;
  std::chrono::steady_clock::time_point window_start_, run_start_;
  int64_t run_start_step_ = 0;
  double ema_loss_ = 0.0;
};

}  // namespace strata::apps
