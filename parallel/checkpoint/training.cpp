// Training checkpoints over parallel/'s one save and load path: the training state in the
// index meta, LATEST pointers, whole-tensor reads for eval / sample / resume.
#include <strata/parallel/checkpoint/training.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <strata/core/json_limits.h>
#include <strata/parallel/checkpoint/layout_io.h>
#include <strata/tensor/file_io.h>

namespace strata::parallel {
namespace fs = std::filesystem;

namespace {

std::string join(const std::string& dir, const char* file) { return (fs::path(dir) / file).string(); }

// The object member `key` of `j` (by reference: no recursive copy of untrusted JSON).
const nlohmann::json& member(const nlohmann::json& j, const char* key, const std::string& file) {
  if (!j.is_object() || !j.contains(key))
    STRATA_THROW(DataError, "checkpoint state '", file, "': missing field '", key, "'");
  return j.at(key);
}

template <class T>
T field(const nlohmann::json& j, const char* key, const std::string& file) {
  const nlohmann::json& v = member(j, key, file);
  try {
    return v.get<T>();
  } catch (const nlohmann::json::exception&) {
    STRATA_THROW(DataError, "checkpoint state '", file, "': field '", key, "' has the wrong type (", json_brief(v), ")");
  }
}

std::pair<uint64_t, uint64_t> rng_pair(const nlohmann::json& j, const std::string& file) {
  if (!j.is_array() || j.size() != 2 || !j[0].is_number_unsigned() || !j[1].is_number_unsigned())
    STRATA_THROW(DataError, "checkpoint state '", file, "': RNG state ", json_brief(j), " is not [seed, offset]");
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
  const nlohmann::json j = parse_json_file_text(text, "checkpoint state '" + file + "'");
  if (!j.is_object()) STRATA_THROW(DataError, "checkpoint state '", file, "': not a JSON object");
  if (field<std::string>(j, "format", file) != "strata-checkpoint")
    STRATA_THROW(DataError, "checkpoint state '", file, "': not a strata checkpoint (format ", json_brief(j["format"]), ")");
  if (field<int>(j, "version", file) != 1)
    STRATA_THROW(DataError, "checkpoint state '", file, "': unsupported version ", json_brief(j["version"]));
  TrainingState st;
  st.step = field<int64_t>(j, "step", file);
  const nlohmann::json& loader = member(j, "loader", file);
  st.loader_epoch = field<int64_t>(loader, "epoch", file);
  st.loader_batch = field<int64_t>(loader, "batch", file);
  const nlohmann::json& rng = member(j, "rng", file);
  st.default_rng = rng_pair(member(rng, "default", file), file);
  const nlohmann::json& model_rngs = member(rng, "model", file);
  if (!model_rngs.is_array())
    STRATA_THROW(DataError, "checkpoint state '", file, "': rng.model is ", json_brief(model_rngs), ", not an array");
  for (const auto& r : model_rngs) st.model_rngs.push_back(rng_pair(r, file));
  st.sampler_seed = field<uint64_t>(rng, "sampler_seed", file);
  st.optimizer = member(j, "optimizer", file);
  st.config_yaml = field<std::string>(j, "config", file);
  if (j.contains("extra")) st.extra = j["extra"];
  if (st.step < 0 || st.loader_epoch < 0 || st.loader_batch < 0)
    STRATA_THROW(DataError, "checkpoint state '", file, "': negative step or loader position");
  return st;
}

nlohmann::json training_meta(const std::vector<std::string>& model_tensors, const nlohmann::json& optimizer_scalars,
                             const TrainingState& st) {
  nlohmann::json state = training_state_to_json(st);
  state["optimizer"] = optimizer_scalars;
  return {{kMetaTrainingState, state}, {kOptimizerMetaKey, optimizer_scalars}, {kMetaModelTensors, model_tensors}};
}

void save_checkpoint(const std::string& dir, const NamedTensors& model_state, const optim::OptimizerState& opt,
                     const TrainingState& st) {
  RankPieces pieces;
  std::vector<std::string> names;
  for (const NamedTensors* list : {&model_state, &opt.tensors})
    for (const auto& [n, t] : *list) pieces.boxes.push_back({n, t.shape(), whole_box(t.shape()), t});
  for (const auto& [n, t] : model_state) names.push_back(n);
  save_single(dir, pieces, {}, training_meta(names, opt.scalars, st));
}

void save_sharded_checkpoint(const std::string& dir, comm::ProcessGroup& group,
                             const std::vector<ShardPiece>& pieces, const CheckpointLayout& layout,
                             const std::vector<std::string>& model_tensors, const nlohmann::json& optimizer_scalars,
                             const TrainingState& st) {
  save_sharded(dir, group, RankPieces{pieces, {}}, layout,
                         training_meta(model_tensors, optimizer_scalars, st));
}

namespace {
bool is_checkpoint_dir(const fs::path& p) {
  return fs::exists(p / kIndexFile) || fs::exists(p / kStateFile);
}
}  // namespace

std::string resolve_checkpoint_dir(const std::string& path) {
  const fs::path p(path);
  if (is_checkpoint_dir(p)) return path;
  for (const fs::path& latest : {p / kLatestFile, p / "checkpoints" / kLatestFile}) {
    if (!fs::exists(latest)) continue;
    std::string name = read_file_text(latest.string());
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    // LATEST names a sibling directory: never an absolute path or one that climbs out.
    if (name.find('/') != std::string::npos || name == "." || name == "..")
      STRATA_THROW(DataError, "checkpoint pointer '", latest.string(), "' holds '", name.substr(0, 200),
                   "', not the name of a checkpoint directory next to it (no '/' allowed)");
    const fs::path dir = latest.parent_path() / name;
    std::error_code ec;
    if (!name.empty() && fs::is_symlink(fs::symlink_status(dir, ec)))  // as a symlinked shard is refused
      STRATA_THROW(DataError, "checkpoint pointer '", latest.string(), "' names '", name,
                   "', a symbolic link (to '", fs::read_symlink(dir, ec).string(),
                   "'): a run's checkpoint must be a directory of the run");
    if (name.empty() || !is_checkpoint_dir(dir))
      STRATA_THROW(DataError, "checkpoint pointer '", latest.string(), "' names '", name,
                   "', which is not a checkpoint directory (no ", kIndexFile, ")");
    return dir.string();
  }
  if (!fs::exists(p)) STRATA_THROW(DataError, "checkpoint '", path, "' does not exist");
  STRATA_THROW(DataError, "'", path, "' is not a checkpoint directory: missing '", join(path, kIndexFile),
               "' (and no checkpoints/", kLatestFile, ")");
}

std::vector<std::pair<int64_t, std::string>> step_checkpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("step_", 0) != 0 || name.find('.') != std::string::npos || !it->is_directory()) continue;
    char* end_digits = nullptr;
    const long long n = std::strtoll(name.c_str() + 5, &end_digits, 10);
    if (end_digits == name.c_str() + 5 || *end_digits != 0) continue;
    out.emplace_back(int64_t(n), name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> set_aside_later_checkpoints(const std::string& root, int64_t step, const std::string& resumed) {
  std::vector<std::string> moved;
  std::error_code ec;
  std::vector<fs::path> later;
  for (const auto& [n, name] : step_checkpoints(root))
    if (n > step) later.push_back(fs::path(root) / name);
  if (later.empty()) return moved;
  const fs::path aside = fs::path(root) / "superseded";
  fs::create_directories(aside, ec);
  if (ec) STRATA_THROW(DataError, "cannot create '", aside.string(), "': ", ec.message());
  for (const fs::path& p : later) {
    fs::path to = aside / p.filename();
    for (int k = 2; fs::exists(to); ++k) to = aside / (p.filename().string() + "." + std::to_string(k));
    fs::rename(p, to, ec);
    if (ec) STRATA_THROW(DataError, "cannot move the later checkpoint '", p.string(), "' aside to '", to.string(), "': ", ec.message());
    moved.push_back(to.string());
  }
  // LATEST named one of them (or nothing now): the resumed checkpoint is the newest of
  // this history until the run writes its next one.
  const fs::path latest = fs::path(root) / kLatestFile;
  std::string named;
  if (std::ifstream in(latest); in) std::getline(in, named);
  if (!named.empty() && !fs::is_directory(fs::path(root) / named)) {
    const fs::path r(resumed);
    if (fs::equivalent(r.parent_path(), root, ec))
      write_file_atomic(latest.string(), r.filename().string() + "\n");
    else
      fs::remove(latest, ec);  // resumed from elsewhere: no checkpoint of this history here yet
  }
  return moved;
}

std::vector<std::string> remove_stale_tmp(const std::string& root) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return removed;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const fs::file_status st = it->symlink_status(ec);
    if (ec) break;
    const size_t tmp_at = name.rfind(".tmp");
    // "<ckpt>.tmp" directories (a save that never committed) and "<file>.tmp.<pid>"
    // files (an AtomicFileWriter that died before its rename, e.g. LATEST's).
    const bool dir_tmp = fs::is_directory(st) && tmp_at != std::string::npos && tmp_at > 0 && tmp_at + 4 == name.size();
    const bool file_tmp = fs::is_regular_file(st) && name.find(".tmp.") != std::string::npos;
    if (!dir_tmp && !file_tmp) continue;
    std::error_code rm;
    fs::remove_all(it->path(), rm);
    if (rm)
      STRATA_THROW(DataError, "cannot remove the stale '", it->path().string(), "' (a save that did not finish): ",
                   rm.message());
    removed.push_back(it->path().string());
  }
  if (ec) STRATA_THROW(DataError, "cannot list '", root, "' to clean stale checkpoints: ", ec.message());
  return removed;
}

