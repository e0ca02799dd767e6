// Every committed fuzz corpus file through its entry point, compiled without libFuzzer
// (any compiler): a regression test of seconds for inputs that once crashed or are
// worth keeping. A harness that crashes or lets a non-strata exception escape fails here.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include <strata/parallel/checkpoint/reader.h>

#include "fuzz_targets.h"

namespace {

// Feeds each file of tests/fuzz/corpus/<name>/ to `target`; returns how many.
template <class F>
int run_corpus(const std::string& name, F target) {
  const std::filesystem::path dir = std::filesystem::path(STRATA_SOURCE_DIR) / "tests/fuzz/corpus" / name;
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    SCOPED_TRACE(e.path().string());
    EXPECT_EQ(target(bytes.data(), bytes.size()), 0);
    ++n;
  }
  return n;
}

TEST(FuzzCorpus, Config) { EXPECT_GE(run_corpus("config", strata::fuzz::config), 10); }
TEST(FuzzCorpus, TrainConfig) { EXPECT_GE(run_corpus("config", strata::fuzz::train_config), 10); }
TEST(FuzzCorpus, Idx) { EXPECT_GE(run_corpus("idx", strata::fuzz::idx), 10); }
TEST(FuzzCorpus, Safetensors) { EXPECT_GE(run_corpus("safetensors", strata::fuzz::safetensors), 10); }
TEST(FuzzCorpus, CheckpointIndex) { EXPECT_GE(run_corpus("index", strata::fuzz::checkpoint_index), 10); }

// The index harness's seed is a real checkpoint: its valid index must open next to the
// fixture shards, or the harness would only ever fuzz the error paths.
TEST(FuzzCorpus, IndexSeedOpens) {
  namespace fs = std::filesystem;
  const fs::path src(STRATA_SOURCE_DIR);
  const fs::path dir = fs::temp_directory_path() / ("strata_fuzz_seed_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src / "tests/fuzz/index_shards")) fs::copy_file(e.path(), dir / e.path().filename());
  fs::copy_file(src / "tests/fuzz/corpus/index/valid.json", dir / "index.json");
  const strata::parallel::CheckpointReader ck(dir.string());
  EXPECT_EQ(ck.world_size(), 2);
  EXPECT_GT(ck.names().size(), 4u);
  for (const std::string& n : ck.names()) EXPECT_EQ(ck.read_full(n).shape(), ck.global_shape(n)) << n;
  fs::remove_all(dir);
}

}  // namespace
