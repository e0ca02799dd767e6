// Every committed fuzz corpus file through its entry point, compiled without libFuzzer
// (any compiler): a regression test of seconds for inputs that once crashed or are
// worth keeping. A harness that crashes or lets a non-strata exception escape fails here.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

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

}  // namespace
