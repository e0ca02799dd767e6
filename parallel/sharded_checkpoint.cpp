// Sharded checkpoint save (a three-step collective: check pieces, write files, commit),
// the index-driven reader that assembles any element range from whichever shard files
// hold it, and consolidation into one plain safetensors file.
#include "parallel/sharded_checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "tensor/file_io.h"
#include "tensor/ops.h"

namespace strata::parallel {

namespace fs = std::filesystem;

namespace detail {
namespace {

constexpr const char* kFormat = "strata-sharded-checkpoint";
// Consolidation copies at most this many bytes per read/write.
constexpr int64_t kCopyChunkBytes = 64ll << 20;

bool parse_dtype_name(const std::string& s, DType* out) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8})
    if (s == safetensors_dtype_name(t)) {
      *out = t;
      return true;
    }
  return false;
}

// numel of a shape read from a file: every dim >= 0 and the product fits in int64.
bool checked_numel(const Shape& s, int64_t* out) {
  int64_t n = 1;
  for (int64_t d : s)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  *out = n;
  return true;
}

std::string strip_slashes(std::string d) {
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d;
}

std::string join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

// ---------------------------------------------------------------- rank status exchange

// Every rank's bytes on every rank: lengths first, then one all_gather padded to the max.
std::vector<std::string> all_gather_bytes(comm::ProcessGroup& group, const std::string& mine) {
  const int n = group.size();
  const Tensor lens = comm::all_gather_host(group, ops::from_vector(std::vector<int64_t>{int64_t(mine.size())}, {1}));
  const int64_t* l = lens.data<int64_t>();
  const int64_t width = std::max<int64_t>(1, *std::max_element(l, l + n));
  Tensor buf = ops::zeros({width}, DType::u8);
  std::memcpy(buf.data<uint8_t>(), mine.data(), mine.size());
  const Tensor all = comm::all_gather_host(group, buf);
  std::vector<std::string> out(static_cast<size_t>(n));
  const char* p = reinterpret_cast<const char*>(all.data<uint8_t>());
  for (int r = 0; r < n; ++r) out[size_t(r)].assign(p + int64_t(r) * width, size_t(l[r]));
  return out;
}

// What a rank reports at a synchronisation point: its failure (if any) and a payload.
struct Status {
  bool ok = true;
  bool data_error = false;  // DataError (else Error)
  std::string error;
  nlohmann::json payload;
};

template <class F>
Status run_step(F&& f) {
  Status s;
  try {
    f(s.payload);
  } catch (const DataError& e) {
    s = {false, true, e.what(), {}};
  } catch (const std::exception& e) {
    s = {false, false, e.what(), {}};
  }
  return s;
}

// Exchanges statuses; every rank gets every rank's payload, or every rank throws the
// first failing rank's error (prefixed with that rank) so all ranks report the same.
std::vector<nlohmann::json> exchange(comm::ProcessGroup& group, const Status& mine, const std::string& dir,
                                     const std::function<void()>& on_failure = {}) {
  const nlohmann::json j = {{"ok", mine.ok}, {"data", mine.data_error}, {"error", mine.error},
                            {"payload", mine.payload}};
  // Never throws on odd bytes (a rank that threw here would leave the others waiting).
  const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::vector<std::string> all = all_gather_bytes(group, text);
  std::vector<nlohmann::json> payloads;
  payloads.reserve(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    const nlohmann::json s = nlohmann::json::parse(all[r]);
    if (!s["ok"].get<bool>()) {
      if (on_failure) on_failure();
      const std::string msg =
          strata::detail::str_cat("[save_sharded] '", dir, "': rank ", r, " failed (nothing was saved): ", s["error"].get<std::string>());
      if (s["data"].get<bool>()) throw DataError(msg);
      throw Error(msg);
    }
    payloads.push_back(s["payload"]);
  }
  return payloads;
}

