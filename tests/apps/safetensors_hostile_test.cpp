// Hostile safetensors files: each gives one DataError naming the file (and the
// tensor), with no crash, no hang and no unbounded allocation, and the reader is as strict
// as Python's `safetensors` (exact tiling of the data section, no repeated names).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <sys/resource.h>
#include <unistd.h>

#include <strata/core/memory.h>
#include <strata/tensor/ops.h>
#include <strata/tensor/safetensors.h>
#include "tests/hostile_files.h"
#include "tests/temp_dir_fixture.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using strata::testing::expect_error;

class SafetensorsHostileTest : public strata::testing::TempDirTest {
 protected:
  // Writes u64 header length (claimed_len, or the header's), the header, then `data`.
  std::string write(const std::string& name, const std::string& header, size_t data_bytes,
                    uint64_t claimed_len = UINT64_MAX) {
    const std::string p = path(name);
    std::ofstream f(p, std::ios::binary);
    const uint64_t n = claimed_len == UINT64_MAX ? header.size() : claimed_len;
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(header.data(), std::streamsize(header.size()));
    const std::vector<char> data(data_bytes, 1);
    f.write(data.data(), std::streamsize(data.size()));
    return p;
  }
  // Both read paths must refuse the file the same way.
  void expect_refused(const std::string& p, const std::vector<std::string>& parts) {
    expect_error<DataError>([&] { load_safetensors(p); }, parts);
    expect_error<DataError>([&] { SafetensorsFile f(p); }, parts);
  }
};

TEST_F(SafetensorsHostileTest, DeepNestingIsRefusedNotACrash) {
  // 100k levels inside a tensor's shape: the old reader printed the value (recursive dump).
  const std::string p = write("deep.safetensors", R"({"w":{"dtype":"F32","shape":)" + strata::testing::deep_json_array(100000) +
                                                      R"(,"data_offsets":[0,4]}})", 4);
  expect_refused(p, {p, "recursion limit exceeded"});
}

TEST_F(SafetensorsHostileTest, DuplicateTensorNamesAreRefused) {
  const std::string p = write("dup.safetensors",
                              R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                              R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                              8);
  expect_refused(p, {p, "duplicate key \"w\""});
}

