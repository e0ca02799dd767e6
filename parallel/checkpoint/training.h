// Training checkpoints, as `strata train` writes and `strata eval/sample/ckpt` read them:
// thin wrappers over the one checkpoint path of parallel/
// (format v2: index.json + one safetensors file per writing rank, committed atomically),
// with the training state (step, loader position, RNG states, optimizer scalars, config
// echo) in the index meta. Reads any version and validates before anything is touched.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include <strata/nn/module.h>
#include <strata/optim/optimizer.h>
#include <memory>

#include <strata/parallel/checkpoint/reader.h>
#include <strata/parallel/checkpoint/writer.h>
#include <strata/tensor/safetensors.h>

namespace strata::parallel {

/// The files of a version 1 single-process checkpoint (still read, no longer written).
inline constexpr const char* kModelFile = kV1ModelFile;
inline constexpr const char* kOptimizerFile = kV1OptimizerFile;
inline constexpr const char* kStateFile = kV1StateFile;
inline constexpr const char* kLatestFile = "LATEST";  // in <run.dir>/checkpoints: name of the newest
/// Keys of the index meta of a training checkpoint: the TrainingState (state.json's
/// content in v1), the optimizer scalars, and the names that are model weights (the other
/// tensors are optimizer state, "<kind>.<param>").
inline constexpr const char* kMetaTrainingState = "training_state";
inline constexpr const char* kMetaModelTensors = "model_tensors";

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
  NamedTensors model;      // read whole by read_checkpoint(); empty after open_checkpoint()
  NamedTensors optimizer;  // empty unless asked for
  TrainingState state;
  std::string state_file;      // where `state` came from (index.json, or a v1 state.json)
  std::string model_file;      // the file to name for weights (the one shard file, a v1
                               // model.safetensors, else index.json)
  std::string optimizer_file;  // likewise for optimizer state
  /// The open checkpoint, for reading ranges or boxes of any tensor (e.g. a rank's shard).
  std::shared_ptr<const CheckpointReader> reader;
};

/// Writes `dir` atomically by this process alone (parallel::save_single: one shard file,
/// an ordinary safetensors file of the model and optimizer tensors under their names).
/// Single process and DDP (rank 0 owns the replicated tensors) call it on one rank.
void save_checkpoint(const std::string& dir, const NamedTensors& model_state, const optim::OptimizerState& opt,
                     const TrainingState& st);

/// Every rank's pieces through parallel::save_sharded: the one save path of `strata train`
/// for every layout (replicated tensors come from rank 0 only, ZeRO slices from every
/// rank). Collective over `group`; `layout` records the mesh and the ZeRO stage. The index
/// meta is as save_checkpoint's.
void save_sharded_checkpoint(const std::string& dir, comm::ProcessGroup& group,
                             const std::vector<ShardPiece>& pieces, const CheckpointLayout& layout,
                             const std::vector<std::string>& model_tensors, const nlohmann::json& optimizer_scalars,
                             const TrainingState& st);

/// The index meta of a training checkpoint (keys above).
nlohmann::json training_meta(const std::vector<std::string>& model_tensors, const nlohmann::json& optimizer_scalars,
                             const TrainingState& st);

/// `path` itself when it holds index.json (or a v1 state.json), else the checkpoint named
/// by <path>/LATEST or <path>/checkpoints/LATEST (so a run dir works). LATEST must hold
/// the plain name of a sibling directory (no '/', not "." or ".."). DataError otherwise.
std::string resolve_checkpoint_dir(const std::string& path);

/// Removes what failed saves left in the checkpoint root `root` (<run.dir>/checkpoints):
/// every "<name>.tmp" directory (save_sharded's staging directory of a save that never
/// committed) and every "<file>.tmp.<pid>" regular file (an atomic write that died before
/// its rename). Symlinks are removed, not followed. Call it once at trainer start, on rank
/// 0, before any save. Returns the removed paths; a missing `root` is not an error.
/// DataError naming the path if one cannot be removed.
std::vector<std::string> remove_stale_tmp(const std::string& root);

/// The complete checkpoints "step_N" directly in the checkpoints directory `root` (N
/// digits; not a "<name>.tmp" staging directory), as (N, name), by step. Empty when `root`
/// does not exist.
std::vector<std::pair<int64_t, std::string>> step_checkpoints(const std::string& root);

/// Resuming at `step` into the checkpoints directory `root`: every complete checkpoint
/// "step_N" there with N > step (a later point of the run being resumed from its past) is
/// moved, not deleted, into `root`/superseded/ (a name taken there gets a ".2", ".3", ...
/// suffix), and LATEST is rewritten to `resumed` when it names one of them. Rotation then
/// sees only the steps of the new history, so it never deletes what the resumed run writes
/// and LATEST never dangles. Returns the moved paths (their new places). DataError naming
/// the path when a move fails.
std::vector<std::string> set_aside_later_checkpoints(const std::string& root, int64_t step, const std::string& resumed);

/// Opens the checkpoint at `path` (resolve_checkpoint_dir; any version), validates its
/// files and parses the training state, reading no tensor. DataError names the file.
Checkpoint open_checkpoint(const std::string& path);

/// open_checkpoint, then every model tensor (and every optimizer tensor when
/// `with_optimizer`) read whole at its global shape, so eval, sample and single-process
/// resume take a checkpoint of any layout.
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

}  // namespace strata::parallel