void remove_quietly(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

// Moves the finished tmp dir to `dir`, replacing an existing checkpoint atomically where
// the filesystem can exchange two names (renameat2), else through "<dir>.old".
void commit_dir(const std::string& tmp, const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    if (::rename(tmp.c_str(), dir.c_str()) != 0)
      STRATA_THROW(DataError, "cannot rename '", tmp, "' to '", dir, "': ", std::strerror(errno));
  } else if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    remove_quietly(tmp);  // now holds the replaced checkpoint
  } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
    const std::string old = dir + ".old";
    remove_quietly(old);
    if (::rename(dir.c_str(), old.c_str()) != 0)
      STRATA_THROW(DataError, "cannot move the old checkpoint '", dir, "' aside: ", std::strerror(errno));
    if (::rename(tmp.c_str(), dir.c_str()) != 0) {
      const std::string err = std::strerror(errno);
      (void)::rename(old.c_str(), dir.c_str());
      STRATA_THROW(DataError, "cannot rename '", tmp, "' to '", dir, "': ", err);
    }
    remove_quietly(old);
  } else {
    STRATA_THROW(DataError, "cannot replace '", dir, "' with '", tmp, "': ", std::strerror(errno));
  }
  fsync_dir(fs::path(dir).parent_path().string());
}

// Owns the temporary output file of consolidate(); removes it unless committed.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path) : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())) {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) STRATA_THROW(DataError, "cannot create '", tmp_, "': ", std::strerror(errno));
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) STRATA_THROW(DataError, "cannot write '", tmp_, "': ", std::strerror(errno));
      p += w;
      n -= size_t(w);
    }
  }
  void commit() {
    if (::fsync(fd_) != 0) STRATA_THROW(DataError, "cannot fsync '", tmp_, "': ", std::strerror(errno));
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) STRATA_THROW(DataError, "cannot close '", tmp_, "': ", std::strerror(errno));
    if (::rename(tmp_.c_str(), path_.c_str()) != 0)
      STRATA_THROW(DataError, "cannot rename '", tmp_, "' to '", path_, "': ", std::strerror(errno));
    committed_ = true;
    fsync_dir(fs::path(path_).parent_path().string());
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

nlohmann::json record_to_json(const PieceRecord& p) {
  return nlohmann::json::array({p.name, p.dtype, p.shape, p.begin, p.end});
}

}  // namespace

std::string shard_file_name(int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "shard_%05d_of_%05d.safetensors", rank, world);
  return buf;
}

std::string piece_key(const std::string& name, int64_t begin) { return name + "@" + std::to_string(begin); }

void check_coverage(const std::vector<PieceRecord>& records, const std::string& where) {
  std::map<std::string, std::vector<const PieceRecord*>> by_name;
  for (const PieceRecord& r : records) by_name[r.name].push_back(&r);
  auto in = [](const PieceRecord* p) { return p->file.empty() ? std::string() : " in '" + p->file + "'"; };
  for (auto& [name, ps] : by_name) {
    auto fail = [&](const auto&... msg) { STRATA_THROW(DataError, where, ": tensor '", name, "': ", msg...); };
    const PieceRecord& first = *ps.front();
    int64_t numel = 0;
    if (!checked_numel(first.shape, &numel)) fail("invalid global shape ", shape_str(first.shape));
    for (const PieceRecord* p : ps) {
      if (p->dtype != first.dtype)
        fail("pieces disagree on the dtype: ", first.dtype, first.file.empty() ? "" : " in '" + first.file + "'",
             " vs ", p->dtype, in(p));
      if (p->shape != first.shape)
        fail("pieces disagree on the global shape: ", shape_str(first.shape), in(&first), " vs ",
             shape_str(p->shape), in(p));
      if (p->begin < 0 || p->begin > p->end || p->end > numel)
        fail("piece [", p->begin, ", ", p->end, ")", in(p), " is outside [0, ", numel, ") (global shape ",
             shape_str(first.shape), ")");
    }
    std::vector<const PieceRecord*> stored;
    for (const PieceRecord* p : ps)
      if (p->end > p->begin) stored.push_back(p);
    std::sort(stored.begin(), stored.end(),
              [](const PieceRecord* a, const PieceRecord* b) { return a->begin < b->begin; });
    int64_t pos = 0;
    const PieceRecord* prev = nullptr;
    for (const PieceRecord* p : stored) {
      if (p->begin > pos)
        fail("elements [", pos, ", ", p->begin, ") of ", numel, " (global shape ", shape_str(first.shape),
             ") are in no piece (hole before the piece [", p->begin, ", ", p->end, ")", in(p), ")");
      if (p->begin < pos)
        fail("pieces overlap: [", prev->begin, ", ", prev->end, ")", in(prev), " and [", p->begin, ", ", p->end,
             ")", in(p));
      pos = p->end;
      prev = p;
    }
    if (pos < numel)
      fail("elements [", pos, ", ", numel, ") of ", numel, " (global shape ", shape_str(first.shape),
           ") are in no piece", prev ? " (the last piece ends" + in(prev) + ")" : std::string());
  }
}

}  // namespace detail

