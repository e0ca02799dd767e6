// The checkpoint reader: parses index.json (v2 boxes, v1 flat ranges) or a v1 plain
// directory into one table of stored boxes, validates it, and assembles any requested
// box from the stored boxes that intersect it; plus consolidation into one file.
#include <strata/parallel/checkpoint/reader.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>

#include <strata/core/json_limits.h>

#include <strata/tensor/file_io.h>
#include <strata/tensor/ops.h>

namespace strata::parallel {
namespace fs = std::filesystem;
namespace {

using detail::join;
using detail::strip_slashes;

using ojson = nlohmann::ordered_json;
using detail::PieceRecord;

// Consolidation copies at most this many bytes per read/write.
constexpr int64_t kCopyChunkBytes = 64ll << 20;
// A coalesced read (several runs and the gaps between them) is at most this long.
constexpr uint64_t kMaxSpanBytes = 16ull << 20;

bool parse_dtype_name(const std::string& s, DType* out) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8})
    if (s == safetensors_dtype_name(t)) {
      *out = t;
      return true;
    }
  return false;
}

MeshDims default_mesh(int world) { return {{"pp", 1}, {"dp", world}, {"tp", 1}}; }

// An integer field of index.json in [lo, hi] (nlohmann's get<int> would wrap 2^40 to 0).
int int_field(const ojson& j, const char* key, int lo, int hi, const std::string& index_path) {
  const ojson& v = j.at(key);
  const bool ok = v.is_number_unsigned()
                      ? v.get<uint64_t>() <= uint64_t(hi) && int64_t(v.get<uint64_t>()) >= lo
                      : v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  if (!ok)
    STRATA_THROW(DataError, "checkpoint '", index_path, "': \"", key, "\" is ", json_brief(v), ", not an integer in [",
                 lo, ", ", hi, "]");
  return v.get<int>();
}

// Index of the first non-finite element of `n` elements of a floating dtype, or -1.
int64_t first_nonfinite(const uint8_t* p, int64_t n, DType dt) {
  auto scan = [&](auto tag, auto bad) -> int64_t {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, p + i * int64_t(sizeof(T)), sizeof(T));
      if (bad(v)) return i;
    }
    return -1;
  };
  switch (dt) {
    case DType::f32: return scan(float{}, [](float v) { return !std::isfinite(v); });
    case DType::f64: return scan(double{}, [](double v) { return !std::isfinite(v); });
    case DType::f16: return scan(uint16_t{}, [](uint16_t v) { return (v & 0x7c00) == 0x7c00; });
    case DType::bf16: return scan(uint16_t{}, [](uint16_t v) { return (v & 0x7f80) == 0x7f80; });
    default: return -1;
  }
}

bool env_allows_nonfinite() {
  const char* v = std::getenv(kAllowNonfiniteEnv);
  return v && *v && std::string(v) != "0";
}

}  // namespace

// ---------------------------------------------------------------- open

void CheckpointReader::open(const std::string& dir_arg) {
  dir_ = strip_slashes(dir_arg);
  tensors_.clear();
  files_.clear();
  cache_ = std::make_unique<FileCache>();
  const std::string index_path = join(dir_, kIndexFile);
  std::error_code ec;
  if (fs::exists(index_path, ec) || !fs::exists(join(dir_, kV1StateFile), ec)) {
    if (!fs::exists(index_path, ec))
      STRATA_THROW(DataError, "cannot open checkpoint '", dir_, "': no '", index_path, "' (nor the '", kV1StateFile,
                   "' of a version 1 single-process checkpoint)", fs::exists(dir_, ec) ? "" : "; the directory does not exist");
    open_index(read_file_text(index_path), index_path);
  } else {
    open_v1_plain();
  }
}

