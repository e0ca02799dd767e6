// TFRecord framing and the hand-encoded Event / Summary / Summary.Value protobufs.
#include "apps/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <strata/core/error.h>

namespace strata::apps {
namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// Protobuf wire format: a key is (field << 3) | wire type; 0 varint, 1 fixed64, 2 bytes, 5 fixed32.
void put_varint(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  s += char(uint8_t(v));
}
template <typename T>
void put_fixed(std::string& s, T v) {  // little-endian, as this host stores it
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  s.append(b, sizeof(T));
}
void put_bytes(std::string& s, int field, std::string_view v) {
  put_varint(s, uint64_t(field) << 3 | 2);
  put_varint(s, v.size());
  s.append(v);
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string encode_event(double wall_time, int64_t step, std::string_view file_version,
                         const std::vector<std::pair<std::string, float>>& scalars) {
  std::string e;
  put_varint(e, 1 << 3 | 1);  // wall_time: double
  put_fixed(e, wall_time);
  put_varint(e, 2 << 3 | 0);  // step: int64
  put_varint(e, uint64_t(step));
  if (!file_version.empty()) put_bytes(e, 3, file_version);
  if (!scalars.empty()) {
    std::string summary;
    for (const auto& [tag, v] : scalars) {
      std::string value;
      put_bytes(value, 1, tag);     // Summary.Value.tag
      put_varint(value, 2 << 3 | 5);  // Summary.Value.simple_value: float
      put_fixed(value, v);
      put_bytes(summary, 1, value);  // Summary.value (repeated)
    }
    put_bytes(e, 5, summary);  // Event.summary
  }
  return e;
}

std::string frame_record(std::string_view data) {
  std::string r;
  const uint64_t len = data.size();
  put_fixed(r, len);
  put_fixed(r, masked_crc32c(&len, sizeof len));
  r.append(data);
  put_fixed(r, masked_crc32c(data.data(), data.size()));
  return r;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char host[256] = "localhost";
  (void)gethostname(host, sizeof host - 1);
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(int64_t(unix_seconds())) + "." +
                                         std::string(host)))
              .string();
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) STRATA_THROW(DataError, "cannot open '", path_, "' for writing (run.tensorboard)");
  write(encode_event(unix_seconds(), 0, "brain.Event:2", {}));
}

void TensorBoardWriter::scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values) {
  write(encode_event(unix_seconds(), step, "", values));
}

void TensorBoardWriter::write(const std::string& event) {
  const std::string r = frame_record(event);
  out_.write(r.data(), std::streamsize(r.size()));
  out_.flush();
  if (!out_) STRATA_THROW(DataError, "cannot write '", path_, "' (run.tensorboard)");
}

}  // namespace strata::apps
