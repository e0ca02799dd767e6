// IDX reader: valid raw and gzipped files round-trip; every kind of corrupt file
// throws DataError naming the file and the problem; FashionMnist checks counts.
#include <gtest/gtest.h>

#include <strata/data/fashion_mnist.h>
#include <strata/data/idx_reader.h>
#include "test_util.h"

using namespace strata;
using namespace strata::data;
using namespace strata::data::testing;

namespace {

std::vector<uint8_t> ramp(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t((i * 7 + 3) % 251);
  return v;
}

}  // namespace

TEST(Idx, RawAndGzipRoundTrip) {
  TempDir dir;
  const auto pix = ramp(3 * 4 * 5);
  const auto bytes = idx_bytes(kIdxMagicU8Images, {3, 4, 5}, pix);
  write_bytes(dir.file("img"), bytes);
  write_gz(dir.file("img.gz"), bytes);
  for (const char* name : {"img", "img.gz"}) {
    IdxArray a = read_idx_images(dir.file(name));
    EXPECT_EQ(a.dims, (std::vector<int64_t>{3, 4, 5})) << name;
    EXPECT_EQ(a.data, pix) << name;
  }
  const std::vector<uint8_t> lab{0, 9, 3, 3, 7};
  write_gz(dir.file("lab.gz"), idx_bytes(kIdxMagicU8Labels, {5}, lab));
  IdxArray l = read_idx_labels(dir.file("lab.gz"));
  EXPECT_EQ(l.dims, (std::vector<int64_t>{5}));
  EXPECT_EQ(l.data, lab);
}