void CheckpointReader::open_index(const std::string& text, const std::string& index_path) {
  meta_file_ = index_path;
  auto fail = [&](const auto&... msg) { STRATA_THROW(DataError, "checkpoint '", index_path, "': ", msg...); };
  ojson j;
  try {
    j = parse_ordered_json_file_text(text, "checkpoint '" + index_path + "'");
  } catch (const nlohmann::json::exception& e) {
    fail("not valid JSON: ", e.what());
  }
  std::vector<PieceRecord> records;
  std::map<std::string, size_t> file_index;
  std::vector<std::string> file_names;
  try {
    if (!j.is_object() || !j.contains("version")) fail("not a strata checkpoint index (no \"version\")");
    version_ = int_field(j, "version", INT32_MIN, INT32_MAX, index_path);
    const std::string format = j.value("format", "");
    if (version_ > kCheckpointVersion || version_ < 1)
      fail("format version ", version_, " is not supported (this build reads versions 1 and ", kCheckpointVersion, ")");
    if (format != (version_ == 1 ? kShardedFormatV1 : kCheckpointFormat))
      fail("not a strata checkpoint index (format \"", format, "\" at version ", version_, ")");
    world_size_ = int_field(j, "world_size", 1, 1 << 24, index_path);
    zero_stage_ = int_field(j, "zero_stage", 0, 3, index_path);
    meta_ = nlohmann::json::parse(j.value("meta", ojson()).dump());
    if (world_size_ < 1) fail("world_size ", world_size_, " < 1");
    mesh_.clear();
    if (version_ == 1) {
      mesh_ = default_mesh(world_size_);
    } else {
      int64_t product = 1;
      for (const auto& [name, size] : j.at("mesh").items()) {
        mesh_.emplace_back(name, int_field(j.at("mesh"), name.c_str(), 1, 1 << 24, index_path));
        product *= mesh_.back().second;
      }
      if (product != world_size_) fail("the mesh sizes multiply to ", product, ", not world_size ", world_size_);
    }
    for (const auto& f : j.at("files")) {
      const std::string name = f.get<std::string>();
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
        fail("file name '", name, "' is not a plain file name");
      if (!file_index.emplace(name, files_.size()).second) fail("file '", name, "' is listed twice");
      files_.push_back(join(dir_, name));
      file_names.push_back(name);
    }
    if (files_.size() != size_t(world_size_))
      fail("world_size ", world_size_, " but ", files_.size(), " shard files are listed (one per writing rank)");
    checksums_.assign(files_.size(), std::nullopt);
    if (j.contains("checksums")) {
      const ojson& sums = j.at("checksums");
      if (!sums.is_object() || sums.size() != files_.size())
        fail("\"checksums\" must be an object with one entry per file (", files_.size(), "), got ", json_brief(sums));
      for (const auto& [name, v] : sums.items()) {
        const auto it = file_index.find(name);
        if (it == file_index.end()) fail("\"checksums\" names '", name, "', which is not in \"files\"");
        const std::string hex = v.is_object() && v.contains("crc32") && v["crc32"].is_string() ? v["crc32"].get<std::string>() : "";
        char* end = nullptr;
        const unsigned long crc = std::strtoul(hex.c_str(), &end, 16);
        if (hex.size() != 8 || *end != '\0')
          fail("checksum of '", name, "' is ", json_brief(v), ", not {\"crc32\": \"<8 hex digits>\"}");
        checksums_[it->second] = uint32_t(crc);
      }
    }
    for (const auto& item : j.at("tensors").items()) {
      const std::string& name = item.key();  // not a structured binding: clang 14 cannot capture one
      const nlohmann::json& t = item.value();
      auto bad = [&](const auto&... msg) { fail("tensor '", name, "': ", msg...); };
      TensorInfo info;
      const std::string dt = t.at("dtype").get<std::string>();
      if (!parse_dtype_name(dt, &info.dtype)) bad("unknown dtype '", dt, "'");
      info.shape = t.at("shape").get<Shape>();
      for (const auto& p : t.at("pieces")) {
        Piece piece;
        piece.key = p.at("key").get<std::string>();
        const std::string file = p.at("file").get<std::string>();
        const auto it = file_index.find(file);
        if (it == file_index.end()) bad("piece '", piece.key, "' names file '", file, "', not in \"files\"");
        piece.file = it->second;
        if (version_ == 1) {
          const int64_t b = p.at("begin").get<int64_t>(), e = p.at("end").get<int64_t>();
          if (e <= b) bad("empty piece [", b, ", ", e, ") in '", file, "'");
          if (b < 0 || e > shape_numel(info.shape))
            bad("piece [", b, ", ", e, ") in '", file, "' is outside [0, ", shape_numel(info.shape), ") (global shape ",
                shape_str(info.shape), ")");
          piece.entry.shape = {e - b};  // the flat range, cut into boxes over this one 1-D entry
          for (const FlatBox& fb : flat_range_to_boxes(info.shape, b, e)) {
            Piece q = piece;
            q.box = fb.box;
            q.elem_offset = fb.flat_begin - b;
            records.push_back({name, dt, info.shape, q.box, file, piece.key});
            info.pieces.push_back(std::move(q));
          }
        } else {
          piece.box = {p.at("offsets").get<std::vector<int64_t>>(), p.at("lengths").get<std::vector<int64_t>>()};
          if (piece.box.empty() && box_inside(piece.box, info.shape) && piece.box != whole_box(info.shape))
            bad("empty piece ", box_str(piece.box), " in '", file, "'");
          piece.entry.shape = piece.box.lengths;
          records.push_back({name, dt, info.shape, piece.box, file, piece.key});
          info.pieces.push_back(std::move(piece));
        }
      }
      std::sort(info.pieces.begin(), info.pieces.end(),
                [](const Piece& a, const Piece& b) { return a.box.offsets < b.box.offsets; });
      if (info.pieces.empty()) records.push_back({name, dt, info.shape, {}, {}, {}});
      tensors_.emplace(name, std::move(info));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("malformed index: ", e.what());
  }
  detail::check_coverage(records, "checkpoint '" + index_path + "'");
  check_files(kIndexFile);
  require_finite_by_default();
}

void CheckpointReader::require_finite_by_default() {
  // Model weights and optimizer state alike: an inf in Adam's exp_avg_sq turns every weight
  // NaN one step after the resume.
  const bool allow = env_allows_nonfinite();
  for (auto& [name, info] : tensors_) info.require_finite = !allow;
}

void CheckpointReader::allow_nonfinite(bool allow) {
  if (allow)
    for (auto& [name, info] : tensors_) info.require_finite = false;
  else
    require_finite_by_default();
}

void CheckpointReader::open_v1_plain() {
  version_ = 1;
  world_size_ = 1;
  zero_stage_ = 0;
  mesh_ = default_mesh(1);
  meta_file_ = join(dir_, kV1StateFile);
  const nlohmann::json state = parse_json_file_text(read_file_text(meta_file_), "checkpoint state '" + meta_file_ + "'");
  if (!state.is_object()) STRATA_THROW(DataError, "checkpoint state '", meta_file_, "': not a JSON object");
  files_.push_back(join(dir_, kV1ModelFile));
  std::error_code ec;
  if (fs::exists(join(dir_, kV1OptimizerFile), ec)) files_.push_back(join(dir_, kV1OptimizerFile));
  nlohmann::json model_names = nlohmann::json::array();
  for (size_t f = 0; f < files_.size(); ++f) {
    auto sf = std::make_shared<SafetensorsFile>(files_[f]);  // DataError naming the file (and tensor)
    for (const SafetensorsEntry& e : sf->header().entries) {
      if (tensors_.count(e.name))
        STRATA_THROW(DataError, "checkpoint '", files_[f], "': tensor '", e.name, "' is also in '", files_[0], "'");
      if (f == 0) model_names.push_back(e.name);
      tensors_[e.name] = {e.dtype, e.shape, {Piece{whole_box(e.shape), f, e.name, e, 0}}};
    }
    cache_->open.resize(files_.size());
    cache_->open[f] = std::move(sf);
    cache_->order.push_back(f);
  }
  meta_ = {{"training_state", state}, {"optimizer", state.value("optimizer", nlohmann::json())},
           {"model_tensors", model_names}};
  checksums_.assign(files_.size(), std::nullopt);  // v1 wrote none
  require_finite_by_default();
}

// Every file exists, is a valid safetensors file and holds each piece it is said to.
void CheckpointReader::check_files(const std::string& index_name) {
  std::vector<std::vector<std::pair<const std::string*, Piece*>>> by_file(files_.size());
  for (auto& [name, info] : tensors_)
    for (Piece& p : info.pieces) by_file[p.file].emplace_back(&name, &p);
  cache_->open.resize(files_.size());
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(dir_, ec);
  for (size_t f = 0; f < files_.size(); ++f) {
    // A shard that is a symlink out of the directory is refused: pieces resolve inside it.
    const fs::path real = fs::weakly_canonical(files_[f], ec);
    if (!ec && real.parent_path() != root)
      STRATA_THROW(DataError, "checkpoint '", files_[f], "': resolves to '", real.string(),
                   "', outside the checkpoint directory '", root.string(), "'");
    auto sf = std::make_shared<SafetensorsFile>(files_[f]);
    if (const uint32_t crc = checksums_[f] ? sf->file_crc32() : 0; checksums_[f] && crc != *checksums_[f]) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%08x, but the file's is %08x", *checksums_[f], crc);
      STRATA_THROW(DataError, "checkpoint '", files_[f], "': CRC32 mismatch (", index_name, " records ", buf,
                   "): the file is corrupt or was changed after it was written");
    }
    for (auto& [name, p] : by_file[f]) {
      const SafetensorsEntry* e = sf->find(p->key);
      const TensorInfo& info = tensors_.at(*name);
      if (!e)
        STRATA_THROW(DataError, "checkpoint '", files_[f], "': tensor '", *name, "': piece ", box_str(p->box),
                     " is missing (no key '", p->key, "' in the file; ", index_name, " lists it)");
      if (e->dtype != info.dtype || e->shape != p->entry.shape)
        STRATA_THROW(DataError, "checkpoint '", files_[f], "': tensor '", *name, "': piece ", box_str(p->box),
                     " (key '", p->key, "') is ", safetensors_dtype_name(e->dtype), shape_str(e->shape), " in the file but ",
                     index_name, " says ", safetensors_dtype_name(info.dtype), shape_str(p->entry.shape));
      p->entry = *e;
    }
    if (f < kMaxOpenFiles) {
      cache_->open[f] = std::move(sf);
      cache_->order.push_back(f);
    }
  }
}

