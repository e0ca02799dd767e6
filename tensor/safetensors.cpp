// safetensors reader/writer. The reader validates the whole header against the file
// size before allocating anything, then reads each tensor's bytes straight into its
// storage (no second copy of the file in memory).
#include <strata/tensor/safetensors.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <zlib.h>

#include <strata/core/json_limits.h>

#include <strata/tensor/file_io.h>
#include <strata/tensor/ops.h>

namespace strata {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

// Same ceiling as the reference implementation: a header over 100 MB is corrupt.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

bool parse_st_dtype(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> kTable[] = {{"F32", DType::f32}, {"F64", DType::f64},
                                                         {"F16", DType::f16}, {"BF16", DType::bf16},
                                                         {"I32", DType::i32}, {"I64", DType::i64},
                                                         {"U8", DType::u8}};
  for (const auto& [name, dt] : kTable)
    if (s == name) {
      *out = dt;
      return true;
    }
  return false;
}

// Owns a read-only file descriptor.
class FileReader {
 public:
  explicit FileReader(const std::string& path) : path_(path) {
    fd_ = open_regular_file(path, &size_);
  }
  ~FileReader() { ::close(fd_); }
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  uint64_t size() const { return size_; }
  void read_at(uint64_t offset, void* dst, uint64_t n, const std::string& what) const {
    auto* p = static_cast<uint8_t*>(dst);
    while (n > 0) {
      const ssize_t r = ::pread(fd_, p, size_t(n), off_t(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        STRATA_THROW(DataError, "safetensors '", path_, "': cannot read ", what, ": ",
                     r < 0 ? std::strerror(errno) : "unexpected end of file (truncated?)");
      p += r;
      offset += uint64_t(r);
      n -= uint64_t(r);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

SafetensorsHeader parse_header(const FileReader& f, const std::string& path) {
  auto fail = [&](const auto&... msg) -> void {
    STRATA_THROW(DataError, "safetensors '", path, "': ", msg...);
  };
  if (f.size() < 8) fail("file is ", f.size(), " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  f.read_at(0, &n, 8, "header length");
  if (n > f.size() - 8)
    fail("header length ", n, " exceeds the file size ", f.size(), " (truncated or not a safetensors file)");
  if (n > kMaxHeaderBytes) fail("header length ", n, " exceeds the 100 MB limit");
  if (n < 2) fail("header length ", n, " is too small for a JSON object");
  std::string text(size_t(n), '\0');
  f.read_at(8, text.data(), n, "header");

  // Depth-capped, and a repeated tensor name is refused (nlohmann would keep the last).
  const nlohmann::json j = parse_json_file_text(text, "safetensors '" + path + "': header");
  if (!j.is_object()) fail("header is not a JSON object");

  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = f.size() - h.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail("__metadata__ value for '", m.key(), "' is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const auto&... msg) -> void {
      STRATA_THROW(DataError, "safetensors '", path, "': tensor '", name, "': ", msg...);
    };
    if (!v.is_object()) bad("entry is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) bad("missing or non-string 'dtype'");
    if (!v.contains("shape") || !v["shape"].is_array()) bad("missing or non-array 'shape'");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      bad("missing 'data_offsets' (expected [begin, end])");
    SafetensorsEntry e;
    e.name = name;
    const std::string ds = v["dtype"].get<std::string>();
    if (!parse_st_dtype(ds, &e.dtype)) bad("unsupported dtype '", ds, "' (expected F32, F64, F16, BF16, I32, I64 or U8)");
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) bad("shape entry ", json_brief(d), " is not a non-negative integer");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > uint64_t(INT64_MAX) || __builtin_mul_overflow(numel, dim, &numel)) bad("shape overflows");
      e.shape.push_back(int64_t(dim));
    }
    const auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad("data_offsets ", json_brief(off), " are not non-negative integers");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.end < e.begin) bad("data_offsets [", e.begin, ", ", e.end, "] end before begin");
    if (e.end > data_size)
      bad("data_offsets [", e.begin, ", ", e.end, "] run past the data section (", data_size,
          " bytes; file truncated?)");
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, uint64_t(element_size(e.dtype)), &nbytes)) bad("byte size overflows");
    if (e.end - e.begin != nbytes)
      bad("data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin, " bytes but shape ",
          shape_str(e.shape), " of ", ds, " needs ", nbytes);
    h.entries.push_back(std::move(e));
  }
  std::sort(h.entries.begin(), h.entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // As the reference implementation: the tensors tile the data section exactly, in
  // offset order, so every reader sees the same bytes ("invalid offset" for a gap or an
  // overlap, "file not fully covered" for bytes no tensor refers to).
  uint64_t next = 0;
  for (size_t i = 0; i < h.entries.size(); ++i) {
    const auto& c = h.entries[i];
    if (c.begin != next) {
      const std::string prev = i ? "the end of tensor '" + h.entries[i - 1].name + "'" : std::string("the data start");
      STRATA_THROW(DataError, "safetensors '", path, "': tensor '", c.name, "': invalid offset: bytes [", c.begin, ", ",
                   c.end, ") ", c.begin < next ? "overlap" : "leave a gap after", " ", prev, " (byte ", next, ")");
    }
    next = c.end;
  }
  if (next != data_size)
    fail("file not fully covered: the tensors end at data byte ", next, " but the data section holds ", data_size,
         " bytes");
  return h;
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
  }
  return "?";
}

uint32_t save_safetensors(const std::string& path, const NamedTensors& tensors, const SafetensorsMetadata& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::vector<Tensor> host;  // contiguous CPU copies (or the tensors themselves) kept alive for the write
  host.reserve(tensors.size());
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    STRATA_CHECK(!name.empty() && name != "__metadata__", "[save_safetensors] '", path,
                 "': invalid tensor name '", name, "'");
    STRATA_CHECK(seen.insert(name).second, "[save_safetensors] '", path, "': duplicate tensor name '", name, "'");
    STRATA_CHECK(t.defined(), "[save_safetensors] '", path, "': tensor '", name, "' is undefined");
    Tensor c = t.device().is_cpu() ? t : ops::to_cpu(t);
    if (!c.is_contiguous()) c = ops::contiguous(c);
    const uint64_t nb = uint64_t(c.nbytes());
    header[name] = {{"dtype", safetensors_dtype_name(c.dtype())},
                    {"shape", c.shape()},
                    {"data_offsets", {offset, offset + nb}}};
    offset += nb;
    host.push_back(std::move(c));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  std::vector<std::span<const uint8_t>> parts;
  parts.emplace_back(reinterpret_cast<const uint8_t*>(&n), 8);
  parts.emplace_back(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  for (const Tensor& t : host)
    if (t.nbytes() > 0) parts.emplace_back(static_cast<const uint8_t*>(t.raw_data()), size_t(t.nbytes()));
  return write_file_atomic(path, parts);
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  FileReader f(path);
  return parse_header(f, path);
}

namespace detail {
struct SafetensorsFileImpl {
  explicit SafetensorsFileImpl(const std::string& p) : path(p), file(p), header(parse_header(file, p)) {
    for (size_t i = 0; i < header.entries.size(); ++i) by_name.emplace(header.entries[i].name, i);
  }
  std::string path;
  FileReader file;
  SafetensorsHeader header;
  std::map<std::string, size_t> by_name;
};
}  // namespace detail

SafetensorsFile::SafetensorsFile(const std::string& path)
    : impl_(std::make_unique<detail::SafetensorsFileImpl>(path)) {}
SafetensorsFile::~SafetensorsFile() = default;
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;

const std::string& SafetensorsFile::path() const { return impl_->path; }
const SafetensorsHeader& SafetensorsFile::header() const { return impl_->header; }

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  const auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : &impl_->header.entries[it->second];
}

uint32_t SafetensorsFile::file_crc32() const {
  constexpr uint64_t kChunk = 1ull << 20;
  std::vector<uint8_t> buf(size_t(std::min(kChunk, impl_->file.size())));
  uint32_t crc = 0;
  for (uint64_t at = 0; at < impl_->file.size(); at += kChunk) {
    const uint64_t n = std::min(kChunk, impl_->file.size() - at);
    impl_->file.read_at(at, buf.data(), n, "bytes for the checksum");
    crc = uint32_t(::crc32_z(crc, buf.data(), size_t(n)));
  }
  return crc;
}

uint64_t SafetensorsFile::file_size() const { return impl_->file.size(); }

void SafetensorsFile::read_bytes(const SafetensorsEntry& e, uint64_t byte_offset, uint64_t nbytes, void* dst) const {
  STRATA_CHECK(byte_offset <= e.end - e.begin && nbytes <= e.end - e.begin - byte_offset,
               "[SafetensorsFile::read_bytes] '", impl_->path, "': tensor '", e.name, "': bytes [", byte_offset,
               ", +", nbytes, ") outside its ", e.end - e.begin, " bytes");
  if (nbytes > 0)
    impl_->file.read_at(impl_->header.data_start + e.begin + byte_offset, dst, nbytes, "tensor '" + e.name + "'");
}

NamedTensors load_safetensors(const std::string& path, SafetensorsMetadata* metadata) {
  FileReader f(path);
  SafetensorsHeader h = parse_header(f, path);
  NamedTensors out;
  out.reserve(h.entries.size());
  for (const auto& e : h.entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin) f.read_at(h.data_start + e.begin, t.raw_data(), e.end - e.begin, "tensor '" + e.name + "'");
    out.emplace_back(e.name, std::move(t));
  }
  if (metadata) *metadata = std::move(h.metadata);
  return out;
}

}  // namespace strata