// ---------------------------------------------------------------- save

void save_sharded(const std::string& dir_arg, comm::ProcessGroup& group, const std::vector<ShardPiece>& my_pieces,
                  int zero_stage, const nlohmann::json& meta) {
  using namespace detail;
  const std::string dir = strip_slashes(dir_arg);
  const std::string tmp = dir + ".tmp";
  const int rank = group.rank(), world = group.size();
  const std::string my_file = shard_file_name(rank, world);

  // Step 1: rank 0 prepares "<dir>.tmp"; every rank checks its pieces and sends their list.
  std::vector<PieceRecord> mine;
  NamedTensors to_write;
  Status s1 = run_step([&](nlohmann::json& payload) {
    STRATA_CHECK(!dir.empty(), "[save_sharded] empty checkpoint directory");
    for (const ShardPiece& p : my_pieces) {
      const std::string what = strata::detail::str_cat("[save_sharded] tensor '", p.name, "' piece [", p.begin, ", ", p.end, ")");
      int64_t numel = 0;
      STRATA_CHECK(!p.name.empty(), "[save_sharded] a piece has an empty tensor name");
      STRATA_CHECK(checked_numel(p.global_shape, &numel), what, ": invalid global shape ", shape_str(p.global_shape));
      STRATA_CHECK(0 <= p.begin && p.begin <= p.end && p.end <= numel, what, ": range outside [0, ", numel,
                   ") of global shape ", shape_str(p.global_shape));
      STRATA_CHECK(p.data.defined(), what, ": data is undefined (pass a 0-element tensor for an empty piece)");
      STRATA_CHECK(p.data.numel() == p.end - p.begin, what, ": data has ", p.data.numel(), " elements (",
                   p.data.str(), "), expected ", p.end - p.begin);
      PieceRecord r{p.name, safetensors_dtype_name(p.data.dtype()), p.global_shape, p.begin, p.end, {}, {}};
      if (p.end > p.begin) {
        r.file = my_file;
        r.key = piece_key(p.name, p.begin);
        to_write.emplace_back(r.key, p.data.dim() == 1 ? p.data : ops::reshape(p.data, {p.end - p.begin}));
      }
      mine.push_back(std::move(r));
    }
    if (rank == 0) {
      std::error_code ec;
      if (fs::exists(dir, ec) &&
          !(fs::is_directory(dir, ec) && (fs::is_empty(dir, ec) || fs::exists(join(dir, kShardedIndexFile), ec))))
        STRATA_THROW(DataError, "[save_sharded] '", dir,
                     "' exists and is not a sharded checkpoint (no index.json); refusing to replace it");
      fs::remove_all(tmp, ec);
      if (ec) STRATA_THROW(DataError, "[save_sharded] cannot remove the stale '", tmp, "': ", ec.message());
      fs::create_directories(tmp, ec);
      if (ec) STRATA_THROW(DataError, "[save_sharded] cannot create '", tmp, "': ", ec.message());
    }
    nlohmann::json list = nlohmann::json::array();
    for (const PieceRecord& r : mine) list.push_back(record_to_json(r));
    payload = {{"dir", dir}, {"zero_stage", zero_stage}, {"pieces", std::move(list)}};
  });
  auto cleanup = [&] {
    if (rank == 0) remove_quietly(tmp);
  };
  const std::vector<nlohmann::json> all = exchange(group, s1, dir, cleanup);

  // Every rank runs the same checks on the same lists, so all agree without a message.
  std::vector<PieceRecord> records;
  try {
    for (int r = 0; r < world; ++r) {
      const nlohmann::json& p = all[size_t(r)];
      if (p["dir"] != all[0]["dir"])
        STRATA_THROW(Error, "[save_sharded] ranks disagree on the directory: rank 0 passed ", all[0]["dir"].dump(),
                     ", rank ", r, " passed ", p["dir"].dump());
      if (p["zero_stage"] != all[0]["zero_stage"])
        STRATA_THROW(Error, "[save_sharded] '", dir, "': ranks disagree on zero_stage: rank 0 passed ",
                     all[0]["zero_stage"].dump(), ", rank ", r, " passed ", p["zero_stage"].dump());
      for (const auto& e : p["pieces"]) {
        PieceRecord rec{e[0].get<std::string>(), e[1].get<std::string>(), e[2].get<Shape>(), e[3].get<int64_t>(),
                        e[4].get<int64_t>(), {}, {}};
        if (rec.end > rec.begin) {
          rec.file = shard_file_name(r, world);
          rec.key = piece_key(rec.name, rec.begin);
        }
        records.push_back(std::move(rec));
      }
    }
    check_coverage(records, "[save_sharded] '" + dir + "'");
  } catch (...) {
    cleanup();
    throw;
  }

  // Step 2: every rank writes its file; rank 0 learns the sizes.
  Status s2 = run_step([&](nlohmann::json& payload) {
    const std::string path = join(tmp, my_file);
    save_safetensors(path, to_write,
                     {{"format", "pt"}, {"strata_rank", std::to_string(rank)}, {"strata_world_size", std::to_string(world)}});
    payload = {{"bytes", fs::file_size(path)}};
  });
  const std::vector<nlohmann::json> written = exchange(group, s2, dir, cleanup);

  // Step 3: rank 0 checks it sees every file, writes the index and renames; all learn the outcome.
  Status s3 = run_step([&](nlohmann::json&) {
    if (rank != 0) return;
    nlohmann::json files = nlohmann::json::array();
    for (int r = 0; r < world; ++r) {
      const std::string name = shard_file_name(r, world);
      std::error_code ec;
      const uintmax_t size = fs::file_size(join(tmp, name), ec);
      if (ec || size != written[size_t(r)]["bytes"].get<uintmax_t>())
        STRATA_THROW(DataError, "[save_sharded] '", join(tmp, name), "' written by rank ", r,
                     " is not visible to rank 0 as written (", ec ? ec.message() : strata::detail::str_cat(size, " bytes"),
                     "): the checkpoint directory must be on a filesystem all ranks share");
      files.push_back(name);
    }
    nlohmann::json tensors = nlohmann::json::object();
    for (const PieceRecord& r : records) {
      nlohmann::json& t = tensors[r.name];
      if (t.is_null()) t = {{"dtype", r.dtype}, {"shape", r.shape}, {"pieces", nlohmann::json::array()}};
      if (r.end > r.begin) t["pieces"].push_back({{"file", r.file}, {"key", r.key}, {"begin", r.begin}, {"end", r.end}});
    }
    for (auto& [name, t] : tensors.items())
      std::sort(t["pieces"].begin(), t["pieces"].end(),
                [](const nlohmann::json& a, const nlohmann::json& b) { return a["begin"] < b["begin"]; });
    const nlohmann::json index = {{"format", kFormat},         {"version", kShardedCheckpointVersion},
                                  {"world_size", world},       {"zero_stage", zero_stage},
                                  {"files", std::move(files)}, {"meta", meta},
                                  {"tensors", std::move(tensors)}};
    write_file_atomic(join(tmp, kShardedIndexFile), index.dump(1) + "\n");
    fsync_dir(tmp);
    commit_dir(tmp, dir);
  });
  if (!s3.ok) cleanup();
  exchange(group, s3, dir);  // doubles as the final barrier
}

