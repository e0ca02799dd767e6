// Atomic file writes (tmp + fsync + rename), atomic directory commits (tmp dir +
// renameat2 exchange) and whole-file reads with errors that name the file.
#include <strata/tensor/file_io.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <zlib.h>

#include <strata/core/error.h>

namespace strata {
namespace fs = std::filesystem;
namespace {

std::string errno_str() { return std::strerror(errno); }

std::string parent_of(const std::string& path) { return fs::path(path).parent_path().string(); }

void remove_quietly(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

}  // namespace

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

AtomicFileWriter::AtomicFileWriter(const std::string& path)
    : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) STRATA_THROW(DataError, "cannot create '", tmp_, "': ", errno_str());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t n) {
  STRATA_CHECK(fd_ >= 0, "[AtomicFileWriter] '", path_, "': write after commit");
  const auto* p = static_cast<const uint8_t*>(data);
  crc_ = uint32_t(::crc32_z(crc_, p, n));
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) STRATA_THROW(DataError, "cannot write '", tmp_, "': ", errno_str());
    p += w;
    n -= size_t(w);
  }
}

void AtomicFileWriter::write_at(uint64_t offset, const void* data, size_t n) {
  STRATA_CHECK(fd_ >= 0, "[AtomicFileWriter] '", path_, "': write after commit");
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd_, p, n, off_t(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) STRATA_THROW(DataError, "cannot write '", tmp_, "': ", errno_str());
    p += w;
    n -= size_t(w);
    offset += uint64_t(w);
  }
}

void AtomicFileWriter::commit() {
  STRATA_CHECK(fd_ >= 0, "[AtomicFileWriter] '", path_, "': committed twice");
  if (::fsync(fd_) != 0) STRATA_THROW(DataError, "cannot fsync '", tmp_, "': ", errno_str());
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) STRATA_THROW(DataError, "cannot close '", tmp_, "': ", errno_str());
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    STRATA_THROW(DataError, "cannot rename '", tmp_, "' to '", path_, "': ", errno_str());
  committed_ = true;
  fsync_dir(parent_of(path_));
}

uint32_t write_file_atomic(const std::string& path, const std::vector<std::span<const uint8_t>>& parts) {
  AtomicFileWriter w(path);
  for (const auto& part : parts) w.write(part.data(), part.size());
  w.commit();
  return w.crc32();
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  write_file_atomic(path, std::vector<std::span<const uint8_t>>{bytes});
}

void write_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

void commit_dir(const std::string& tmp, const std::string& dir) {
  fsync_dir(tmp);
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    if (::rename(tmp.c_str(), dir.c_str()) != 0)
      STRATA_THROW(DataError, "cannot rename '", tmp, "' to '", dir, "': ", errno_str());
  } else if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    remove_quietly(tmp);  // now holds the replaced directory
  } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
    const std::string old = dir + ".old";
    remove_quietly(old);
    if (::rename(dir.c_str(), old.c_str()) != 0)
      STRATA_THROW(DataError, "cannot move the old '", dir, "' aside: ", errno_str());
    if (::rename(tmp.c_str(), dir.c_str()) != 0) {
      const std::string err = errno_str();
      (void)::rename(old.c_str(), dir.c_str());
      STRATA_THROW(DataError, "cannot rename '", tmp, "' to '", dir, "': ", err);
    }
    remove_quietly(old);
  } else {
    STRATA_THROW(DataError, "cannot replace '", dir, "' with '", tmp, "': ", errno_str());
  }
  fsync_dir(parent_of(dir));
}

const char* file_kind_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
  }
  return "not a regular file";
}

int open_regular_file(const std::string& path, uint64_t* size, const char* what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) STRATA_THROW(DataError, what, " '", path, "': ", errno_str());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string err = errno_str();
    ::close(fd);
    STRATA_THROW(DataError, what, " '", path, "': ", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    STRATA_THROW(DataError, what, " '", path, "': is ", file_kind_name(st.st_mode), ", not a regular file");
  }
  (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *size = uint64_t(st.st_size);
  return fd;
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  uint64_t size = 0;
  const int fd = open_regular_file(path, &size);
  std::vector<uint8_t> out(static_cast<size_t>(size));
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
