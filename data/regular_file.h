// Data files are opened only after stat() says they are regular files: open() on a FIFO
// blocks until a writer appears, and a device or directory is never an IDX file or corpus.
#pragma once
#include <cstdint>
#include <string>

namespace strata::data {

/// stat()s `path` (following symlinks) and returns its size in bytes. Throws
/// strata::DataError "[<tag>] <path>: ..." when it cannot be stat'ed (missing, a
/// symlink loop, no permission) or is not a regular file (a directory, FIFO, socket or
/// device). Does not open the file.
uint64_t regular_file_size(const std::string& path, const char* tag);

/// This machine's physical memory in bytes (UINT64_MAX when unknown): data that is
/// loaded whole and would not fit is refused before allocating.
uint64_t physical_memory_bytes();

/// "12.3 GiB"-style size for messages.
std::string human_bytes(uint64_t bytes);

}  // namespace strata::data
