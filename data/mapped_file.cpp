// mmap/munmap behind MappedFile; the file descriptor is closed as soon as it is mapped.
#include <strata/data/mapped_file.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <strata/core/error.h>
#include <strata/data/regular_file.h>

namespace strata::data {

MappedFile::MappedFile(const std::string& path, const char* tag) : path_(path) {
  const uint64_t n = regular_file_size(path, tag);  // before open(): a FIFO would block
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) STRATA_THROW(DataError, "[", tag, "] cannot open ", path, ": ", std::strerror(errno));
  if (n > 0) {
    void* p = ::mmap(nullptr, size_t(n), PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) STRATA_THROW(DataError, "[", tag, "] cannot map ", path, ": ", std::strerror(err));
    data_ = static_cast<const uint8_t*>(p);
    size_ = size_t(n);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept : path_(std::move(o.path_)), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

}  // namespace strata::data
