// One run per run directory: while a run holds <run.dir>/.strata.lock, another is refused
// (exit 2, naming run.dir and the holder's pid and host); the lock ends with its holder.
#include "apps/run_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <optional>
#include <string>

#include <strata/core/error.h>
#include "tests/temp_dir_fixture.h"

namespace strata::apps {
namespace {

class RunDirLockTest : public strata::testing::TempDirTest {};

std::string refusal(const std::string& dir) {
  try {
    RunDirLock second(dir);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST_F(RunDirLockTest, ASecondRunIntoTheDirectoryIsRefusedNamingTheHolder) {
  const std::string dir = path("run");
  std::optional<RunDirLock> first(std::in_place, dir);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string msg = refusal(dir);
  EXPECT_NE(msg.find("run.dir: '" + dir + "' is in use by another run (pid " + std::to_string(::getpid()) + " on " +
                     host + "; lock " + dir + "/.strata.lock)"),
            std::string::npos)
      << msg;
  first.reset();  // the holder ends: the directory is free again
  EXPECT_EQ(refusal(dir), "");
}

}  // namespace
}  // namespace strata::apps
