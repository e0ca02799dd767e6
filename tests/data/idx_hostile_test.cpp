// Hostile IDX files: a gzip stream cut before its CRC trailer with a flipped
// bit, CRC and length mismatches, FIFOs, devices and symlink loops as the path, and
// headers whose dims overflow int64. Each is one DataError naming the file.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <strata/data/idx_reader.h>
#include <strata/data/regular_file.h>
#include "test_util.h"
#include "tests/fifo_unblocker.h"

using namespace strata;
using namespace strata::data;
using namespace strata::data::testing;

namespace {

// 20 pseudo-random 28x28 images, gzipped: incompressible enough that every deflate
// block carries data.
std::vector<uint8_t> gz_images(const TempDir& dir) {
  std::vector<uint8_t> pix(20 * 28 * 28);
  uint32_t s = 777;
  for (auto& p : pix) p = uint8_t((s = s * 1664525u + 1013904223u) >> 24);
  const std::string tmp = dir.file("src.gz");
  write_gz(tmp, idx_bytes(kIdxMagicU8Images, {20, 28, 28}, pix));
  return read_bytes(tmp);
}

bool has(const std::string& msg, const std::string& part) { return msg.find(part) != std::string::npos; }

}  // namespace

TEST(IdxHostile, TrailerCutPlusAnyFlippedBitIsRejected) {
  TempDir dir;
  const auto gz = gz_images(dir);
  const std::string path = dir.file("cut.gz");
  std::vector<uint8_t> cut(gz.begin(), gz.end() - 8);  // CRC32 + ISIZE trailer gone
  for (size_t i = 10; i < cut.size(); i += 7) {        // every 7th byte past the 10-byte gzip header
    auto bad = cut;
    bad[i] ^= 0x10;
    write_bytes(path, bad);
    const std::string msg = data_error([&] { read_idx_images(path); });
    ASSERT_TRUE(has(msg, path)) << "byte " << i << ": " << msg;
  }
  write_bytes(path, cut);
  const std::string msg = data_error([&] { read_idx_images(path); });
  EXPECT_TRUE(has(msg, "8-byte CRC/length trailer is missing")) << msg;
}

TEST(IdxHostile, CrcMismatchIsRejected) {
  TempDir dir;
  auto gz = gz_images(dir);
  gz[gz.size() - 8] ^= 0x01;  // first byte of the stored CRC32
  const std::string path = dir.file("crc.gz");
  write_bytes(path, gz);
  const std::string msg = data_error([&] { read_idx_images(path); });
  EXPECT_TRUE(has(msg, path) && has(msg, "corrupt gzip stream: incorrect data check")) << msg;
}

TEST(IdxHostile, LengthMismatchIsRejected) {
  TempDir dir;
  auto gz = gz_images(dir);
  gz[gz.size() - 4] ^= 0x01;  // ISIZE, the uncompressed length mod 2^32
  const std::string path = dir.file("len.gz");
  write_bytes(path, gz);
  const std::string msg = data_error([&] { read_idx_images(path); });
  EXPECT_TRUE(has(msg, path) && has(msg, "incorrect length check")) << msg;
}

TEST(IdxHostile, TruncatedGzipHeaderIsRejected) {
  TempDir dir;
  const auto gz = gz_images(dir);
  const std::string path = dir.file("head.gz");
  write_bytes(path, std::vector<uint8_t>(gz.begin(), gz.begin() + 6));
  const std::string msg = data_error([&] { read_idx_images(path); });
  EXPECT_TRUE(has(msg, path) && has(msg, "truncated header")) << msg;
}

TEST(IdxHostile, WrongMagicInGzipNamesFile) {
  TempDir dir;
  const std::string path = dir.file("labels.gz");
  write_gz(path, idx_bytes(kIdxMagicU8Labels, {3}, {1, 2, 3}));
  const std::string msg = data_error([&] { read_idx_images(path); });
  EXPECT_TRUE(has(msg, path) && has(msg, "bad magic number 0x00000801")) << msg;
}