// ---------------------------------------------------------------- lookups

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

bool CheckpointReader::contains(const std::string& name) const { return tensors_.count(name) != 0; }

const CheckpointReader::TensorInfo& CheckpointReader::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end())
    STRATA_THROW(DataError, "checkpoint '", dir_, "': no tensor '", name, "' (it holds ", tensors_.size(), " tensors)");
  return it->second;
}

const Shape& CheckpointReader::global_shape(const std::string& name) const { return info(name).shape; }
DType CheckpointReader::dtype(const std::string& name) const { return info(name).dtype; }
int64_t CheckpointReader::numel(const std::string& name) const { return shape_numel(info(name).shape); }

std::shared_ptr<const SafetensorsFile> CheckpointReader::file(size_t index) const {
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

// ---------------------------------------------------------------- reads

void CheckpointReader::read_raw(const std::string& name, const TensorInfo& t, const Box& box, uint8_t* dst) const {
  STRATA_CHECK(box_inside(box, t.shape), "[CheckpointReader::read] tensor '", name, "' of shape ", shape_str(t.shape),
               ": box ", box_str(box), " is outside it");
  const uint64_t es = element_size(t.dtype);
  struct Run {
    int64_t src, dst, count;  // elements
  };
  std::vector<Run> runs;
  std::vector<uint8_t> bounce;
  for (const Piece& p : t.pieces) {
    const std::optional<Box> inter = intersect(p.box, box);
    if (!inter) continue;
    const std::shared_ptr<const SafetensorsFile> f = file(p.file);
    const SafetensorsEntry* e = f->find(p.key);
    if (!e || e->begin != p.entry.begin || e->end != p.entry.end || e->dtype != p.entry.dtype)
      STRATA_THROW(DataError, "checkpoint '", files_[p.file], "': tensor '", name, "': piece key '", p.key,
                   "' changed since the checkpoint was opened");
    runs.clear();
    for_each_copy_run(*inter, p.box, box, [&](int64_t s, int64_t d, int64_t n) { runs.push_back({s, d, n}); });
    const uint64_t base = uint64_t(p.elem_offset) * es;
    // Runs come in increasing file order; neighbours closer than kMaxGapBytes share one pread.
    for (size_t i = 0; i < runs.size();) {
      const uint64_t span_begin = uint64_t(runs[i].src) * es;
      uint64_t span_end = uint64_t(runs[i].src + runs[i].count) * es;
      size_t j = i + 1;
      for (; j < runs.size(); ++j) {
        const uint64_t b = uint64_t(runs[j].src) * es, en = uint64_t(runs[j].src + runs[j].count) * es;
        if (b - span_end > kMaxGapBytes || en - span_begin > kMaxSpanBytes) break;
        span_end = en;
      }
      if (j == i + 1) {
        f->read_bytes(*e, base + span_begin, span_end - span_begin, dst + uint64_t(runs[i].dst) * es);
      } else {
        bounce.resize(span_end - span_begin);
        f->read_bytes(*e, base + span_begin, span_end - span_begin, bounce.data());
        for (size_t k = i; k < j; ++k)
          std::memcpy(dst + uint64_t(runs[k].dst) * es, bounce.data() + uint64_t(runs[k].src) * es - span_begin,
                      uint64_t(runs[k].count) * es);
      }
      i = j;
    }
    if (t.require_finite)
      for (const Run& r : runs)
        if (const int64_t k = first_nonfinite(dst + uint64_t(r.dst) * es, r.count, t.dtype); k >= 0)
          STRATA_THROW(DataError, "checkpoint '", files_[p.file], "': tensor '", name, "' (piece key '", p.key,
                       "', element ", r.src + k, " of the piece) is not finite (NaN or inf); set ", kAllowNonfiniteEnv,
                       "=1 to load it anyway");
  }
}

void CheckpointReader::read_box(const std::string& name, const Box& box, const Tensor& dst) const {
  const TensorInfo& t = info(name);
  STRATA_CHECK(dst.defined() && dst.device().is_cpu() && dst.is_contiguous() && dst.dtype() == t.dtype &&
                   dst.numel() == box.numel(),
               "[CheckpointReader::read_box] tensor '", name, "' box ", box_str(box), " is ", dtype_name(t.dtype), " x ",
               box.numel(), "; dst must be a contiguous CPU tensor of that: got ",
               dst.defined() ? dst.str() : std::string("undefined"));
  read_raw(name, t, box, static_cast<uint8_t*>(dst.raw_data()));
  dst.bump_version();
}

Tensor CheckpointReader::read_box(const std::string& name, const Box& box) const {
  const TensorInfo& t = info(name);
  STRATA_CHECK(box_inside(box, t.shape), "[CheckpointReader::read_box] tensor '", name, "' of shape ",
               shape_str(t.shape), ": box ", box_str(box), " is outside it");
  Tensor out = Tensor::empty(box.lengths, t.dtype);
  read_raw(name, t, box, static_cast<uint8_t*>(out.raw_data()));
  return out;
}

void CheckpointReader::read_into(const std::string& name, int64_t begin, int64_t end, const Tensor& dst) const {
  const TensorInfo& t = info(name);
  const int64_t n = shape_numel(t.shape);
  STRATA_CHECK(0 <= begin && begin <= end && end <= n, "[CheckpointReader::read] tensor '", name, "': range [", begin,
               ", ", end, ") outside [0, ", n, ")");
  STRATA_CHECK(dst.defined() && dst.device().is_cpu() && dst.is_contiguous() && dst.dtype() == t.dtype &&
                   dst.numel() == end - begin,
               "[CheckpointReader::read_into] tensor '", name, "' [", begin, ", ", end, ") is ", dtype_name(t.dtype),
               " x ", end - begin, "; dst must be a contiguous CPU tensor of that: got ",
               dst.defined() ? dst.str() : std::string("undefined"));
  auto* out = static_cast<uint8_t*>(dst.raw_data());
  const uint64_t es = element_size(t.dtype);
  for (const FlatBox& fb : flat_range_to_boxes(t.shape, begin, end))
    read_raw(name, t, fb.box, out + uint64_t(fb.flat_begin - begin) * es);
  dst.bump_version();
}

Tensor CheckpointReader::read(const std::string& name, int64_t begin, int64_t end) const {
  Tensor out = Tensor::empty({std::max<int64_t>(end - begin, 0)}, dtype(name));
  read_into(name, begin, end, out);
  return out;
}

Tensor CheckpointReader::read_full(const std::string& name) const { return read_box(name, whole_box(global_shape(name))); }

// ---------------------------------------------------------------- consolidate

void consolidate(const std::string& dir, const std::string& out_file) {
  const CheckpointReader reader(dir);
  const std::vector<std::string> names = reader.names();
  // The model tensors the writer listed must all be there: an index that lost one would
  // otherwise give a consolidated file without it.
  const nlohmann::json& meta = reader.meta();
  if (meta.is_object() && meta.contains("model_tensors") && meta["model_tensors"].is_array())
    for (const auto& n : meta["model_tensors"])
      if (n.is_string() && std::find(names.begin(), names.end(), n.get<std::string>()) == names.end())
        STRATA_THROW(DataError, "checkpoint '", dir, "': meta.model_tensors lists '", n.get<std::string>(),
                     "' but the index holds no such tensor");
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

  AtomicFileWriter out(out_file);
  out.write(&n, 8);
  out.write(text.data(), text.size());
  for (const std::string& name : names) {
    const int64_t numel = reader.numel(name), es = int64_t(element_size(reader.dtype(name)));
    const int64_t chunk = std::min(numel, std::max<int64_t>(1, kCopyChunkBytes / es));
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
