// safetensors: round trips of every dtype, the byte layout checked by hand, and each
// kind of corruption rejected with a DataError that names the file and the tensor.
#include <strata/tensor/safetensors.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include <strata/tensor/file_io.h>
#include <strata/tensor/ops.h>

namespace strata {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// Builds a file from a header JSON text and raw data bytes (the way another writer might).
void write_raw(const std::string& path, const std::string& header, const std::vector<uint8_t>& data,
               uint64_t claimed_len = UINT64_MAX) {
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = claimed_len == UINT64_MAX ? header.size() : claimed_len;
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(header.data(), std::streamsize(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
}

template <class T>
Tensor make(const Shape& shape, int seed) {
  Tensor t = Tensor::empty(shape, dtype_v<T>);
  T* p = static_cast<T*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      p[i].bits = uint16_t(i * 7919 + seed);
    else
      p[i] = T((i * 37 + seed) % 251) - T(100 * std::is_signed_v<T>) + T(std::is_floating_point_v<T> ? 0.25 : 0);
  }
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), size_t(a.nbytes())) == 0);  // empty: no data pointer
}

// Expects fn to throw DataError whose message contains every string in `parts`.
template <class F>
void expect_data_error(F&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

TEST_F(SafetensorsTest, RoundTripsEveryDtypeAndMetadata) {
  NamedTensors in = {{"w.f32", make<float>({3, 5}, 1)},     {"w.f64", make<double>({2, 2, 2}, 2)},
                     {"w.f16", make<Half>({7}, 3)},         {"w.bf16", make<BFloat16>({1, 3}, 4)},
                     {"w.i32", make<int32_t>({4}, 5)},      {"w.i64", make<int64_t>({2, 3}, 6)},
                     {"w.u8", make<uint8_t>({5}, 7)},       {"scalar", make<float>({}, 8)},
                     {"empty", Tensor::empty({0, 4}, DType::f32)}};
  const SafetensorsMetadata meta = {{"format", "pt"}, {"step", "12"}};
  save_safetensors(path("a.safetensors"), in, meta);
  SafetensorsMetadata got_meta;
  const NamedTensors out = load_safetensors(path("a.safetensors"), &got_meta);
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].first, in[i].first);  // file-data order == write order
    EXPECT_TRUE(same_bytes(out[i].second, in[i].second)) << in[i].first;
  }
  EXPECT_EQ(got_meta, meta);
  // No temporary file is left behind by the atomic write.
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_EQ(e.path().filename(), "a.safetensors");
}

TEST_F(SafetensorsTest, ByteLayoutFollowsTheFormat) {
  Tensor a = make<float>({2, 3}, 1);
  Tensor b = make<int64_t>({2}, 2);
  save_safetensors(path("b.safetensors"), {{"a", a}, {"b", b}}, {{"k", "v"}});
  const auto bytes = read_file_bytes(path("b.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 24 + 16);
  const auto j = nlohmann::json::parse(std::string(bytes.begin() + 8, bytes.begin() + 8 + long(n)));
  EXPECT_EQ(j["a"]["dtype"], "F32");
  EXPECT_EQ(j["a"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(j["a"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(j["b"]["dtype"], "I64");
  EXPECT_EQ(j["b"]["data_offsets"], nlohmann::json({24, 40}));
  EXPECT_EQ(j["__metadata__"]["k"], "v");
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, a.raw_data(), 24), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n + 24, b.raw_data(), 16), 0);
}

TEST_F(SafetensorsTest, SavesStridedViewsAsContiguousData) {
  Tensor a = make<float>({3, 4}, 9);
  Tensor t = ops::transpose(a, 0, 1);  // (4,3) non-contiguous view
  save_safetensors(path("t.safetensors"), {{"t", t}});
  const auto out = load_safetensors(path("t.safetensors"));
  ASSERT_EQ(out[0].second.shape(), (Shape{4, 3}));
  const float* src = a.data<float>();
  const float* got = out[0].second.data<float>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(got[i * 3 + j], src[j * 4 + i]);
}

TEST_F(SafetensorsTest, ReadsForeignLayoutOutOfOrderUnpadded) {
  // Header keys in another order than the data, no padding, offsets not sorted by name.
  std::vector<uint8_t> data(12 + 4);
  const float x[3] = {1.5f, -2.0f, 3.25f};
  const int32_t y = -7;
  std::memcpy(data.data(), &y, 4);
  std::memcpy(data.data() + 4, x, 12);
  write_raw(path("f.safetensors"),
            R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[4,16]},"y":{"dtype":"I32","shape":[],"data_offsets":[0,4]}})",
            data);
  const auto out = load_safetensors(path("f.safetensors"));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].first, "y");
  EXPECT_EQ(out[0].second.item<int>(), -7);
  EXPECT_EQ(out[1].first, "x");
  EXPECT_EQ(out[1].second.to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
}