// ---------------------------------------------------------------- reader

void ShardedCheckpointReader::open(const std::string& dir_arg) {
  using namespace detail;
  dir_ = strip_slashes(dir_arg);
  tensors_.clear();
  files_.clear();
  cache_ = std::make_unique<FileCache>();
  const std::string index_path = join(dir_, kShardedIndexFile);
  const std::string text = read_file_text(index_path);  // DataError naming the file
  auto fail = [&](const auto&... msg) { STRATA_THROW(DataError, "sharded checkpoint '", index_path, "': ", msg...); };

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("not valid JSON: ", e.what());
  }
  std::vector<PieceRecord> records;
  std::map<std::string, size_t> file_index;
  try {
    if (!j.is_object() || j.value("format", "") != kFormat) fail("not a strata sharded checkpoint index");
    if (j.at("version").get<int>() != kShardedCheckpointVersion)
      fail("format version ", j.at("version").dump(), " is not supported (this build reads version ",
           kShardedCheckpointVersion, ")");
    world_size_ = j.at("world_size").get<int>();
    zero_stage_ = j.at("zero_stage").get<int>();
    meta_ = j.value("meta", nlohmann::json());
    if (world_size_ < 1) fail("world_size ", world_size_, " < 1");
    for (const auto& f : j.at("files")) {
      const std::string name = f.get<std::string>();
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
        fail("file name '", name, "' is not a plain file name");
      if (!file_index.emplace(name, files_.size()).second) fail("file '", name, "' is listed twice");
      files_.push_back(join(dir_, name));
    }
    for (const auto& [name, t] : j.at("tensors").items()) {
      auto bad = [&](const auto&... msg) { fail("tensor '", name, "': ", msg...); };
      TensorInfo info;
      const std::string dt = t.at("dtype").get<std::string>();
      if (!parse_dtype_name(dt, &info.dtype)) bad("unknown dtype '", dt, "'");
      info.shape = t.at("shape").get<Shape>();
      for (const auto& p : t.at("pieces")) {
        Piece piece;
        piece.begin = p.at("begin").get<int64_t>();
        piece.end = p.at("end").get<int64_t>();
        piece.key = p.at("key").get<std::string>();
        const std::string file = p.at("file").get<std::string>();
        const auto it = file_index.find(file);
        if (it == file_index.end()) bad("piece [", piece.begin, ", ", piece.end, ") names file '", file, "', not in \"files\"");
        if (piece.end <= piece.begin) bad("empty piece [", piece.begin, ", ", piece.end, ") in '", file, "'");
        piece.file = it->second;
        records.push_back({name, dt, info.shape, piece.begin, piece.end, file, piece.key});
        info.pieces.push_back(std::move(piece));
      }
      if (info.pieces.empty()) records.push_back({name, dt, info.shape, 0, 0, {}, {}});
      std::sort(info.pieces.begin(), info.pieces.end(), [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
      tensors_.emplace(name, std::move(info));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("malformed index: ", e.what());
  }
  check_coverage(records, "sharded checkpoint '" + index_path + "'");

  // Every file exists, is a valid safetensors file and holds each piece it is said to.
  std::vector<std::vector<std::pair<const std::string*, Piece*>>> by_file(files_.size());
  for (auto& [name, info] : tensors_)
    for (Piece& p : info.pieces) by_file[p.file].emplace_back(&name, &p);
  for (size_t f = 0; f < files_.size(); ++f) {
    auto sf = std::make_shared<SafetensorsFile>(files_[f]);
    for (auto& [name, p] : by_file[f]) {
      const SafetensorsEntry* e = sf->find(p->key);
      const TensorInfo& info = tensors_.at(*name);
      if (!e)
        STRATA_THROW(DataError, "sharded checkpoint '", files_[f], "': tensor '", *name, "': piece [", p->begin, ", ",
                     p->end, ") is missing (no key '", p->key, "' in the file; ", kShardedIndexFile, " lists it)");
      if (e->dtype != info.dtype || e->shape != Shape{p->end - p->begin})
        STRATA_THROW(DataError, "sharded checkpoint '", files_[f], "': tensor '", *name, "': piece [", p->begin, ", ",
                     p->end, ") (key '", p->key, "') is ", safetensors_dtype_name(e->dtype), shape_str(e->shape),
                     " in the file but ", kShardedIndexFile, " says ", safetensors_dtype_name(info.dtype), "[",
                     p->end - p->begin, "]");
      p->entry = *e;
    }
    if (f < kMaxOpenFiles) {
      cache_->open.resize(files_.size());
      cache_->open[f] = std::move(sf);
      cache_->order.push_back(f);
    }
  }
}

std::vector<std::string> ShardedCheckpointReader::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

bool ShardedCheckpointReader::contains(const std::string& name) const { return tensors_.count(name) != 0; }

const ShardedCheckpointReader::TensorInfo& ShardedCheckpointReader::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end())
    STRATA_THROW(DataError, "sharded checkpoint '", dir_, "': no tensor '", name, "' (it holds ", tensors_.size(),
                 " tensors)");
  return it->second;
}

