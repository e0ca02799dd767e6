// The run directory: its advisory lock and the earlier run a new one must not overwrite (see run_dir.h).
#include "apps/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <strata/core/config.h>
#include <strata/core/error.h>

namespace strata::apps {

RunDirLock::RunDirLock(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) STRATA_THROW(DataError, "cannot create run directory '", dir, "': ", ec.message());
  const std::string path = (std::filesystem::path(dir) / kFile).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) STRATA_THROW(DataError, "cannot open the run directory lock '", path, "': ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[256] = {};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK)
      STRATA_THROW(DataError, "cannot lock the run directory '", path, "': ", std::strerror(err));
    std::string who(holder, n > 0 ? size_t(n) : 0);
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    config_fail("run.dir", "'" + dir + "' is in use by another run (" + (who.empty() ? "holder unknown" : who) +
                               "; lock " + path + "): wait for it to end, or set another run.dir");
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string me = "pid " + std::to_string(::getpid()) + " on " + host + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != ssize_t(me.size()))
    STRATA_THROW(DataError, "cannot write the run directory lock '", path, "': ", std::strerror(errno));
}

bool holds_earlier_run(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(std::filesystem::path(dir) / "metrics.jsonl", ec) ||
         std::filesystem::exists(std::filesystem::path(dir) / "checkpoints", ec);
}

void remove_earlier_run(const std::string& dir) {
  std::error_code ec;
  const std::filesystem::path checkpoints = std::filesystem::path(dir) / "checkpoints";
  std::filesystem::remove(std::filesystem::path(dir) / "metrics.jsonl", ec);
  std::filesystem::remove_all(checkpoints, ec);
  if (ec) STRATA_THROW(DataError, "--overwrite: cannot remove '", checkpoints.string(), "': ", ec.message());
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race a new holder)
}

}  // namespace strata::apps