TEST_F(SafetensorsHostileTest, TrailingBytesAreNotFullyCovered) {
  const std::string p = write("trail.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 12);
  expect_refused(p, {p, "file not fully covered", "end at data byte 4", "holds 12 bytes"});
}

TEST_F(SafetensorsHostileTest, GapBetweenTensorsIsAnInvalidOffset) {
  const std::string p = write("gap.safetensors",
                              R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                              12);
  expect_refused(p, {p, "tensor 'b'", "invalid offset", "gap", "'a'"});
}

TEST_F(SafetensorsHostileTest, OverlapIsAnInvalidOffset) {
  const std::string p = write("overlap.safetensors",
                              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                              12);
  expect_refused(p, {p, "tensor 'b'", "invalid offset", "overlap", "'a'"});
}

TEST_F(SafetensorsHostileTest, OutOfRangeOffsetsAreRefused) {
  const std::string p = write("range.safetensors", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 8);
  expect_refused(p, {p, "tensor 'w'", "past the data section"});
}

TEST_F(SafetensorsHostileTest, NonUtf8NameIsRefused) {
  const std::string p = write("utf.safetensors", "{\"w\xff\xfe\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
  expect_refused(p, {p, "not valid JSON", "UTF-8"});
}

TEST_F(SafetensorsHostileTest, HeaderLengthLargerThanTheFile) {
  const std::string p = write("long.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4, 4096);
  expect_refused(p, {p, "header length 4096 exceeds the file size"});
}

// Caps this process's address space at what it maps now plus `headroom` while alive, so
// an allocation larger than the headroom fails (std::bad_alloc) instead of succeeding
// lazily. ok() is false where the limit cannot be read or set.
class AddressSpaceCap {
 public:
  explicit AddressSpaceCap(uint64_t headroom) {
    std::ifstream statm("/proc/self/statm");
    uint64_t pages = 0;
    if (::getrlimit(RLIMIT_AS, &old_) != 0 || !(statm >> pages)) return;
    rlimit cap = old_;
    cap.rlim_cur = std::min<rlim_t>(old_.rlim_max, rlim_t(pages * uint64_t(::sysconf(_SC_PAGESIZE)) + headroom));
    ok_ = ::setrlimit(RLIMIT_AS, &cap) == 0;
  }
  ~AddressSpaceCap() {
    if (ok_) ::setrlimit(RLIMIT_AS, &old_);
  }
  AddressSpaceCap(const AddressSpaceCap&) = delete;
  AddressSpaceCap& operator=(const AddressSpaceCap&) = delete;
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  bool ok_ = false;
};

TEST_F(SafetensorsHostileTest, HeaderClaimingATerabyteAllocatesNothing) {
  // A sparse 1 TB + 8 byte file whose header length says 1 TB: refused before allocating.
  const uint64_t tb = 1ull << 40;
  const std::string p = write("tb.safetensors", "{}", 0, tb);
  std::error_code ec;
  fs::resize_file(p, tb + 8, ec);
  if (ec) GTEST_SKIP() << "cannot create a sparse 1 TB file here: " << ec.message();
  cpu_memory().reset_peaks();
  const int64_t tensors_before = cpu_memory().total_current();
  {
    // 64 MB of address space for both refusals: a buffer for the claimed header (or any
    // part of it above the limit's 100 MB) would fail as std::bad_alloc, not DataError.
    AddressSpaceCap cap(64ull << 20);
    if (!cap.ok()) GTEST_SKIP() << "cannot cap the address space here";
    expect_refused(p, {p, "header length 1099511627776 exceeds the 100 MB limit"});
  }
  EXPECT_EQ(cpu_memory().total_peak(), tensors_before) << "tensor bytes were allocated for the refused file";
  fs::remove(p);
}

TEST_F(SafetensorsHostileTest, UnknownDtypeNamesTheTensor) {
  const std::string p = write("dt.safetensors", R"({"w":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]}})", 4);
  expect_refused(p, {p, "tensor 'w'", "unsupported dtype 'F8_E5M2'"});
}

TEST_F(SafetensorsHostileTest, ShapeTimesDtypeMustEqualTheByteLength) {
  const std::string p = write("size.safetensors", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
  expect_refused(p, {p, "tensor 'w'", "hold 8 bytes", "needs 12"});
}

TEST_F(SafetensorsHostileTest, TruncatedFileNamesTheTensor) {
  const std::string p = path("cut.safetensors");
  save_safetensors(p, {{"a", ops::zeros({4}, DType::f32)}, {"b", ops::zeros({16}, DType::f32)}});
  fs::resize_file(p, fs::file_size(p) - 3);
  expect_refused(p, {p, "tensor 'b'", "truncated"});
}

TEST_F(SafetensorsHostileTest, FifoIsRefusedWithoutBlocking) {
  const std::string p = path("fifo.safetensors");
  const strata::testing::FifoReleaser fifo(p);
  ASSERT_TRUE(fifo.ok());
  expect_refused(p, {p, "is a FIFO, not a regular file"});
}

TEST_F(SafetensorsHostileTest, SaveReturnsTheFileCrc32) {
  const std::string p = path("crc.safetensors");
  const uint32_t crc = save_safetensors(p, {{"w", ops::ones({3}, DType::f32)}});
  EXPECT_EQ(SafetensorsFile(p).file_crc32(), crc);
  // Flip one data byte: the recomputed CRC changes.
  {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  EXPECT_NE(SafetensorsFile(p).file_crc32(), crc);
}

}  // namespace
}  // namespace strata
