// Hostile checkpoint directories: deep JSON, piece files outside the directory,
// missing shards, boxes that do not tile, a world size that does not match, flipped bytes
// (CRC32 per file in index.json), NaN/inf weights, FIFOs. Each is one DataError naming the
// file (and the tensor), with nothing loaded.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <strata/comm/local.h>
#include <strata/parallel/checkpoint/reader.h>
#include <strata/parallel/checkpoint/writer.h>
#include <strata/tensor/file_io.h>
#include <strata/tensor/ops.h>
#include "tests/hostile_files.h"
#include "tests/temp_dir_fixture.h"

namespace strata::parallel {
namespace {

namespace fs = std::filesystem;
using strata::testing::expect_error;

class CheckpointHostileTest : public strata::testing::TempDirTest {
 protected:
  // A world-1 checkpoint of two tensors; meta lists "w" as the model tensor.
  std::string save_one(const std::string& name, const Tensor& w = ops::arange(0, 12, 1, DType::f32)) {
    const std::string dir = path(name);
    RankPieces p;
    const Tensor w2 = ops::reshape(w, {3, 4});
    p.boxes.push_back({"w", {3, 4}, whole_box({3, 4}), w2});
    p.boxes.push_back({"m.w", {3, 4}, whole_box({3, 4}), ops::zeros({3, 4}, DType::f32)});
    save_single(dir, p, {}, {{"model_tensors", {"w"}}});
    return dir;
  }
  // A 2-rank checkpoint: "w" (4 x 3) split by rows.
  std::string save_two(const std::string& name) {
    const std::string dir = path(name);
    comm::run_local(2, [&](comm::ProcessGroup& g) {
      RankPieces p;
      p.boxes.push_back({"w", {4, 3}, Box{{2 * g.rank(), 0}, {2, 3}}, ops::full({2, 3}, 1.0 + g.rank(), DType::f32)});
      save_sharded(dir, g, p, {}, {});
    });
    return dir;
  }
  static nlohmann::ordered_json index_of(const std::string& dir) {
    return nlohmann::ordered_json::parse(read_file_text(dir + "/index.json"));
  }
  static void write_index(const std::string& dir, const nlohmann::ordered_json& j) {
    write_file_atomic(dir + "/index.json", j.dump(1));
  }
  static std::string shard0(const std::string& dir) { return dir + "/shard_00000_of_00001.safetensors"; }
};

TEST_F(CheckpointHostileTest, DeepNestingInIndexIsRefusedNotACrash) {
  const std::string dir = save_one("c");
  std::string text = read_file_text(dir + "/index.json");
  text.insert(text.find("\"meta\": {") + 9, "\"deep\": " + strata::testing::deep_json_array(100000) + ",");
  write_file_atomic(dir + "/index.json", text);
  expect_error<DataError>([&] { CheckpointReader rd(dir); }, {dir + "/index.json", "recursion limit exceeded"});
}

TEST_F(CheckpointHostileTest, DeepNestingInV1StateJsonIsRefused) {
  const std::string dir = path("v1");
  fs::create_directories(dir);
  save_safetensors(dir + "/model.safetensors", {{"w", ops::zeros({2}, DType::f32)}});
  write_file_atomic(dir + "/state.json", "{\"extra\": " + strata::testing::deep_json_array(100000) + "}");
  expect_error<DataError>([&] { CheckpointReader rd(dir); }, {dir + "/state.json", "recursion limit exceeded"});
}

// An index that lost a model tensor the writer listed is refused by consolidate, which
// would otherwise write a file without it (and exit 0).
TEST_F(CheckpointHostileTest, ConsolidateRefusesAnIndexMissingAListedModelTensor) {
  const std::string dir = save_one("c");
  auto j = index_of(dir);
  j["meta"]["model_tensors"] = {"w", "v"};
  write_index(dir, j);
  const std::string out = path("whole.safetensors");
  expect_error<DataError>([&] { consolidate(dir, out); }, {dir, "meta.model_tensors lists 'v'", "no such tensor"});
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(CheckpointHostileTest, DuplicateKeysInIndexAreRefused) {
  const std::string dir = save_one("c");
  std::string text = read_file_text(dir + "/index.json");
  text.insert(text.find("\"world_size\""), "\"world_size\": 7,\n");
  write_file_atomic(dir + "/index.json", text);
  expect_error<DataError>([&] { CheckpointReader rd(dir); }, {dir + "/index.json", "duplicate key \"world_size\""});
}

TEST_F(CheckpointHostileTest, PieceFileOutsideTheDirectoryIsRefused) {
  for (const std::string bad : {"../../x", "/etc/passwd"}) {
    const std::string dir = save_one("c");
    auto j = index_of(dir);
    j["files"][0] = bad;
    j["checksums"] = {{bad, j["checksums"]["shard_00000_of_00001.safetensors"]}};
    for (auto& [n, t] : j["tensors"].items()) t["pieces"][0]["file"] = bad;
    write_index(dir, j);
    expect_error<DataError>([&] { CheckpointReader rd(dir); }, {dir + "/index.json", "'" + bad + "' is not a plain file name"});
  }
}

TEST_F(CheckpointHostileTest, ShardSymlinkedOutOfTheDirectoryIsRefused) {
  const std::string dir = save_one("c");
  const std::string outside = path("elsewhere.safetensors");
  fs::rename(shard0(dir), outside);
  fs::create_symlink(outside, shard0(dir));
  expect_error<DataError>([&] { CheckpointReader rd(dir); }, {shard0(dir), "outside the checkpoint directory"});
}

TEST_F(CheckpointHostileTest, MissingShardFileIsNamed) {
  const std::string dir = save_two("c");
  fs::remove(dir + "/shard_00001_of_00002.safetensors");
  expect_error<DataError>([&] { CheckpointReader rd(dir); }, {dir + "/shard_00001_of_00002.safetensors", "cannot open"});
}

TEST_F(CheckpointHostileTest, OverlappingBoxesAreRefused) {
  const std::string dir = save_two("c");
  auto j = index_of(dir);
  j["tensors"]["w"]["pieces"][1]["offsets"][0] = 1;
  write_index(dir, j);
  expect_error<DataError>([&] { CheckpointReader rd(dir); }, {dir + "/index.json", "tensor 'w'", "pieces overlap"});
}

TEST_F(CheckpointHostileTest, BoxesWithAGapAreRefused) {
  const std::string dir = save_two("c");
  auto j = index_of(dir);
  j["tensors"]["w"]["pieces"][1]["offsets"][0] = 3;
  j["tensors"]["w"]["pieces"][1]["lengths"][0] = 1;
  write_index(dir, j);
  expect_error<DataError>([&] { CheckpointReader rd(dir); }, {dir + "/index.json", "tensor 'w'", "are in no piece"});
}

TEST_F(CheckpointHostileTest, WorldSizeThatDoesNotMatchTheFilesIsRefused) {
  const std::string dir = save_two("c");
  auto j = index_of(dir);
  j["world_size"] = 3;
  j["mesh"]["dp"] = 3;
  write_index(dir, j);
  expect_error<DataError>([&] { CheckpointReader rd(dir); },
                          {dir + "/index.json", "world_size 3 but 2 shard files are listed"});
}

TEST_F(CheckpointHostileTest, HugeWorldSizeIsShownAsWritten) {
  const std::string dir = save_two("c");
  auto j = index_of(dir);
  j["world_size"] = int64_t(1) << 40;  // get<int> used to wrap it to 0
  write_index(dir, j);
  expect_error<DataError>([&] { CheckpointReader rd(dir); }, {dir + "/index.json", "\"world_size\" is 1099511627776"});
}

TEST_F(CheckpointHostileTest, IndexRecordsACrc32PerFile) {
  const std::string dir = save_two("c");
  const auto j = index_of(dir);
  ASSERT_TRUE(j.contains("checksums")) << j.dump(1);
  for (const std::string f : {"shard_00000_of_00002.safetensors", "shard_00001_of_00002.safetensors"}) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "%08x", SafetensorsFile(dir + "/" + f).file_crc32());
    EXPECT_EQ(j["checksums"][f]["crc32"], hex) << f;
  }
}

TEST_F(CheckpointHostileTest, FlippedDataByteIsACrcMismatchNamingTheFile) {
  const std::string dir = save_two("c");
  const std::string f = dir + "/shard_00001_of_00002.safetensors";
  {
    std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
    s.seekg(-3, std::ios::end);
    const char c = char(s.get());
    s.seekp(-3, std::ios::end);
    s.put(char(c ^ 0x10));  // a flipped bit in a weight: still a valid float, still a valid file
  }
  expect_error<DataError>([&] { CheckpointReader rd(dir); }, {f, "CRC32 mismatch", "index.json records"});
}

TEST_F(CheckpointHostileTest, CheckpointWithoutChecksumsStillLoads) {
  // Version 1 (and v2 before checksums) recorded none: nothing to verify, nothing refused.
  const std::string dir = save_two("c");
  auto j = index_of(dir);
  j.erase("checksums");
  write_index(dir, j);
  const CheckpointReader rd(dir);
  EXPECT_EQ(rd.read_full("w").to_vector<float>()[11], 2.0f);
}

TEST_F(CheckpointHostileTest, NonFiniteModelWeightIsRefusedNamingFileAndTensor) {
  for (const float bad : {NAN, INFINITY}) {
    Tensor w = ops::arange(0, 12, 1, DType::f32);
    w.data<float>()[5] = bad;
    const std::string dir = save_one("c", w);
    const CheckpointReader rd(dir);
    expect_error<DataError>([&] { rd.read_full("w"); }, {shard0(dir), "tensor 'w'", "element 5", "not finite"});
    expect_error<DataError>([&] { rd.read("w", 4, 6); }, {shard0(dir), "tensor 'w'", "not finite"});
    EXPECT_EQ(rd.read("w", 0, 5).to_vector<float>()[4], 4.0f);  // the finite part reads
  }
}

TEST_F(CheckpointHostileTest, NonFiniteOverrideLoadsTheWeights) {
  Tensor w = ops::arange(0, 12, 1, DType::f32);
  w.data<float>()[5] = NAN;
  const std::string dir = save_one("c", w);
  CheckpointReader rd(dir);
  rd.allow_nonfinite(true);
  EXPECT_TRUE(std::isnan(rd.read_full("w").to_vector<float>()[5]));
  ::setenv(kAllowNonfiniteEnv, "1", 1);
  const CheckpointReader env(dir);
  ::unsetenv(kAllowNonfiniteEnv);
  EXPECT_TRUE(std::isnan(env.read_full("w").to_vector<float>()[5]));
}

// Optimizer state is refused like the weights: an inf in Adam's second moment would turn
// every weight NaN one step after the resume.
TEST_F(CheckpointHostileTest, NonFiniteOptimizerStateIsRefusedNamingFileAndTensor) {
  const std::string dir = path("c");
  RankPieces p;
  Tensor m = ops::zeros({3, 4}, DType::f32);
  m.data<float>()[7] = INFINITY;
  p.boxes.push_back({"w", {3, 4}, whole_box({3, 4}), ops::zeros({3, 4}, DType::f32)});
  p.boxes.push_back({"exp_avg_sq.w", {3, 4}, whole_box({3, 4}), m});
  save_single(dir, p, {}, {{"model_tensors", {"w"}}});
  const CheckpointReader rd(dir);
  EXPECT_NO_THROW(rd.read_full("w"));
  expect_error<DataError>([&] { rd.read_full("exp_avg_sq.w"); },
                          {shard0(dir), "tensor 'exp_avg_sq.w'", "element 7", "not finite"});
}

TEST_F(CheckpointHostileTest, FifoAsIndexIsRefusedWithoutBlocking) {
  const std::string dir = path("c");
  fs::create_directories(dir);
  const strata::testing::FifoReleaser fifo(dir + "/index.json");
  ASSERT_TRUE(fifo.ok());
  expect_error<DataError>([&] { CheckpointReader rd(dir); }, {dir + "/index.json", "is a FIFO, not a regular file"});
}

TEST_F(CheckpointHostileTest, FifoAsShardIsRefusedWithoutBlocking) {
  const std::string dir = save_one("c");
  fs::remove(shard0(dir));
  const strata::testing::FifoReleaser fifo(shard0(dir));
  ASSERT_TRUE(fifo.ok());
  expect_error<DataError>([&] { CheckpointReader rd(dir); }, {shard0(dir), "is a FIFO, not a regular file"});
}

}  // namespace
}  // namespace strata::parallel
