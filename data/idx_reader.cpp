// IDX reading over one byte source (a regular file or a memory buffer), gunzipped by
// zlib's inflate when it starts with the gzip magic. inflate verifies each member's
// CRC32 and length trailer, and the stream must reach that trailer: a file cut anywhere,
// trailer included, is an error. The payload is read in chunks so a corrupt header
// cannot force a huge allocation; a file is returned only after every check passed.
#include <strata/data/idx_reader.h>

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>

#include <strata/core/error.h>
#include <strata/data/regular_file.h>

namespace strata::data {
namespace {

constexpr int64_t kChunk = int64_t(1) << 24;       // bytes per read while growing the payload
constexpr int64_t kMaxPayload = int64_t(1) << 36;  // 64 GiB: larger means a corrupt header
constexpr size_t kInBuf = size_t(1) << 16;         // compressed bytes per refill

/// Raw bytes in, IDX bytes out: the file's bytes as they are, or inflated when they
/// begin with the gzip magic 1f 8b (concatenated gzip members are read one after another).
class IdxInput {
 public:
  /// `fill(dst, n)` returns up to n raw bytes (0 at the end) and throws on a read error.
  IdxInput(std::function<size_t(uint8_t*, size_t)> fill, std::string name)
      : fill_(std::move(fill)), name_(std::move(name)), in_(kInBuf) {
    refill();
    gz_ = avail_ >= 2 && in_[0] == 0x1f && in_[1] == 0x8b;
    if (gz_ && inflateInit2(&z_, 15 + 16) != Z_OK) fail("zlib inflateInit2 failed");
    z_active_ = gz_;
  }
  ~IdxInput() {
    if (z_active_) inflateEnd(&z_);
  }
  IdxInput(const IdxInput&) = delete;
  IdxInput& operator=(const IdxInput&) = delete;

  /// Up to `n` bytes into `dst`; fewer only at the end of the data (or where a gzip
  /// stream is cut off: see truncation()). Throws DataError on a corrupt gzip stream.
  size_t read(uint8_t* dst, size_t n) { return gz_ ? inflate_into(dst, n) : copy_into(dst, n); }
  /// Why the last read stopped at a cut gzip stream, or "" when it did not.
  std::string truncation() const {
    return truncated_ ? "gzip stream ends early (truncated .gz file: its data or 8-byte CRC/length trailer is missing)"
                      : "";
  }
  /// truncation() in parentheses after a short-read message, or "".
  std::string truncation_note() const { return truncated_ ? " (" + truncation() + ")" : ""; }

  [[noreturn]] void fail(const std::string& why) const { STRATA_THROW(DataError, "[idx] ", name_, ": ", why); }

 private:
  void refill() {
    pos_ = 0;
    avail_ = fill_(in_.data(), in_.size());
    eof_ = avail_ == 0;
  }

  size_t copy_into(uint8_t* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      if (pos_ == avail_) {
        if (eof_) break;
        refill();
        continue;
      }
      const size_t k = std::min(n - got, avail_ - pos_);
      std::memcpy(dst + got, in_.data() + pos_, k);
      pos_ += k;
      got += k;
    }
    return got;
  }

  size_t inflate_into(uint8_t* dst, size_t n) {
    z_.next_out = dst;
    z_.avail_out = unsigned(n);
    while (z_.avail_out > 0) {
      if (pos_ == avail_ && !eof_) refill();
      if (member_done_) {
        if (pos_ == avail_) break;  // end of the file after a complete member
        if (inflateReset(&z_) != Z_OK) fail("zlib inflateReset failed");
        member_done_ = false;
        ++members_;
      }
      z_.next_in = in_.data() + pos_;
      z_.avail_in = unsigned(avail_ - pos_);
      const int ret = inflate(&z_, Z_NO_FLUSH);
      pos_ = avail_ - z_.avail_in;
      if (ret == Z_STREAM_END) {
        member_done_ = true;  // inflate checked this member's CRC32 and length
      } else if ((ret == Z_OK || ret == Z_BUF_ERROR) && pos_ == avail_ && eof_ &&
                 (ret == Z_BUF_ERROR || z_.avail_out > 0)) {
        truncated_ = true;  // inflate wants input the file does not have: cut before the trailer
        break;
      } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
        fail(std::string("corrupt gzip stream") + (members_ ? " after member " + std::to_string(members_) : "") +
             ": " + (z_.msg ? z_.msg : "zlib error " + std::to_string(ret)));
      }
    }
    return n - z_.avail_out;
  }

  std::function<size_t(uint8_t*, size_t)> fill_;
  std::string name_;
  std::vector<uint8_t> in_;
  size_t pos_ = 0, avail_ = 0;
  bool eof_ = false, gz_ = false, z_active_ = false, member_done_ = false, truncated_ = false;
  int members_ = 0;
  z_stream z_{};
};

