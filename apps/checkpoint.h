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

/// `path` itself when it holds state.json, else the checkpoint named by
/// <path>/LATEST or <path>/checkpoints/LATEST (so a run dir works). DataError otherwise.
std::string resolve_checkpoint_dir(const std::string& path);

/// Reads state.json and model.safetensors (and optimizer.safetensors when
/// `with_optimizer`), validating every file. DataError names the file (and tensor).
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
