// Logging: rank-tagged, levelled lines; rank 0 logs info to its file, other ranks only
// warnings and errors; run.log_level and STRATA_LOG_LEVEL choose the level; bad names
// are config errors naming the key.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "apps/trainer.h"
#include <strata/core/log.h>
#include "tests/apps/test_files.h"
#include "tests/temp_dir_fixture.h"

namespace strata::apps {
namespace {

class LogTest : public strata::testing::TempDirTest {
 protected:
  void TearDown() override {
    ::unsetenv("STRATA_LOG_LEVEL");
    init_logging(0);  // back to the defaults for the other tests in this binary
    TempDirTest::TearDown();
  }
};

std::string read(const std::string& file) {
  std::ifstream f(file);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST_F(LogTest, RankFilesCarryRankLevelAndTime) {
  init_logging(0, std::nullopt, path("logs"));
  spdlog::info("note {}", 1);
  spdlog::warn("careful {}", 2);
  init_logging(3, std::nullopt, path("logs"));
  spdlog::info("not on rank 3");
  spdlog::error("failed {}", 3);
  spdlog::default_logger()->flush();
  const std::string r0 = read(path("logs/rank0.log")), r3 = read(path("logs/rank3.log"));
  EXPECT_NE(r0.find("] [rank 0] [info] note 1"), std::string::npos) << r0;
  EXPECT_NE(r0.find("] [rank 0] [warning] careful 2"), std::string::npos) << r0;
  EXPECT_EQ(r3.find("not on rank 3"), std::string::npos) << r3;
  EXPECT_NE(r3.find("] [rank 3] [error] failed 3"), std::string::npos) << r3;
  EXPECT_EQ(r0.rfind("[20", 0), 0u);  // starts with the date
}

TEST_F(LogTest, LevelFromConfigOrEnvironment) {
  init_logging(2, spdlog::level::debug, path("a"));
  spdlog::debug("deep");
  ::setenv("STRATA_LOG_LEVEL", "error", 1);
  init_logging(0, spdlog::level::debug, path("b"));  // the environment wins
  spdlog::warn("hidden");
  spdlog::default_logger()->flush();
  EXPECT_NE(read(path("a/rank2.log")).find("[debug] deep"), std::string::npos);
  EXPECT_EQ(read(path("b/rank0.log")).find("hidden"), std::string::npos);
  ::setenv("STRATA_LOG_LEVEL", "loud", 1);
  EXPECT_THROW(init_logging(0), ConfigError);
  ::unsetenv("STRATA_LOG_LEVEL");
  try {
    TrainConfig::load(kTinyMlp, {"run.log_level=verbose"});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("run.log_level: expected one of trace|debug|info|warn|error"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(LogTest, TrainingWritesTheRankLog) {
  Trainer t(TrainConfig::load(kTinyMlp, {"run.dir=" + path("run"), "train.max_steps=2"}), {.verbose = false});
  t.train();
  spdlog::default_logger()->flush();
  EXPECT_NE(read(path("run/logs/rank0.log")).find("[info] checkpoint written: "), std::string::npos);
}

}  // namespace
}  // namespace strata::apps