TEST(Idx, MissingFileNamesFileAndPackage) {
  TempDir dir;
  const std::string path = dir.file("train-images-idx3-ubyte.gz");
  const std::string msg = data_error([&] { read_idx_images(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("dataset-fashion-mnist"), std::string::npos) << msg;
}

TEST(Idx, WrongMagic) {
  TempDir dir;
  const std::string path = dir.file("labels-as-images.gz");
  write_gz(path, idx_bytes(kIdxMagicU8Labels, {4}, {1, 2, 3, 4}));
  const std::string msg = data_error([&] { read_idx_images(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("magic"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0x00000801"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0x00000803"), std::string::npos) << msg;
  // A file that is not IDX at all.
  write_bytes(path, {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!', '!', '!', '!', '!'});
  EXPECT_NE(data_error([&] { read_idx_images(path); }).find("magic"), std::string::npos);
}

TEST(Idx, TruncatedPayloadRawAndGzip) {
  TempDir dir;
  auto bytes = idx_bytes(kIdxMagicU8Images, {2, 5, 6}, ramp(60));
  bytes.resize(bytes.size() - 26);  // 34 of 60 payload bytes remain
  for (const char* name : {"short", "short.gz"}) {
    const std::string path = dir.file(name);
    if (std::string(name) == "short") write_bytes(path, bytes); else write_gz(path, bytes);
    const std::string msg = data_error([&] { read_idx_images(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("truncated: expected 60 bytes of image data, got 34"), std::string::npos) << msg;
  }
}

TEST(Idx, TruncatedHeader) {
  TempDir dir;
  const std::string path = dir.file("head");
  auto bytes = idx_bytes(kIdxMagicU8Images, {2, 5, 6}, {});
  bytes.resize(9);
  write_bytes(path, bytes);
  const std::string msg = data_error([&] { read_idx_images(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated header"), std::string::npos) << msg;
  write_bytes(path, {0, 0});
  EXPECT_NE(data_error([&] { read_idx_images(path); }).find("truncated header"), std::string::npos);
}

TEST(Idx, TruncatedGzipStream) {
  TempDir dir;
  const std::string good = dir.file("good.gz"), cut = dir.file("cut.gz"), tail = dir.file("notrailer.gz");
  // Incompressible-ish payload so the cut lands inside the deflate data.
  std::vector<uint8_t> pix(20 * 28 * 28);
  uint32_t s = 12345;
  for (auto& p : pix) p = uint8_t((s = s * 1664525u + 1013904223u) >> 24);
  write_gz(good, idx_bytes(kIdxMagicU8Images, {20, 28, 28}, pix));
  auto gz = read_bytes(good);
  ASSERT_GT(gz.size(), 1000u);
  write_bytes(cut, std::vector<uint8_t>(gz.begin(), gz.begin() + std::ptrdiff_t(gz.size() / 2)));
  std::string msg = data_error([&] { read_idx_images(cut); });
  EXPECT_NE(msg.find(cut), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected 15680 bytes of image data"), std::string::npos) << msg;
  // Payload complete, gzip trailer (CRC32 + length, 8 bytes) missing.
  write_bytes(tail, std::vector<uint8_t>(gz.begin(), gz.end() - 8));
  msg = data_error([&] { read_idx_images(tail); });
  EXPECT_NE(msg.find(tail), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(Idx, CorruptGzipData) {
  TempDir dir;
  const std::string path = dir.file("bad.gz");
  std::vector<uint8_t> pix(20 * 28 * 28);
  for (size_t i = 0; i < pix.size(); ++i) pix[i] = uint8_t(i * 31 % 256);
  write_gz(path, idx_bytes(kIdxMagicU8Images, {20, 28, 28}, pix));
  auto gz = read_bytes(path);
  for (size_t i = gz.size() / 3; i < gz.size() / 3 + 16; ++i) gz[i] ^= 0x5A;
  write_bytes(path, gz);
  const std::string msg = data_error([&] { read_idx_images(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(Idx, HeaderCountMismatch) {
  TempDir dir;
  const std::string more = dir.file("more.gz"), fewer = dir.file("fewer.gz"), zero = dir.file("zero");
  // Header promises 3 labels, file holds 4.
  write_gz(more, idx_bytes(kIdxMagicU8Labels, {3}, {1, 2, 3, 4}));
  std::string msg = data_error([&] { read_idx_labels(more); });
  EXPECT_NE(msg.find(more), std::string::npos) << msg;
  EXPECT_NE(msg.find("more than its header promises"), std::string::npos) << msg;
  // Header promises 5 labels, file holds 4.
  write_gz(fewer, idx_bytes(kIdxMagicU8Labels, {5}, {1, 2, 3, 4}));
  msg = data_error([&] { read_idx_labels(fewer); });
  EXPECT_NE(msg.find("truncated: expected 5 bytes of label data, got 4"), std::string::npos) << msg;
  write_bytes(zero, idx_bytes(kIdxMagicU8Images, {2, 0, 3}, {}));
  msg = data_error([&] { read_idx_images(zero); });
  EXPECT_NE(msg.find("dimension 1"), std::string::npos) << msg;
}

TEST(Idx, AbsurdHeaderDoesNotAllocate) {
  TempDir dir;
  const std::string path = dir.file("huge");
  write_bytes(path, idx_bytes(kIdxMagicU8Images, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {1, 2, 3}));
  EXPECT_NE(data_error([&] { read_idx_images(path); }).find("corrupt"), std::string::npos);
  write_bytes(path, idx_bytes(kIdxMagicU8Images, {100000, 1000, 28}, {1, 2, 3}));  // 2.8 GB promised
  EXPECT_NE(data_error([&] { read_idx_images(path); }).find("got 3"), std::string::npos);
}

// FashionMnist's own checks on top of the reader: counts, image size, label range.
TEST(FashionMnistFiles, CountsAndLabelsChecked) {
  TempDir dir;
  const std::string d = dir.path().string();
  const std::string ipath = FashionMnist::images_path(Split::test, d);
  const std::string lpath = FashionMnist::labels_path(Split::test, d);
  std::vector<uint8_t> pix(size_t(FashionMnist::kTestSize) * 784, 0);
  std::vector<uint8_t> lab(size_t(FashionMnist::kTestSize));
  for (size_t i = 0; i < lab.size(); ++i) lab[i] = uint8_t(i % 10);
  pix[784 * 5 + 3] = 255;
  write_gz(ipath, idx_bytes(kIdxMagicU8Images, {10000, 28, 28}, pix));
  write_gz(lpath, idx_bytes(kIdxMagicU8Labels, {10000}, lab));
  {
    FashionMnist ds(Split::test, d);
    ASSERT_EQ(ds.size(), 10000);
    Batch b = ds.get_batch({5, 7});
    EXPECT_EQ(b.input.shape(), (Shape{2, 1, 28, 28}));
    EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{5, 7}));
    const float* x = b.input.data<float>();
    EXPECT_FLOAT_EQ(x[3], (1.0f - 0.2860f) / 0.3530f);
    EXPECT_FLOAT_EQ(x[4], (0.0f - 0.2860f) / 0.3530f);
    EXPECT_THROW(ds.get_batch({10000}), Error);
  }
  // Fewer labels than images.
  write_gz(lpath, idx_bytes(kIdxMagicU8Labels, {9999}, std::vector<uint8_t>(lab.begin(), lab.end() - 1)));
  std::string msg = data_error([&] { FashionMnist(Split::test, d); });
  EXPECT_NE(msg.find(lpath), std::string::npos) << msg;
  EXPECT_NE(msg.find("9999 labels"), std::string::npos) << msg;
  // A label out of range.
  lab[1234] = 10;
  write_gz(lpath, idx_bytes(kIdxMagicU8Labels, {10000}, lab));
  msg = data_error([&] { FashionMnist(Split::test, d); });
  EXPECT_NE(msg.find("label 10 of sample 1234"), std::string::npos) << msg;
  // The test files offered as the train split: wrong count.
  std::filesystem::rename(ipath, FashionMnist::images_path(Split::train, d));
  std::filesystem::rename(lpath, FashionMnist::labels_path(Split::train, d));
  msg = data_error([&] { FashionMnist(Split::train, d); });
  EXPECT_NE(msg.find("10000 images"), std::string::npos) << msg;
  // Missing directory names the package.
  msg = data_error([&] { FashionMnist(Split::test, d + "/nope"); });
  EXPECT_NE(msg.find("dataset-fashion-mnist"), std::string::npos) << msg;
}