const Shape& ShardedCheckpointReader::global_shape(const std::string& name) const { return info(name).shape; }
DType ShardedCheckpointReader::dtype(const std::string& name) const { return info(name).dtype; }
int64_t ShardedCheckpointReader::numel(const std::string& name) const { return shape_numel(info(name).shape); }

std::shared_ptr<const SafetensorsFile> ShardedCheckpointReader::file(size_t index) const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  auto& open = cache_->open;
  if (open.size() < files_.size()) open.resize(files_.size());
  if (!open[index]) {
    open[index] = std::make_shared<SafetensorsFile>(files_[index]);
    cache_->order.push_back(index);
    if (cache_->order.size() > kMaxOpenFiles) {
      open[cache_->order.front()].reset();  // readers still holding it keep it alive
      cache_->order.erase(cache_->order.begin());
    }
  }
  return open[index];
}

void ShardedCheckpointReader::read_raw(const std::string& name, const TensorInfo& t, int64_t begin, int64_t end,
                                       void* dst) const {
  const int64_t numel = shape_numel(t.shape);
  STRATA_CHECK(0 <= begin && begin <= end && end <= numel, "[ShardedCheckpointReader::read] tensor '", name,
               "': range [", begin, ", ", end, ") outside [0, ", numel, ")");
  const uint64_t es = element_size(t.dtype);
  auto* out = static_cast<uint8_t*>(dst);
  // First piece ending after `begin`; the pieces tile [0, numel) in order.
  auto it = std::partition_point(t.pieces.begin(), t.pieces.end(), [&](const Piece& p) { return p.end <= begin; });
  for (; it != t.pieces.end() && it->begin < end; ++it) {
    const int64_t lo = std::max(begin, it->begin), hi = std::min(end, it->end);
    const std::shared_ptr<const SafetensorsFile> f = file(it->file);
    const SafetensorsEntry* e = f->find(it->key);
    if (!e || e->begin != it->entry.begin || e->end != it->entry.end || e->dtype != it->entry.dtype)
      STRATA_THROW(DataError, "sharded checkpoint '", files_[it->file], "': tensor '", name, "': piece key '", it->key,
                   "' changed since the checkpoint was opened");
    f->read_bytes(*e, uint64_t(lo - it->begin) * es, uint64_t(hi - lo) * es, out + uint64_t(lo - begin) * es);
  }
}

