// TensorBoard event files: the CRC-32C of TFRecord frames against its published check
// value, and records decoded field by field as TensorBoard's reader would see them.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "apps/tensorboard.h"
#include "tests/temp_dir_fixture.h"

namespace strata::apps {
namespace {

class TensorBoardTest : public strata::testing::TempDirTest {};

// A minimal protobuf reader for the test: (field, wire type, payload) of each field.
struct Field {
  int number = 0, wire = 0;
  uint64_t varint = 0;
  std::string bytes;  // wire types 1, 2 and 5 (fixed as raw bytes)
};
uint64_t get_varint(const std::string& s, size_t& i) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto b = uint8_t(s.at(i++));
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
}
std::vector<Field> fields(const std::string& msg) {
  std::vector<Field> out;
  for (size_t i = 0; i < msg.size();) {
    Field f;
    const uint64_t key = get_varint(msg, i);
    f.number = int(key >> 3), f.wire = int(key & 7);
    if (f.wire == 0) f.varint = get_varint(msg, i);
    const size_t n = f.wire == 1 ? 8 : f.wire == 5 ? 4 : f.wire == 2 ? size_t(get_varint(msg, i)) : 0;
    f.bytes = msg.substr(i, n);
    i += n;
    out.push_back(f);
  }
  return out;
}

TEST_F(TensorBoardTest, Crc32cCheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C catalogue's check value
  EXPECT_EQ(crc32c("", 0), 0u);
  const uint32_t c = crc32c("123456789", 9);
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST_F(TensorBoardTest, ScalarEventFields) {
  const std::string e = encode_event(1700000000.5, 300, "", {{"train/loss", 2.5f}, {"val/loss", 1.25f}});
  const auto top = fields(e);
  ASSERT_EQ(top.size(), 3u);
  double wall = 0;
  std::memcpy(&wall, top[0].bytes.data(), 8);
  EXPECT_EQ(top[0].number, 1);
  EXPECT_EQ(wall, 1700000000.5);
  EXPECT_EQ(top[1].number, 2);
  EXPECT_EQ(top[1].varint, 300u);
  EXPECT_EQ(top[2].number, 5);  // summary
  const auto values = fields(top[2].bytes);
  ASSERT_EQ(values.size(), 2u);
  const auto v1 = fields(values[1].bytes);
  ASSERT_EQ(v1.size(), 2u);
  EXPECT_EQ(v1[0].bytes, "val/loss");
  float f = 0;
  std::memcpy(&f, v1[1].bytes.data(), 4);
  EXPECT_EQ(v1[1].number, 2);
  EXPECT_EQ(f, 1.25f);
}

TEST_F(TensorBoardTest, FileIsFramedRecords) {
  std::string path;
  {
    TensorBoardWriter w(this->path("run/tb"));
    w.scalars(10, {{"train/loss", 3.0f}});
    w.scalars(20, {{"train/loss", 2.0f}});
    path = w.path();
  }
  EXPECT_NE(path.find("events.out.tfevents."), std::string::npos);
  std::ifstream in(path, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  for (size_t i = 0; i < data.size();) {
    ASSERT_LE(i + 12, data.size());
    uint64_t len = 0;
    uint32_t len_crc = 0, data_crc = 0;
    std::memcpy(&len, data.data() + i, 8);
    std::memcpy(&len_crc, data.data() + i + 8, 4);
    EXPECT_EQ(len_crc, masked_crc32c(&len, 8));
    ASSERT_LE(i + 12 + len + 4, data.size());
    records.push_back(data.substr(i + 12, len));
    std::memcpy(&data_crc, data.data() + i + 12 + len, 4);
    EXPECT_EQ(data_crc, masked_crc32c(records.back().data(), len));
    i += 12 + len + 4;
  }
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(fields(records[0]).at(2).bytes, "brain.Event:2");  // the file_version record first
  EXPECT_EQ(fields(records[2]).at(1).varint, 20u);
}

}  // namespace
}  // namespace strata::apps