Checkpoint open_checkpoint(const std::string& path) {
  Checkpoint ck;
  ck.dir = resolve_checkpoint_dir(path);
  auto reader = std::make_shared<CheckpointReader>(ck.dir);
  ck.state_file = reader->meta_file();
  const nlohmann::json& meta = reader->meta();
  if (!meta.is_object() || !meta.contains(kMetaTrainingState) || !meta.contains(kMetaModelTensors) ||
      !meta[kMetaModelTensors].is_array())
    STRATA_THROW(DataError, "checkpoint '", ck.state_file, "': not a strata training checkpoint (meta lacks ",
                 kMetaTrainingState, " / ", kMetaModelTensors, ")");
  ck.state = parse_training_state(meta[kMetaTrainingState].dump(), ck.state_file);
  for (const auto& n : meta[kMetaModelTensors])
    if (!n.is_string() || !reader->contains(n.get<std::string>()))
      STRATA_THROW(DataError, "checkpoint '", ck.state_file, "': model tensor ", json_brief(n), " has no pieces");
  const bool v1_plain = ck.state_file == join(ck.dir, kStateFile);
  const std::string one = reader->files().size() == 1 ? reader->files()[0] : join(ck.dir, kIndexFile);
  ck.model_file = v1_plain ? join(ck.dir, kModelFile) : one;
  ck.optimizer_file = v1_plain ? join(ck.dir, kOptimizerFile) : one;
  ck.reader = std::move(reader);
  return ck;
}

