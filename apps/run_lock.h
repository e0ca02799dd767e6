// One run per run directory: `strata train` holds an advisory lock (flock) on
// <run.dir>/.strata.lock for its whole life, taken before the earlier-run guard and
// --overwrite touch anything, so a second run started into the same directory is refused
// instead of interleaving metrics.jsonl and deleting the first one's temporary files.
#pragma once
#include <string>

namespace strata::apps {

class RunDirLock {
 public:
  /// Creates `dir` if needed and takes the lock. ConfigError naming run.dir and the
  /// holder's pid and host when another open description holds it.
  explicit RunDirLock(const std::string& dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  static constexpr const char* kFile = ".strata.lock";

 private:
  int fd_ = -1;
};

}  // namespace strata::apps