TEST(IdxHostile, DimsOverflowingInt64AreRefusedBeforeAllocating) {
  TempDir dir;
  const std::string path = dir.file("huge.gz");
  // 2^32-1 cubed is about 2^96 bytes: the product overflows int64.
  write_gz(path, idx_bytes(kIdxMagicU8Images, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {}));
  const std::string msg = data_error([&] { read_idx_images(path); });
  EXPECT_TRUE(has(msg, path) && has(msg, "header promises more than 68719476736 bytes")) << msg;
}

TEST(IdxHostile, PromiseBeyondPhysicalMemoryIsRefusedBeforeReading) {
  TempDir dir;
  const std::string path = dir.file("bomb.gz");
  // 6e10 bytes (55.9 GiB): under the 64 GiB format bound; a gzip bomb could deliver it.
  write_gz(path, idx_bytes(kIdxMagicU8Images, {60000, 1000, 1000}, {1, 2, 3}));
  const std::string msg = data_error([&] { read_idx_images(path); });
  EXPECT_TRUE(has(msg, path)) << msg;
  if (physical_memory_bytes() < 60000000000ull)
    EXPECT_TRUE(has(msg, "header promises 60000000000 bytes (55.9 GiB) of image data, more than this machine's memory"))
        << msg;
  else
    EXPECT_TRUE(has(msg, "truncated: expected 60000000000 bytes of image data, got 3")) << msg;
}

TEST(IdxHostile, FifoIsRefusedWithoutOpening) {
  TempDir dir;
  const std::string path = dir.file("images.fifo");
  strata::testing::FifoUnblocker fifo(path);
  ASSERT_TRUE(fifo.ok());
  const std::string msg = data_error([&] { read_idx_images(path); });
  fifo.done();
  EXPECT_EQ(msg, "[idx] " + path + " is a FIFO (named pipe), not a regular file; refusing to open it");
}

TEST(IdxHostile, CharacterDeviceIsRefused) {
  const std::string msg = data_error([&] { read_idx_images("/dev/zero"); });
  EXPECT_EQ(msg, "[idx] /dev/zero is a character device, not a regular file; refusing to open it");
}

TEST(IdxHostile, SymlinkLoopNamesFileAndReason) {
  TempDir dir;
  const std::string a = dir.file("a"), b = dir.file("b");
  ASSERT_EQ(::symlink(b.c_str(), a.c_str()), 0);
  ASSERT_EQ(::symlink(a.c_str(), b.c_str()), 0);
  const std::string msg = data_error([&] { read_idx_images(a); });
  EXPECT_EQ(msg, "[idx] cannot stat " + a + ": Too many levels of symbolic links");
}

TEST(IdxHostile, ConcatenatedGzipMembersAreOneStream) {
  TempDir dir;
  const std::string p1 = dir.file("p1.gz"), p2 = dir.file("p2.gz"), both = dir.file("both.gz");
  const auto bytes = idx_bytes(kIdxMagicU8Labels, {6}, {1, 2, 3, 4, 5, 6});
  write_gz(p1, std::vector<uint8_t>(bytes.begin(), bytes.begin() + 9));
  write_gz(p2, std::vector<uint8_t>(bytes.begin() + 9, bytes.end()));
  auto cat = read_bytes(p1);
  const auto second = read_bytes(p2);
  cat.insert(cat.end(), second.begin(), second.end());
  write_bytes(both, cat);
  EXPECT_EQ(read_idx_labels(both).data, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
  for (char c : std::string("junk after it")) cat.push_back(uint8_t(c));  // not a gzip member
  write_bytes(both, cat);
  const std::string msg = data_error([&] { read_idx_labels(both); });
  EXPECT_TRUE(has(msg, both) && has(msg, "corrupt gzip stream after member 2")) << msg;
}

TEST(IdxHostile, BytesInMemoryReadLikeTheFile) {
  TempDir dir;
  const auto gz = gz_images(dir);
  const IdxArray from_file = read_idx_images(dir.file("src.gz"));
  const IdxArray from_bytes = read_idx_bytes(gz, "mem", kIdxMagicU8Images);
  EXPECT_EQ(from_bytes.dims, from_file.dims);
  EXPECT_EQ(from_bytes.data, from_file.data);
  const std::vector<uint8_t> cut(gz.begin(), gz.end() - 3);
  EXPECT_TRUE(has(data_error([&] { read_idx_bytes(cut, "mem", kIdxMagicU8Images); }), "[idx] mem: "));
}
