// HfModelDir: validates a model directory against its config's convention table on open,
// then serves flat ranges of strata's tensors by reading only the bytes they occupy.
#include "apps/hf/hf_reader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include <strata/core/error.h>
#include <strata/core/json_limits.h>
#include <strata/tensor/file_io.h>
#include <strata/tensor/ops.h>

namespace strata::apps::hf {
namespace fs = std::filesystem;
namespace {

// Column blocks of a transposed weight are read row by row; rows whose gap is at most
// this many bytes share one read, of at most kMaxSpanBytes.
constexpr uint64_t kMaxGapBytes = 4096;
constexpr uint64_t kMaxSpanBytes = 16ull << 20;

std::string join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

// Index of the first NaN / inf among `n` elements of a floating dtype at `p`, or -1.
int64_t first_nonfinite(const void* p, int64_t n, DType dt) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (int64_t i = 0; i < n; ++i) {
    if (dt == DType::f32) {
      float v;
      std::memcpy(&v, b + 4 * i, 4);
      if (!std::isfinite(v)) return i;
    } else {
      uint16_t v;
      std::memcpy(&v, b + 2 * i, 2);
      const uint16_t exp_mask = dt == DType::f16 ? 0x7c00 : 0x7f80;  // all-ones exponent: inf or NaN
      if ((v & exp_mask) == exp_mask) return i;
    }
  }
  return -1;
}

}  // namespace

bool is_hf_model_dir(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(join(dir, kConfigFile), ec) && !fs::exists(join(dir, "index.json"), ec);
}

HfModelDir::HfModelDir(const std::string& dir, DType dtype) : dir_(dir), dtype_(dtype) {
  STRATA_CHECK(is_floating(dtype), "[HfModelDir] reads deliver a floating dtype, not ", dtype_name(dtype));
  spec_ = read_hf_config(dir);
  meta_ = {{"hf_architecture", spec_.architecture}};

  // The data files: the shards an index lists, or the one model.safetensors.
  std::error_code ec;
  const std::string index_path = join(dir, kWeightsIndexFile);
  std::map<std::string, std::string> weight_map;  // hf name -> file name (sharded only)
  std::vector<std::string> file_names;
  if (fs::exists(index_path, ec)) {
    const nlohmann::json j = parse_json_file_text(read_file_text(index_path), "Hugging Face index '" + index_path + "'");
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      STRATA_THROW(DataError, "Hugging Face index '", index_path, "': no \"weight_map\" object");
    std::set<std::string> names;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string())
        STRATA_THROW(DataError, "Hugging Face index '", index_path, "': tensor '", name, "' maps to ", json_brief(file),
                     ", not a file name");
      const std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        STRATA_THROW(DataError, "Hugging Face index '", index_path, "': tensor '", name, "' maps to '", f,
                     "', not a file name inside the directory");
      weight_map[name] = f;
      names.insert(f);
    }
    file_names.assign(names.begin(), names.end());
  } else if (fs::exists(join(dir, kWeightsFile), ec)) {
    file_names.push_back(kWeightsFile);
  } else {
    STRATA_THROW(DataError, "Hugging Face model directory '", dir, "': neither ", kWeightsFile, " nor ",
                 kWeightsIndexFile, " (only safetensors weights are read; re-save with safe_serialization=True)");
  }

  // Every tensor of every file, by name; the index (if any) must say where each one is.
  struct Found {
    std::shared_ptr<SafetensorsFile> file;
    const SafetensorsEntry* entry;
    bool used = false;
  };
  std::map<std::string, Found> found;
  for (const std::string& name : file_names) {
    auto f = std::make_shared<SafetensorsFile>(join(dir, name));  // DataError naming the file (and tensor)
    for (const SafetensorsEntry& e : f->header().entries) {
      if (!weight_map.empty()) {
        const auto it = weight_map.find(e.name);
        if (it == weight_map.end() || it->second != name)
          STRATA_THROW(DataError, "Hugging Face shard '", f->path(), "': tensor '", e.name, "' is not where ",
                       kWeightsIndexFile, " says (",
                       it == weight_map.end() ? std::string("it is not listed") : "listed in '" + it->second + "'", ")");
      }
      if (!found.emplace(e.name, Found{f, &e}).second)
        STRATA_THROW(DataError, "Hugging Face shard '", f->path(), "': tensor '", e.name, "' is stored twice");
    }
  }
  for (const auto& [name, file] : weight_map)
    if (!found.count(name))
      STRATA_THROW(DataError, "Hugging Face shard '", join(dir, file), "': tensor '", name, "' is missing (",
                   kWeightsIndexFile, " lists it there)");

  for (TensorMapping& m : tensor_table(spec_)) {
    auto it = found.find(m.hf);
    for (const std::string& alias : hf_aliases(spec_, m.hf))
      if (it == found.end()) it = found.find(alias);
    if (it == found.end())
      STRATA_THROW(DataError, "Hugging Face model directory '", dir, "': tensor '", m.hf, "' is missing (",
                   spec_.architecture, " with this config.json has it; strata's '", m.strata, "')",
                   file_names.size() == 1 ? " in '" + join(dir, file_names[0]) + "'" : std::string());
    const SafetensorsEntry& e = *it->second.entry;
    const std::string& path = it->second.file->path();
    if (e.dtype != DType::f32 && e.dtype != DType::f16 && e.dtype != DType::bf16)
      STRATA_THROW(DataError, "Hugging Face shard '", path, "': tensor '", e.name, "' is ",
                   safetensors_dtype_name(e.dtype), " (F32, F16 and BF16 are read)");
    Shape want = m.shape;
    if (m.transposed) std::reverse(want.begin(), want.end());
    if (e.shape != want)
      STRATA_THROW(DataError, "Hugging Face shard '", path, "': tensor '", e.name, "' is ", shape_str(e.shape),
                   " but config.json's ", spec_.architecture, " needs ", shape_str(want));
    it->second.used = true;
    order_.push_back(m.strata);
    const std::string key = m.strata;  // before m is moved into the entry
    tensors_.emplace(key, Stored{std::move(m), it->second.file, &e});
  }
  for (const auto& [name, f] : found)
    if (!f.used && !ignored_hf_tensor(spec_, name))
      STRATA_THROW(DataError, "Hugging Face shard '", f.file->path(), "': tensor '", name, "' is not a parameter of ",
                   spec_.architecture, " with this config.json (a different model, or a config that does not match "
                   "its weights)");
}