Checkpoint read_checkpoint(const std::string& path, bool with_optimizer) {
  Checkpoint ck = open_checkpoint(path);
  std::set<std::string> model_names;
  for (const auto& n : ck.reader->meta()[kMetaModelTensors]) model_names.insert(n.get<std::string>());
  for (const std::string& n : ck.reader->names()) {
    if (model_names.count(n))
      ck.model.emplace_back(n, ck.reader->read_full(n));
    else if (with_optimizer)
      ck.optimizer.emplace_back(n, ck.reader->read_full(n));
  }
  if (with_optimizer && ck.reader->version() == 1 && ck.model_file != ck.optimizer_file &&
      !fs::exists(ck.optimizer_file))
    STRATA_THROW(DataError, "checkpoint '", ck.optimizer_file, "' is missing (needed to resume the optimizer)");
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
  const std::string& model_file = ck.model_file.empty() ? ck.dir : ck.model_file;
  check_tensors_match(model_file, ck.model, model.state_dict());
  if (opt) {
    try {
      opt->load_state_dict(optim::OptimizerState{ck.state.optimizer, ck.optimizer});
    } catch (const Error& e) {
      STRATA_THROW(DataError, "checkpoint '", ck.optimizer_file.empty() ? ck.dir : ck.optimizer_file, "': ", e.what());
    }
  }
  try {
    model.load_state_dict(ck.model);
  } catch (const Error& e) {
    STRATA_THROW(DataError, "checkpoint '", model_file, "': ", e.what());
  }
}

}  // namespace strata::parallel
