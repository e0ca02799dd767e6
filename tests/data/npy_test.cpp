// .npy files written by numpy (committed fixtures, tests/data_files/make_fixtures.py)
// read back exactly; every malformed header or size is refused naming the file; the
// image/label loaders agree between .npy and IDX copies of the same data.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>

#include <strata/data/array_dataset.h>
#include <strata/data/npy.h>
#include "test_util.h"

using namespace strata;
using namespace strata::data;
using namespace strata::data::testing;

namespace {

const std::string kArrays = std::string(STRATA_SOURCE_DIR) + "/tests/data_files/arrays/";

/// A version 1.0 .npy with `dict` as its header text (padded, '\n'-terminated) and `payload`.
std::vector<uint8_t> npy_bytes(const std::string& dict, const std::vector<uint8_t>& payload) {
  std::string h = dict;
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::vector<uint8_t> out;
  out.reserve(10 + h.size() + payload.size());
  for (int b : {0x93, int('N'), int('U'), int('M'), int('P'), int('Y'), 1, 0}) out.push_back(uint8_t(b));
  out.push_back(uint8_t(h.size() & 0xFF));
  out.push_back(uint8_t(h.size() >> 8));
  for (char c : h) out.push_back(uint8_t(c));
  for (uint8_t b : payload) out.push_back(b);
  return out;
}

}  // namespace

TEST(Npy, ReadsNumpyFixtures) {
  NpyArray x = read_npy(kArrays + "train_x_u8.npy");
  EXPECT_EQ(x.header.dtype, NpyDType::u8);
  EXPECT_EQ(x.header.shape, (std::vector<int64_t>{120, 8, 8}));
  EXPECT_EQ(x.bytes.size(), 120u * 64);
  NpyArray f = read_npy(kArrays + "train_x_f32.npy");
  EXPECT_EQ(f.header.dtype, NpyDType::f32);
  EXPECT_EQ(f.header.shape, (std::vector<int64_t>{120, 64}));
  // float32 values are x/255 of the u8 images.
  for (size_t i = 0; i < 120 * 64; i += 97) {
    float v;
    std::memcpy(&v, f.bytes.data() + 4 * i, 4);
    EXPECT_FLOAT_EQ(v, float(x.bytes[i] / 255.0)) << i;
  }
  for (const char* v : {"v2.npy", "v3.npy"}) {
    NpyArray a = read_npy(kArrays + v);
    EXPECT_EQ(a.header.dtype, NpyDType::i32) << v;
    EXPECT_EQ(a.header.shape, (std::vector<int64_t>{3, 2})) << v;
    int32_t vals[6];
    std::memcpy(vals, a.bytes.data(), 24);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(vals[i], i) << v;
  }
  EXPECT_EQ(read_npy_header(kArrays + "train_y_i64.npy").shape, (std::vector<int64_t>{120}));
}

TEST(Npy, RefusesWhatNumpyWritesButStrataDoesNotRead) {
  const std::pair<const char*, const char*> cases[] = {
      {"fortran.npy", "fortran_order is True"}, {"big_endian.npy", "dtype '>f4' is not supported"},
      {"bool.npy", "dtype '|b1' is not supported"}};
  for (const auto& [file, expect] : cases) {
    const std::string msg = data_error([&] { read_npy(kArrays + file); });
    EXPECT_NE(msg.find(kArrays + file), std::string::npos) << msg;
    EXPECT_NE(msg.find(expect), std::string::npos) << msg;
  }
}

