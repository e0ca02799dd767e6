// A run's directory: one run at a time (`strata train` and `strata bench soak` hold an
// advisory lock, flock, on <run.dir>/.strata.lock for their whole life, taken before the
// earlier-run guard and --overwrite touch anything, so a second run started into the same
// directory is refused instead of interleaving metrics.jsonl and deleting the first one's
// files), and the earlier run a new one must not silently overwrite.
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

/// True when `dir` holds an earlier run's metrics.jsonl or checkpoints/.
bool holds_earlier_run(const std::string& dir);
/// Removes an earlier run's metrics.jsonl and checkpoints/ (--overwrite). DataError naming
/// the path when that fails.
void remove_earlier_run(const std::string& dir);

}  // namespace strata::apps
