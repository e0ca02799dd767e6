// Training checkpoints: a directory holding model.safetensors (weights, readable by
// Python's safetensors), optimizer.safetensors (state tensors) and state.json (step,
// loader position, RNG states, optimizer scalars, config echo). Written as
// "<dir>.tmp" and renamed, so a crash never leaves a half checkpoint; read fully and
// validated before anything in the model or optimizer is touched.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"
#include "optim/optimizer.h"
#include "parallel/sharded_checkpoint.h"
#include "tensor/safetensors.h"

namespace strata::apps {

inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kStateFile = "state.json";
inline constexpr const char* kLatestFile = "LATEST";  // in <run.dir>/checkpoints: name of the newest

/// Everything beside the tensors that a bit-exact resume needs.
struct TrainingState {
  int64_t step = 0;           // optimizer steps done
  int64_t loader_epoch = 0;   // DataLoader position of the next batch
  int64_t loader_batch = 0;
  std::pair<uint64_t, uint64_t> default_rng{0, 0};            // strata::default_generator() {seed, offset}
  std::vector<std::pair<uint64_t, uint64_t>> model_rngs;      // model.generators() in order
  uint64_t sampler_seed = 0;
  nlohmann::json optimizer;   // Optimizer::state_dict().scalars
  std::string config_yaml;    // effective config
  nlohmann::json extra = nlohmann::json::object();  // free-form (last eval, model type, ...)
};

/// A checkpoint read from disk and validated as files (not yet against a model).
struct Checkpoint {
  std::string dir;
  NamedTensors model;
  NamedTensors optimizer;  // empty when the file is absent and not required
  TrainingState state;
};

/// Writes `dir` atomically (via "<dir>.tmp", replacing an existing `dir`).
void save_checkpoint(const std::string& dir, const NamedTensors& model_state, const optim::OptimizerState& opt,
                     const TrainingState& st);

/// Sharded form (ZeRO): save_sharded's directory (index.json + one safetensors file per
/// rank, written atomically by rank 0 after every rank's file is in). The index meta holds
/// "training_state" (state.json's content), "optimizer" (the optimizer scalars) and
/// "model_tensors" (the names that are model weights; the others are optimizer state,
/// "<kind>.<param>"). Collective over `group`; every rank passes its own pieces.
void save_sharded_checkpoint(const std::string& dir, comm::ProcessGroup& group,
                             const std::vector<parallel::ShardPiece>& pieces, int zero_stage,
                             const std::vector<std::string>& model_tensors, const nlohmann::json& optimizer_scalars,
                             const TrainingState& st);

/// `path` itself when it holds state.json (or index.json: a sharded checkpoint), else the checkpoint named by
/// <path>/LATEST or <path>/checkpoints/LATEST (so a run dir works). DataError otherwise.
std::string resolve_checkpoint_dir(const std::string& path);

/// Reads state.json and model.safetensors (and optimizer.safetensors when
/// `with_optimizer`), validating every file. DataError names the file (and tensor).
/// A sharded checkpoint is read whole (every tensor at its global shape), so eval,
/// sample and single-process resume take either form.
Checkpoint read_checkpoint(const std::string& path, bool with_optimizer);

/// Checks that `ckpt` (from `file`) has exactly the tensors of `expected` with the same
/// shapes and dtypes. DataError naming the file and the first bad tensors otherwise.
void check_tensors_match(const std::string& file, const NamedTensors& ckpt, const NamedTensors& expected);

/// Validates `ck` against `model` (and `opt` when given), then loads the weights and
/// optimizer state; on any error nothing has been modified. Does not touch RNGs.
void load_into(const Checkpoint& ck, nn::Module& model, optim::Optimizer* opt);

/// Parses state.json text ("file" names it in errors).
TrainingState parse_training_state(const std::string& text, const std::string& file);
nlohmann::json training_state_to_json(const TrainingState& st);

}  // namespace strata::apps
