// Checkpoint directories: atomic write (tmp dir + rename), validated read.
#include "apps/checkpoint.h"

#include <filesystem>
#include <map>
#include <set>

#include "tensor/file_io.h"

namespace strata::apps {
namespace fs = std::filesystem;

namespace {

std::string join(const std::string& dir, const char* file) { return (fs::path(dir) / file).string(); }

template <class T>
T field(const nlohmann::json& j, const char* key, const std::string& file) {
  if (!j.contains(key)) STRATA_THROW(DataError, "checkpoint state '", file, "': missing field '", key, "'");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    STRATA_THROW(DataError, "checkpoint state '", file, "': field '", key, "' has the wrong type (",
                 j.at(key).dump(), ")");
  }
}

std::pair<uint64_t, uint64_t> rng_pair(const nlohmann::json& j, const std::string& file) {
  if (!j.is_array() || j.size() != 2 || !j[0].is_number_unsigned() || !j[1].is_number_unsigned())
    STRATA_THROW(DataError, "checkpoint state '", file, "': RNG state ", j.dump(), " is not [seed, offset]");
  return {j[0].get<uint64_t>(), j[1].get<uint64_t>()};
}

}  // namespace

nlohmann::json training_state_to_json(const TrainingState& st) {
  nlohmann::json j;
  j["format"] = "strata-checkpoint";
  j["version"] = 1;
  j["step"] = st.step;
  j["loader"] = {{"epoch", st.loader_epoch}, {"batch", st.loader_batch}};
  nlohmann::json rngs = nlohmann::json::array();
  for (const auto& [s, o] : st.model_rngs) rngs.push_back({s, o});
  j["rng"] = {{"default", {st.default_rng.first, st.default_rng.second}},
              {"model", rngs},
              {"sampler_seed", st.sampler_seed}};
  j["optimizer"] = st.optimizer;
  j["schedule_step"] = st.step;
  j["config"] = st.config_yaml;
  j["extra"] = st.extra;
  return j;
}

TrainingState parse_training_state(const std::string& text, const std::string& file) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(DataError, "checkpoint state '", file, "': invalid JSON: ", e.what());
  }
  if (!j.is_object()) STRATA_THROW(DataError, "checkpoint state '", file, "': not a JSON object");
  if (field<std::string>(j, "format", file) != "strata-checkpoint")
    STRATA_THROW(DataError, "checkpoint state '", file, "': not a strata checkpoint (format ", j["format"].dump(), ")");
  if (field<int>(j, "version", file) != 1)
    STRATA_THROW(DataError, "checkpoint state '", file, "': unsupported version ", j["version"].dump());
  TrainingState st;
  st.step = field<int64_t>(j, "step", file);
  const auto loader = field<nlohmann::json>(j, "loader", file);
  st.loader_epoch = field<int64_t>(loader, "epoch", file);
  st.loader_batch = field<int64_t>(loader, "batch", file);
  const auto rng = field<nlohmann::json>(j, "rng", file);
  st.default_rng = rng_pair(field<nlohmann::json>(rng, "default", file), file);
  for (const auto& r : field<nlohmann::json>(rng, "model", file)) st.model_rngs.push_back(rng_pair(r, file));
  st.sampler_seed = field<uint64_t>(rng, "sampler_seed", file);
  st.optimizer = field<nlohmann::json>(j, "optimizer", file);
  st.config_yaml = field<std::string>(j, "config", file);
  if (j.contains("extra")) st.extra = j["extra"];
  if (st.step < 0 || st.loader_epoch < 0 || st.loader_batch < 0)
    STRATA_THROW(DataError, "checkpoint state '", file, "': negative step or loader position");
  return st;
}

void save_checkpoint(const std::string& dir, const NamedTensors& model_state, const optim::OptimizerState& opt,
                     const TrainingState& st) {
  const fs::path final_dir(dir);
  const fs::path tmp = fs::path(dir + ".tmp");
  const fs::path old = fs::path(dir + ".old");
  try {
    fs::remove_all(tmp);
    fs::create_directories(tmp);
  } catch (const fs::filesystem_error& e) {
    STRATA_THROW(DataError, "cannot create checkpoint directory '", tmp.string(), "': ", e.code().message());
  }
  nlohmann::json j = training_state_to_json(st);
  j["optimizer"] = opt.scalars;
  save_safetensors(join(tmp.string(), kModelFile), model_state, {{"format", "pt"}});
  save_safetensors(join(tmp.string(), kOptimizerFile), opt.tensors);
  write_file_atomic(join(tmp.string(), kStateFile), j.dump(2) + "\n");
  fsync_dir(tmp.string());
  try {
    if (fs::exists(final_dir)) {
      fs::remove_all(old);
      fs::rename(final_dir, old);
      fs::rename(tmp, final_dir);
      fs::remove_all(old);
    } else {
      fs::rename(tmp, final_dir);
    }
  } catch (const fs::filesystem_error& e) {
    STRATA_THROW(DataError, "cannot move checkpoint '", tmp.string(), "' to '", dir, "': ", e.code().message());
  }
  fsync_dir(final_dir.parent_path().string());
}

