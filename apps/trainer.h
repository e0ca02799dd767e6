// The training driver behind `strata train`: builds everything from a TrainConfig,
// runs batch -> forward -> loss -> backward -> clip -> step -> schedule, evaluates,
// logs (progress bar on a TTY, plain lines otherwise, metrics.jsonl always) and
// writes/resumes checkpoints bit-exactly.
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
#include "parallel/ddp.h"

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
  nn::Module& model() { return *model_; }
  const TrainConfig& config() const { return cfg_; }
  /// This process's rank and the world size (0 and 1 unless parallel.mode is ddp).
  int rank() const { return rank_; }
  int world_size() const { return world_; }

 private:
  double lr_at(int64_t step) const;
  TrainingState capture_state() const;
  void log_step(double loss, double lr);
  void log_eval(const EvalResult& r);
  void write_metrics(const nlohmann::json& j);
  void maybe_checkpoint(bool final);

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
  int rank_ = 0;
  int world_ = 1;
  int64_t step_ = 0;
  int64_t total_steps_ = 0;
  int64_t steps_per_epoch_ = 1;
  int64_t last_checkpoint_step_ = -1;

  // Logging window.
  std::ofstream metrics_;
  bool tty_ = false;
  double window_loss_ = 0.0;
  int64_t window_steps_ = 0;
  std::chrono::steady_clock::time_point window_start_, run_start_, last_draw_;
  int64_t run_start_step_ = 0;
  double ema_loss_ = 0.0;
  bool bar_open_ = false;
};

}  // namespace strata::apps