Tensor ShardedCheckpointReader::read(const std::string& name, int64_t begin, int64_t end) const {
  const TensorInfo& t = info(name);
  Tensor out = Tensor::empty({std::max<int64_t>(end - begin, 0)}, t.dtype);
  read_raw(name, t, begin, end, out.raw_data());
  return out;
}

void ShardedCheckpointReader::read_into(const std::string& name, int64_t begin, int64_t end, const Tensor& dst) const {
  const TensorInfo& t = info(name);
  STRATA_CHECK(dst.defined() && dst.device().is_cpu() && dst.is_contiguous() && dst.dtype() == t.dtype &&
                   dst.numel() == end - begin,
               "[ShardedCheckpointReader::read_into] tensor '", name, "' [", begin, ", ", end, ") is ",
               dtype_name(t.dtype), " x ", end - begin, "; dst must be a contiguous CPU tensor of that: got ",
               dst.defined() ? dst.str() : std::string("undefined"));
  read_raw(name, t, begin, end, dst.raw_data());
  dst.bump_version();
}

Tensor ShardedCheckpointReader::read_full(const std::string& name) const {
  const TensorInfo& t = info(name);
  Tensor out = Tensor::empty(t.shape, t.dtype);
  read_raw(name, t, 0, out.numel(), out.raw_data());
  return out;
}

// ---------------------------------------------------------------- consolidate

void consolidate(const std::string& dir, const std::string& out_file) {
  const ShardedCheckpointReader reader(dir);
  const std::vector<std::string> names = reader.names();
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"},
                            {"strata_world_size", std::to_string(reader.world_size())},
                            {"strata_zero_stage", std::to_string(reader.zero_stage())},
                            {"strata_meta", reader.meta().dump()}};
  uint64_t offset = 0;
  for (const std::string& name : names) {
    const uint64_t nb = uint64_t(reader.numel(name)) * element_size(reader.dtype(name));
    header[name] = {{"dtype", safetensors_dtype_name(reader.dtype(name))},
                    {"shape", reader.global_shape(name)},
                    {"data_offsets", {offset, offset + nb}}};
    offset += nb;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();

  detail::AtomicFile out(out_file);
  out.write(&n, 8);
  out.write(text.data(), text.size());
  for (const std::string& name : names) {
    const int64_t numel = reader.numel(name), es = int64_t(element_size(reader.dtype(name)));
    const int64_t chunk = std::min(numel, std::max<int64_t>(1, detail::kCopyChunkBytes / es));
    const Tensor buf = Tensor::empty({chunk}, reader.dtype(name));  // reused for every chunk of this tensor
    for (int64_t b = 0; b < numel; b += chunk) {
      const int64_t e = std::min(numel, b + chunk);
      const Tensor part = ops::narrow(buf, 0, 0, e - b);
      reader.read_into(name, b, e, part);
      out.write(part.raw_data(), size_t(part.nbytes()));
    }
  }
  out.commit();
}

}  // namespace strata::parallel