TEST(Npy, MalformedHeadersAndSizes) {
  TempDir dir;
  const std::vector<uint8_t> four = {1, 2, 3, 4};
  const std::string ok = "{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }";
  auto v4 = npy_bytes(ok, four);
  v4[6] = 4;
  auto bad_magic = npy_bytes(ok, four);
  bad_magic[1] = 'X';
  auto long_header = npy_bytes(ok, four);
  long_header[9] = 0x7F;  // header length past the end of the file
  auto no_newline = npy_bytes(ok, four);
  no_newline[no_newline.size() - 5] = ' ';
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    const char* expect;
  };
  const Case cases[] = {
      {"ok_short.npy", npy_bytes(ok, {1, 2, 3}), "needs 4 data bytes, the file holds 3 (truncated)"},
      {"ok_long.npy", npy_bytes(ok, {1, 2, 3, 4, 5}), "the file holds 5 (trailing bytes)"},
      {"v4.npy", v4, "format version 4.0"},
      {"magic.npy", bad_magic, "not a .npy file"},
      {"long_header.npy", long_header, "runs past the end"},
      {"no_newline.npy", no_newline, "does not end in '\\n'"},
      {"missing_key.npy", npy_bytes("{'descr': '|u1', 'shape': (4,), }", four), "needs the keys"},
      {"extra_key.npy", npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (4,), 'x': 1}", four),
       "unexpected or repeated key 'x'"},
      {"repeated_key.npy", npy_bytes("{'descr': '|u1', 'descr': '|u1', 'fortran_order': False, 'shape': (4,)}", four),
       "unexpected or repeated key 'descr'"},
      {"negative.npy", npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (-4,), }", four),
       "expected a non-negative integer"},
      {"overflow.npy",
       npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", four),
       "shape overflows"},
      {"not_dict.npy", npy_bytes("['descr']", four), "expected '{'"},
      {"trailing.npy", npy_bytes(ok + " x", four), "text after the dict"},
      {"fortran_word.npy", npy_bytes("{'descr': '|u1', 'fortran_order': 0, 'shape': (4,), }", four),
       "True or False"},
  };
  for (const auto& c : cases) {
    write_bytes(dir.file(c.name), c.bytes);
    const std::string msg = data_error([&] { read_npy(dir.file(c.name)); });
    EXPECT_NE(msg.find(dir.file(c.name)), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
  }
  // A FIFO is refused before open(), for the data and for the header alone.
  ASSERT_EQ(::mkfifo(dir.file("fifo.npy").c_str(), 0600), 0);
  EXPECT_NE(data_error([&] { read_npy(dir.file("fifo.npy")); }).find("is a FIFO"), std::string::npos);
  EXPECT_NE(data_error([&] { read_npy_header(dir.file("fifo.npy")); }).find("is a FIFO"), std::string::npos);
  // The same header without its optional trailing comma and with a 0-d shape parses.
  write_bytes(dir.file("scalar.npy"), npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': ()}",
                                                {7, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(read_npy(dir.file("scalar.npy")).header.shape.empty());
}

TEST(ArrayData, NpyAndIdxCopiesAgree) {
  auto npy = load_npy_classification(kArrays + "train_x_u8.npy", kArrays + "train_y_i64.npy", 3);
  auto idx = load_idx_classification(kArrays + "train-images-idx3-ubyte.gz", kArrays + "train-labels-idx1-ubyte.gz", 3);
  auto f32 = load_npy_classification(kArrays + "train_x_f32.npy", kArrays + "train_y_i32.npy", 3);
  auto f64 = load_npy_classification(kArrays + "train_x_f64.npy", kArrays + "train_y_u8.npy", 3);
  ASSERT_EQ(npy->size(), 120);
  ASSERT_EQ(idx->size(), 120);
  EXPECT_EQ(npy->sample_shape(), (Shape{1, 8, 8}));  // (N, H, W) gains a channel
  EXPECT_EQ(idx->sample_shape(), (Shape{1, 8, 8}));
  EXPECT_EQ(f32->sample_shape(), (Shape{64}));
  EXPECT_EQ(npy->labels(), idx->labels());
  EXPECT_EQ(npy->labels(), f32->labels());
  EXPECT_EQ(npy->labels(), f64->labels());
  EXPECT_EQ(sample_shape_of("npy", kArrays + "train_x_u8.npy"), (Shape{1, 8, 8}));
  EXPECT_EQ(sample_shape_of("idx", kArrays + "train-images-idx3-ubyte.gz"), (Shape{1, 8, 8}));
  EXPECT_EQ(sample_shape_of("npy", kArrays + "train_x_f32.npy"), (Shape{64}));
  const std::vector<int64_t> pick = {0, 7, 119};
  const Batch a = npy->get_batch(pick), b = idx->get_batch(pick), c = f32->get_batch(pick), d = f64->get_batch(pick);
  ASSERT_EQ(a.input.shape(), (Shape{3, 1, 8, 8}));
  ASSERT_EQ(c.input.shape(), (Shape{3, 64}));
  for (int64_t i = 0; i < 3 * 64; ++i) {
    EXPECT_EQ(a.input.data<float>()[i], b.input.data<float>()[i]);
    EXPECT_NEAR(a.input.data<float>()[i], c.input.data<float>()[i], 1e-6f);
    EXPECT_NEAR(a.input.data<float>()[i], d.input.data<float>()[i], 1e-6f);
  }
  for (int k = 0; k < 3; ++k) EXPECT_EQ(a.target.data<int64_t>()[k], npy->labels()[size_t(pick[size_t(k)])]);
}

TEST(ArrayData, LoaderErrorsNameTheFile) {
  // Labels >= num_classes name the file and the sample.
  std::string msg = data_error([&] { load_npy_classification(kArrays + "train_x_u8.npy", kArrays + "train_y_i64.npy", 2); });
  EXPECT_NE(msg.find("train_y_i64.npy: label 2 of sample"), std::string::npos) << msg;
  msg = data_error([&] {
    load_idx_classification(kArrays + "train-images-idx3-ubyte.gz", kArrays + "train-labels-idx1-ubyte.gz", 2);
  });
  EXPECT_NE(msg.find("train-labels-idx1-ubyte.gz: label 2 of sample"), std::string::npos) << msg;
  // Counts that differ.
  msg = data_error([&] { load_npy_classification(kArrays + "test_x_u8.npy", kArrays + "train_y_i64.npy", 3); });
  EXPECT_NE(msg.find("holds 120 labels but"), std::string::npos) << msg;
  // Wrong dtype / rank.
  msg = data_error([&] { load_npy_classification(kArrays + "train_y_i64.npy", kArrays + "train_y_i64.npy", 3); });
  EXPECT_NE(msg.find("at least 2 dims"), std::string::npos) << msg;
  msg = data_error([&] { load_npy_classification(kArrays + "train_x_u8.npy", kArrays + "train_x_f32.npy", 3); });
  EXPECT_NE(msg.find("labels must be 1-d"), std::string::npos) << msg;
  msg = data_error([&] { load_npy_classification(kArrays + "v2.npy", kArrays + "train_y_i64.npy", 3); });
  EXPECT_NE(msg.find("images must be uint8, float32 or float64, got int32"), std::string::npos) << msg;
  // Negative labels.
  TempDir dir;
  write_bytes(dir.file("neg.npy"), npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
                                             {0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF}));
  write_bytes(dir.file("x.npy"), npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 1), }", {1, 2}));
  msg = data_error([&] { load_npy_classification(dir.file("x.npy"), dir.file("neg.npy"), 3); });
  EXPECT_NE(msg.find("label -1 of sample 1"), std::string::npos) << msg;
}