void save_sharded_checkpoint(const std::string& dir, comm::ProcessGroup& group,
                             const std::vector<parallel::ShardPiece>& pieces, int zero_stage,
                             const std::vector<std::string>& model_tensors, const nlohmann::json& optimizer_scalars,
                             const TrainingState& st) {
  nlohmann::json state = training_state_to_json(st);
  state["optimizer"] = optimizer_scalars;
  const nlohmann::json meta = {{"training_state", state}, {"optimizer", optimizer_scalars}, {"model_tensors", model_tensors}};
  parallel::save_sharded(dir, group, pieces, zero_stage, meta);
}

namespace {
bool is_checkpoint_dir(const fs::path& p) {
  return fs::exists(p / kStateFile) || fs::exists(p / parallel::kShardedIndexFile);
}

// A sharded checkpoint read whole.
Checkpoint read_sharded(const std::string& dir, bool with_optimizer) {
  Checkpoint ck;
  ck.dir = dir;
  parallel::ShardedCheckpointReader r(dir);
  const std::string index = join(dir, parallel::kShardedIndexFile);
  const nlohmann::json& meta = r.meta();
  if (!meta.is_object() || !meta.contains("training_state") || !meta.contains("model_tensors"))
    STRATA_THROW(DataError, "checkpoint '", index, "': not a strata training checkpoint (meta lacks training_state / "
                            "model_tensors)");
  ck.state = parse_training_state(meta["training_state"].dump(), index);
  std::set<std::string> model_names;
  for (const auto& n : meta["model_tensors"]) model_names.insert(n.get<std::string>());
  for (const std::string& n : r.names()) {
    if (model_names.count(n))
      ck.model.emplace_back(n, r.read_full(n));
    else if (with_optimizer)
      ck.optimizer.emplace_back(n, r.read_full(n));
  }
  for (const auto& n : model_names)
    if (!r.contains(n)) STRATA_THROW(DataError, "checkpoint '", index, "': model tensor '", n, "' has no pieces");
  return ck;
}
}  // namespace

std::string resolve_checkpoint_dir(const std::string& path) {
  const fs::path p(path);
  if (is_checkpoint_dir(p)) return path;
  for (const fs::path& latest : {p / kLatestFile, p / "checkpoints" / kLatestFile}) {
    if (!fs::exists(latest)) continue;
    std::string name = read_file_text(latest.string());
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    const fs::path dir = latest.parent_path() / name;
    if (name.empty() || !is_checkpoint_dir(dir))
      STRATA_THROW(DataError, "checkpoint pointer '", latest.string(), "' names '", name,
                   "', which is not a checkpoint directory (no ", kStateFile, ")");
    return dir.string();
  }
  if (!fs::exists(p)) STRATA_THROW(DataError, "checkpoint '", path, "' does not exist");
  STRATA_THROW(DataError, "'", path, "' is not a checkpoint directory: missing '", join(path, kStateFile), "'");
}

Checkpoint read_checkpoint(const std::string& path, bool with_optimizer) {
  Checkpoint ck;
  ck.dir = resolve_checkpoint_dir(path);
  if (fs::exists(fs::path(ck.dir) / parallel::kShardedIndexFile)) return read_sharded(ck.dir, with_optimizer);
  const std::string state_file = join(ck.dir, kStateFile);
  ck.state = parse_training_state(read_file_text(state_file), state_file);
  ck.model = load_safetensors(join(ck.dir, kModelFile));
  if (with_optimizer) ck.optimizer = load_safetensors(join(ck.dir, kOptimizerFile));
  return ck;
}

void check_tensors_match(const std::string& file, const NamedTensors& ckpt, const NamedTensors& expected) {
  std::map<std::string, const Tensor*> want;
  for (const auto& [n, t] : expected) want[n] = &t;
  std::vector<std::string> problems;
  std::map<std::string, bool> seen;
  for (const auto& [n, t] : ckpt) {
    seen[n] = true;
    const auto it = want.find(n);
    if (it == want.end()) {
      problems.push_back("unexpected tensor '" + n + "'");
    } else if (it->second->shape() != t.shape() || it->second->dtype() != t.dtype()) {
      problems.push_back("tensor '" + n + "' is " + dtype_name(t.dtype()) + shape_str(t.shape()) +
                         " but the model expects " + dtype_name(it->second->dtype()) + shape_str(it->second->shape()));
    }
  }
  for (const auto& [n, t] : expected)
    if (!seen.count(n)) problems.push_back("missing tensor '" + n + "'");
  if (problems.empty()) return;
  std::string msg;
  const size_t shown = std::min<size_t>(problems.size(), 8);
  for (size_t i = 0; i < shown; ++i) msg += (i ? "; " : "") + problems[i];
  if (problems.size() > shown) msg += "; and " + std::to_string(problems.size() - shown) + " more";
  STRATA_THROW(DataError, "checkpoint '", file, "' does not match the model: ", msg);
}

void load_into(const Checkpoint& ck, nn::Module& model, optim::Optimizer* opt) {
  const std::string model_file = join(ck.dir, kModelFile);
  check_tensors_match(model_file, ck.model, model.state_dict());
  if (opt) {
    try {
      opt->load_state_dict(optim::OptimizerState{ck.state.optimizer, ck.optimizer});
    } catch (const Error& e) {
      STRATA_THROW(DataError, "checkpoint '", join(ck.dir, kOptimizerFile), "': ", e.what());
    }
  }
  try {
    model.load_state_dict(ck.model);
  } catch (const Error& e) {
    STRATA_THROW(DataError, "checkpoint '", model_file, "': ", e.what());
  }
}

}  // namespace strata::apps
