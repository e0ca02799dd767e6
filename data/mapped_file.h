// A read-only memory map of a regular file: token files of billions of tokens are read
// in place (the page cache holds them once, whatever the number of loader threads).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace strata::data {

/// Maps `path` read-only. Thread-safety: bytes() may be read from any thread; the
/// mapping lives until the object is destroyed. Move-only.
class MappedFile {
 public:
  /// Throws strata::DataError "[<tag>] <path>: ..." when the path is missing, not a
  /// regular file (checked before open(): a FIFO would block), unreadable or unmappable.
  /// An empty file maps to an empty span.
  MappedFile(const std::string& path, const char* tag);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace strata::data