TEST(ArrayData, GenericIdxShapesAndTypes) {
  TempDir dir;
  // A 4-d IDX (N, C, H, W) keeps its shape; labels from a 1-d file.
  std::vector<uint8_t> px(5 * 2 * 3 * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i);
  write_gz(dir.file("img4.gz"), idx_bytes(0x00000804, {5, 2, 3, 3}, px));
  write_bytes(dir.file("lab"), idx_bytes(0x00000801, {5}, {0, 1, 2, 3, 4}));
  auto ds = load_idx_classification(dir.file("img4.gz"), dir.file("lab"), 5);
  EXPECT_EQ(ds->sample_shape(), (Shape{2, 3, 3}));
  const Batch b = ds->get_batch({4});
  EXPECT_FLOAT_EQ(b.input.data<float>()[0], float(4 * 18) / 255.0f);
  EXPECT_EQ(sample_shape_of("idx", dir.file("img4.gz")), (Shape{2, 3, 3}));
  // A float IDX (type code 0x0D) is refused with the kind expected.
  write_bytes(dir.file("f32"), idx_bytes(0x00000D03, {1, 1, 1}, {0, 0, 0, 0}));
  std::string msg = data_error([&] { load_idx_classification(dir.file("f32"), dir.file("lab"), 5); });
  EXPECT_NE(msg.find("only unsigned-byte IDX files are read"), std::string::npos) << msg;
  // 2-d labels, 1-d images, and a missing file (no Fashion-MNIST hint for a generic file).
  msg = data_error([&] { load_idx_classification(dir.file("img4.gz"), dir.file("img4.gz"), 5); });
  EXPECT_NE(msg.find("labels must be 1-d"), std::string::npos) << msg;
  msg = data_error([&] { load_idx_classification(dir.file("lab"), dir.file("lab"), 5); });
  EXPECT_NE(msg.find("at least 2 dims"), std::string::npos) << msg;
  msg = data_error([&] { load_idx_classification(dir.file("nope.gz"), dir.file("lab"), 5); });
  EXPECT_NE(msg.find("file not found: " + dir.file("nope.gz")), std::string::npos) << msg;
  EXPECT_EQ(msg.find("fashion"), std::string::npos) << msg;
}
