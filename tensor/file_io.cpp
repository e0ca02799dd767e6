// Atomic file writes (tmp + fsync + rename) and whole-file reads with errors that
// name the file.
#include "tensor/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace strata {
namespace {

std::string errno_str() { return std::strerror(errno); }

void write_all(int fd, const uint8_t* p, size_t n, const std::string& tmp) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      STRATA_THROW(DataError, "cannot write '", tmp, "': ", errno_str());
    }
    p += w;
    n -= size_t(w);
  }
}

}  // namespace

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

void write_file_atomic(const std::string& path, const std::vector<std::span<const uint8_t>>& parts) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) STRATA_THROW(DataError, "cannot create '", tmp, "': ", errno_str());
  try {
    for (const auto& part : parts) write_all(fd, part.data(), part.size(), tmp);
    if (::fsync(fd) != 0) STRATA_THROW(DataError, "cannot fsync '", tmp, "': ", errno_str());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    STRATA_THROW(DataError, "cannot close '", tmp, "': ", errno_str());
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = errno_str();
    ::unlink(tmp.c_str());
    STRATA_THROW(DataError, "cannot rename '", tmp, "' to '", path, "': ", err);
  }
  fsync_dir(std::filesystem::path(path).parent_path().string());
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  write_file_atomic(path, std::vector<std::span<const uint8_t>>{bytes});
}

void write_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) STRATA_THROW(DataError, "cannot open '", path, "': ", errno_str());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd);
    STRATA_THROW(DataError, "cannot read '", path, "': ", S_ISDIR(st.st_mode) ? "is a directory" : errno_str());
  }
  std::vector<uint8_t> out(size_t(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const std::string err = r < 0 ? errno_str() : std::string("unexpected end of file");
      ::close(fd);
      STRATA_THROW(DataError, "cannot read '", path, "': ", err);
    }
    got += size_t(r);
  }
  ::close(fd);
  return out;
}

std::string read_file_text(const std::string& path) {
  const auto b = read_file_bytes(path);
  return std::string(b.begin(), b.end());
}

}  // namespace strata