TEST_F(SafetensorsTest, RejectsTruncatedFile) {
  const std::string p = path("t.safetensors");
  save_safetensors(p, {{"first", make<float>({4}, 1)}, {"second", make<float>({8}, 2)}});
  fs::resize_file(p, fs::file_size(p) - 5);
  expect_data_error([&] { load_safetensors(p); }, {p, "second", "truncated"});
  fs::resize_file(p, 5);
  expect_data_error([&] { load_safetensors(p); }, {p, "too short"});
}

TEST_F(SafetensorsTest, RejectsBadHeaderLength) {
  const std::string p = path("h.safetensors");
  write_raw(p, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", {0, 0, 0, 0}, 1u << 30);
  expect_data_error([&] { load_safetensors(p); }, {p, "header length"});
}

TEST_F(SafetensorsTest, RejectsBadJson) {
  const std::string p = path("j.safetensors");
  write_raw(p, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", {0, 0, 0, 0});
  expect_data_error([&] { load_safetensors(p); }, {p, "JSON"});
  write_raw(p, R"([1,2,3])", {});
  expect_data_error([&] { load_safetensors(p); }, {p, "not a JSON object"});
}

TEST_F(SafetensorsTest, RejectsOffsetsOutOfRange) {
  const std::string p = path("o.safetensors");
  write_raw(p, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", std::vector<uint8_t>(8));
  expect_data_error([&] { load_safetensors(p); }, {p, "'w'", "past the data section"});
  write_raw(p, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", std::vector<uint8_t>(8));
  expect_data_error([&] { load_safetensors(p); }, {p, "'w'", "end before begin"});
  write_raw(p, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-1,7]}})", std::vector<uint8_t>(8));
  expect_data_error([&] { load_safetensors(p); }, {p, "'w'", "non-negative"});
}

TEST_F(SafetensorsTest, RejectsShapeSizeMismatch) {
  const std::string p = path("s.safetensors");
  write_raw(p, R"({"bias":{"dtype":"F64","shape":[3],"data_offsets":[0,16]}})", std::vector<uint8_t>(16));
  expect_data_error([&] { load_safetensors(p); }, {p, "'bias'", "needs 24"});
}

TEST_F(SafetensorsTest, RejectsOverlapsUnknownDtypesAndMissingFields) {
  const std::string p = path("v.safetensors");
  write_raw(p,
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            std::vector<uint8_t>(12));
  expect_data_error([&] { load_safetensors(p); }, {p, "'b'", "overlap", "'a'"});
  write_raw(p, R"({"q":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", std::vector<uint8_t>(2));
  expect_data_error([&] { load_safetensors(p); }, {p, "'q'", "F8_E4M3"});
  write_raw(p, R"({"q":{"dtype":"F32","data_offsets":[0,4]}})", std::vector<uint8_t>(4));
  expect_data_error([&] { load_safetensors(p); }, {p, "'q'", "shape"});
  write_raw(p, R"({"q":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"__metadata__":{"n":3}})",
            std::vector<uint8_t>(4));
  expect_data_error([&] { load_safetensors(p); }, {p, "__metadata__"});
}

TEST_F(SafetensorsTest, MissingFileNamesThePath) {
  const std::string p = path("nope.safetensors");
  expect_data_error([&] { load_safetensors(p); }, {p});
}

TEST_F(SafetensorsTest, RejectsDuplicateNamesOnSave) {
  EXPECT_THROW(save_safetensors(path("d.safetensors"), {{"a", make<float>({1}, 0)}, {"a", make<float>({1}, 1)}}),
               Error);
  EXPECT_FALSE(fs::exists(path("d.safetensors")));
}

TEST_F(SafetensorsTest, AtomicWriteReplacesWholeFile) {
  const std::string p = path("x.txt");
  write_file_atomic(p, std::string("first version, longer"));
  write_file_atomic(p, std::string("second"));
  EXPECT_EQ(read_file_text(p), "second");
  EXPECT_THROW(write_file_atomic(path("no/such/dir/x.txt"), std::string("x")), DataError);
}

}  // namespace
}  // namespace strata