std::vector<std::string> HfModelDir::names() const { return order_; }

std::vector<std::string> HfModelDir::files() const {
  std::set<std::string> out;
  for (const auto& [n, s] : tensors_) out.insert(s.file->path());
  return {out.begin(), out.end()};
}

const HfModelDir::Stored& HfModelDir::stored(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end())
    STRATA_THROW(DataError, "Hugging Face model directory '", dir_, "': no tensor maps to strata's '", name, "' (",
                 spec_.architecture, " has ", tensors_.size(), " parameters)");
  return it->second;
}

const SafetensorsEntry& HfModelDir::entry(const std::string& name) const { return *stored(name).entry; }
const std::string& HfModelDir::file_of(const std::string& name) const { return stored(name).file->path(); }
const Shape& HfModelDir::global_shape(const std::string& name) const { return stored(name).map.shape; }

void HfModelDir::read_into(const std::string& name, int64_t begin, int64_t end, const Tensor& dst) const {
  const Stored& s = stored(name);
  const SafetensorsEntry& e = *s.entry;
  const int64_t numel = shape_numel(s.map.shape);
  STRATA_CHECK(0 <= begin && begin <= end && end <= numel, "[HfModelDir::read_into] tensor '", name, "': range [",
               begin, ", ", end, ") outside [0, ", numel, ")");
  STRATA_CHECK(dst.defined() && dst.device().is_cpu() && dst.is_contiguous() && dst.dtype() == dtype_ &&
                   dst.numel() == end - begin,
               "[HfModelDir::read_into] tensor '", name, "' [", begin, ", ", end, ") needs a contiguous CPU ",
               dtype_name(dtype_), " tensor of ", end - begin, " elements");
  if (begin == end) return;
  const uint64_t es = element_size(e.dtype);
  Tensor v;  // the range in the file's dtype, strata's layout, (end - begin)
  if (!s.map.transposed) {
    // The file's dtype is the one delivered: straight into dst, no second copy.
    v = e.dtype == dtype_ ? dst : Tensor::empty({end - begin}, e.dtype);
    s.file->read_bytes(e, uint64_t(begin) * es, uint64_t(end - begin) * es, v.raw_data());
  } else {
    // strata (O, I) = file (I, O)^T: the strata rows [r0, r1) holding the range are the
    // file's columns [r0, r1), one run of (r1 - r0) elements in each of the I file rows.
    const int64_t O = s.map.shape[0], I = s.map.shape[1];
    const int64_t r0 = begin / I, r1 = (end - 1) / I + 1, w = r1 - r0;
    Tensor cols = Tensor::empty({I, w}, e.dtype);  // file rows, columns [r0, r1)
    auto* out = static_cast<uint8_t*>(cols.raw_data());
    const uint64_t run = uint64_t(w) * es, row = uint64_t(O) * es;
    if (w == O) {
      s.file->read_bytes(e, 0, uint64_t(I) * row, out);
    } else if (row - run > kMaxGapBytes) {
      for (int64_t i = 0; i < I; ++i) s.file->read_bytes(e, uint64_t(i) * row + uint64_t(r0) * es, run, out + uint64_t(i) * run);
    } else {
      const int64_t rows_per_span = std::max<int64_t>(1, int64_t(kMaxSpanBytes / row));
      std::vector<uint8_t> span;
      for (int64_t i = 0; i < I; i += rows_per_span) {
        const int64_t n = std::min(rows_per_span, I - i);
        const uint64_t from = uint64_t(i) * row + uint64_t(r0) * es, len = uint64_t(n - 1) * row + run;
        span.resize(len);
        s.file->read_bytes(e, from, len, span.data());
        for (int64_t k = 0; k < n; ++k) std::memcpy(out + uint64_t(i + k) * run, span.data() + uint64_t(k) * row, run);
      }
    }
    // (I, w) -> (w, I) row-major: strata's rows [r0, r1), then the range within them.
    v = ops::narrow(ops::flatten(ops::contiguous(ops::transpose(cols, 0, 1))), 0, begin - r0 * I, end - begin);
    v = ops::contiguous(v);
  }
  if (const int64_t k = first_nonfinite(v.raw_data(), v.numel(), e.dtype); k >= 0)
    STRATA_THROW(DataError, "Hugging Face shard '", s.file->path(), "': tensor '", e.name, "' (strata's '", name,
                 "', element ", begin + k, ") is not finite (NaN or inf)");
  Tensor d = dst;
  if (v.raw_data() != dst.raw_data()) ops::copy_(d, ops::reshape(v.dtype() == dtype_ ? v : ops::to_dtype(v, dtype_), dst.shape()));
  d.bump_version();
}

}  // namespace strata::apps::hf
