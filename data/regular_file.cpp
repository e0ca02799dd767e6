// stat()-based file kind checks and the memory bound shared by the IDX reader and the
// text corpus.
#include <strata/data/regular_file.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <strata/core/error.h>

namespace strata::data {
namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}

}  // namespace

uint64_t regular_file_size(const std::string& path, const char* tag) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    STRATA_THROW(DataError, "[", tag, "] cannot stat ", path, ": ", std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    STRATA_THROW(DataError, "[", tag, "] ", path, " is ", kind_of(st.st_mode),
                 ", not a regular file; refusing to open it");
  return uint64_t(st.st_size);
}

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : UINT64_MAX;
}

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

}  // namespace strata::data
