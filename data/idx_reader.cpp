// IDX reading through zlib's gzread, which also reads raw files, so one path handles
// both. The payload is read in chunks so a corrupt header cannot force a huge
// allocation; a file is returned only after every check passed.
#include "data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace strata::data {
namespace {

constexpr int64_t kChunk = int64_t(1) << 24;              // bytes per gzread call
constexpr int64_t kMaxPayload = int64_t(1) << 36;         // 64 GiB: larger means a corrupt header

/// Owns a gzFile.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : f_(gzopen(path.c_str(), "rb")) {}
  ~GzFile() {
    if (f_) gzclose(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  gzFile get() const { return f_; }

 private:
  gzFile f_;
};

/// zlib's description of the stream's error state, or "" when there is none.
std::string gz_error(gzFile f) {
  int code = Z_OK;
  const char* msg = gzerror(f, &code);
  if (code == Z_OK || code == Z_STREAM_END) return "";
  if (code == Z_BUF_ERROR) return "gzip stream ends early (truncated .gz file)";
  if (code == Z_ERRNO) return std::strerror(errno);
  return std::string("corrupt gzip stream: ") + (msg ? msg : "unknown zlib error");
}

/// Appends up to `n` bytes to `out`; returns how many were read. Throws on a hard
/// zlib error (corrupt data); a short read (end of file) is left to the caller.
int64_t read_into(gzFile f, std::vector<uint8_t>& out, int64_t n, const std::string& path) {
  int64_t got = 0;
  while (got < n) {
    const int64_t want = std::min(kChunk, n - got);
    const size_t old = out.size();
    out.resize(old + size_t(want));
    const int r = gzread(f, out.data() + old, unsigned(want));
    if (r < 0) {
      out.resize(old);
      STRATA_THROW(DataError, "[idx] ", path, ": ", gz_error(f));
    }
    out.resize(old + size_t(r));
    got += r;
    if (r < want) break;
  }
  return got;
}

const char* payload_name(uint32_t magic) {
  if (magic == kIdxMagicU8Images) return "image data";
  if (magic == kIdxMagicU8Labels) return "label data";
  return "data";
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08X", v);
  return buf;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

}  // namespace

IdxArray read_idx(const std::string& path, uint32_t expected_magic) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    STRATA_THROW(DataError, "[idx] file not found: ", path,
                 ". Fashion-MNIST comes from the Debian package `dataset-fashion-mnist` "
                 "(apt-get install dataset-fashion-mnist), which installs "
                 "train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz "
                 "and t10k-labels-idx1-ubyte.gz in /usr/share/datasets/fashion-mnist");
  }
  if (std::filesystem::is_directory(path, ec)) STRATA_THROW(DataError, "[idx] ", path, " is a directory, not an IDX file");
  GzFile file(path);
  if (!file.get()) STRATA_THROW(DataError, "[idx] cannot open ", path, ": ", std::strerror(errno));
  gzFile f = file.get();

  std::vector<uint8_t> head;
  if (read_into(f, head, 4, path) < 4) {
    const std::string why = gz_error(f);
    STRATA_THROW(DataError, "[idx] ", path, ": truncated header: expected 4 bytes of magic number, got ",
                 head.size(), why.empty() ? "" : " (" + why + ")");
  }
  const uint32_t magic = be32(head.data());
  if (magic != expected_magic) {
    STRATA_THROW(DataError, "[idx] ", path, ": bad magic number ", hex32(magic), ", expected ", hex32(expected_magic),
                 " (u8 ", expected_magic == kIdxMagicU8Images ? "images" : "labels",
                 "); is this the right file, and is it an IDX file?");
  }
  const int64_t ndim = magic & 0xFF;
  head.clear();
  if (read_into(f, head, 4 * ndim, path) < 4 * ndim) {
    const std::string why = gz_error(f);
    STRATA_THROW(DataError, "[idx] ", path, ": truncated header: expected ", 4 * ndim, " bytes of dimensions, got ",
                 head.size(), why.empty() ? "" : " (" + why + ")");
  }
  IdxArray out;
  int64_t numel = 1;
  for (int64_t d = 0; d < ndim; ++d) {
    const int64_t n = be32(head.data() + 4 * d);
    if (n == 0) STRATA_THROW(DataError, "[idx] ", path, ": dimension ", d, " of the header is 0");
    out.dims.push_back(n);
    if (n > kMaxPayload / numel) {
      STRATA_THROW(DataError, "[idx] ", path, ": header promises more than ", kMaxPayload,
                   " bytes; the header is corrupt");
    }
    numel *= n;
  }

  out.data.reserve(size_t(std::min<int64_t>(numel, int64_t(1) << 26)));
  const int64_t got = read_into(f, out.data, numel, path);
  if (got < numel) {
    const std::string why = gz_error(f);
    STRATA_THROW(DataError, "[idx] ", path, ": truncated: expected ", numel, " bytes of ", payload_name(magic),
                 ", got ", got, why.empty() ? "" : " (" + why + ")");
  }
  // The payload must end the file; reading on also verifies the gzip trailer (CRC, length).
  uint8_t extra[64];
  const int r = gzread(f, extra, sizeof(extra));
  if (r > 0) {
    STRATA_THROW(DataError, "[idx] ", path, ": file holds more than its header promises (", numel, " bytes of ",
                 payload_name(magic), " then at least ", r, " extra bytes); header/count mismatch");
  }
  if (const std::string why = gz_error(f); r < 0 || !why.empty()) {
    STRATA_THROW(DataError, "[idx] ", path, ": ", why.empty() ? "read error after the payload" : why);
  }
  return out;
}

IdxArray read_idx_images(const std::string& path) { return read_idx(path, kIdxMagicU8Images); }
IdxArray read_idx_labels(const std::string& path) { return read_idx(path, kIdxMagicU8Labels); }

}  // namespace strata::data