/// Appends up to `n` bytes to `out` in chunks; returns how many were read.
int64_t read_into(IdxInput& in, std::vector<uint8_t>& out, int64_t n) {
  int64_t got = 0;
  while (got < n) {
    const int64_t want = std::min(kChunk, n - got);
    const size_t old = out.size();
    out.resize(old + size_t(want));
    const size_t r = in.read(out.data() + old, size_t(want));
    out.resize(old + r);
    got += int64_t(r);
    if (int64_t(r) < want) break;
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

bool magic_matches(uint32_t magic, uint32_t expected) {
  if (expected != kIdxAnyU8) return magic == expected;
  return (magic & 0xFFFFFF00u) == kIdxAnyU8 && (magic & 0xFF) >= 1 && int(magic & 0xFF) <= kIdxMaxDims;
}

std::string expected_kind(uint32_t expected_magic) {
  if (expected_magic == kIdxMagicU8Images) return "u8 images";
  if (expected_magic == kIdxMagicU8Labels) return "u8 labels";
  return "u8 data, 0x00000801..0x0000080" + std::to_string(kIdxMaxDims) +
         ": only unsigned-byte IDX files are read";
}

/// Reads the header (and, unless header_only, the payload) of one IDX stream.
IdxArray parse_idx(IdxInput& in, uint32_t expected_magic, bool header_only = false) {
  std::vector<uint8_t> head;
  if (read_into(in, head, 4) < 4)
    in.fail("truncated header: expected 4 bytes of magic number, got " + std::to_string(head.size()) +
            in.truncation_note());
  const uint32_t magic = be32(head.data());
  if (!magic_matches(magic, expected_magic)) {
    in.fail("bad magic number " + hex32(magic) + ", expected " + hex32(expected_magic) + " (" +
            expected_kind(expected_magic) + "); is this the right file, and is it an IDX file?");
  }
  const int64_t ndim = magic & 0xFF;
  head.clear();
  if (read_into(in, head, 4 * ndim) < 4 * ndim) {
    in.fail("truncated header: expected " + std::to_string(4 * ndim) + " bytes of dimensions, got " +
            std::to_string(head.size()) + in.truncation_note());
  }
  IdxArray out;
  int64_t numel = 1;
  for (int64_t d = 0; d < ndim; ++d) {
    const int64_t n = be32(head.data() + 4 * d);
    if (n == 0) in.fail("dimension " + std::to_string(d) + " of the header is 0");
    out.dims.push_back(n);
    if (n > kMaxPayload / numel)  // numel * n would pass 64 GiB (and could overflow int64)
      in.fail("header promises more than " + std::to_string(kMaxPayload) + " bytes; the header is corrupt");
    numel *= n;
  }
  if (header_only) return out;
  // The payload grows only as bytes arrive, but a gzip bomb can deliver them: refuse a
  // promise that this machine could not hold before reading it.
  if (const uint64_t mem = physical_memory_bytes(); uint64_t(numel) > mem) {
    in.fail("header promises " + std::to_string(numel) + " bytes (" + human_bytes(uint64_t(numel)) + ") of " +
            payload_name(magic) + ", more than this machine's memory (" + human_bytes(mem) + ")");
  }

  out.data.reserve(size_t(std::min<int64_t>(numel, int64_t(1) << 26)));
  const int64_t got = read_into(in, out.data, numel);
  if (got < numel) {
    in.fail("truncated: expected " + std::to_string(numel) + " bytes of " + payload_name(magic) + ", got " +
            std::to_string(got) + in.truncation_note());
  }
  // The payload must end the data; reading on also takes inflate through the gzip trailer.
  uint8_t extra[64];
  if (const size_t r = in.read(extra, sizeof(extra)); r > 0) {
    in.fail("file holds more than its header promises (" + std::to_string(numel) + " bytes of " +
            payload_name(magic) + " then at least " + std::to_string(r) + " extra bytes); header/count mismatch");
  }
  if (const std::string cut = in.truncation(); !cut.empty()) in.fail(cut);
  return out;
}

/// Opens `path` (after the missing-file and file-kind checks) and runs parse_idx over it.
IdxArray parse_idx_file(const std::string& path, uint32_t expected_magic, bool header_only) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) {
    if (expected_magic == kIdxAnyU8) STRATA_THROW(DataError, "[idx] file not found: ", path);
    STRATA_THROW(DataError, "[idx] file not found: ", path,
                 ". Fashion-MNIST comes from the Debian package `dataset-fashion-mnist` "
                 "(apt-get install dataset-fashion-mnist), which installs "
                 "train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz "
                 "and t10k-labels-idx1-ubyte.gz in /usr/share/datasets/fashion-mnist");
  }
  regular_file_size(path, "idx");  // a FIFO would block open() forever
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) STRATA_THROW(DataError, "[idx] cannot open ", path, ": ", std::strerror(errno));
  IdxInput in(
      [&](uint8_t* dst, size_t n) {
        const size_t r = std::fread(dst, 1, n, f.get());
        if (r < n && std::ferror(f.get()))
          STRATA_THROW(DataError, "[idx] ", path, ": read error: ", std::strerror(errno));
        return r;
      },
      path);
  return parse_idx(in, expected_magic, header_only);
}

}  // namespace

IdxArray read_idx(const std::string& path, uint32_t expected_magic) {
  return parse_idx_file(path, expected_magic, false);
}

std::vector<int64_t> read_idx_dims(const std::string& path) { return parse_idx_file(path, kIdxAnyU8, true).dims; }

IdxArray read_idx_bytes(std::span<const uint8_t> bytes, const std::string& name, uint32_t expected_magic) {
  size_t off = 0;
  IdxInput in(
      [&](uint8_t* dst, size_t n) {
        const size_t k = std::min(n, bytes.size() - off);
        if (k) std::memcpy(dst, bytes.data() + off, k);
        off += k;
        return k;
      },
      name);
  return parse_idx(in, expected_magic);
}

IdxArray read_idx_images(const std::string& path) { return read_idx(path, kIdxMagicU8Images); }
IdxArray read_idx_labels(const std::string& path) { return read_idx(path, kIdxMagicU8Labels); }

}  // namespace strata::data
