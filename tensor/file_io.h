// Whole-file I/O with crash safety: writers never leave a half-written file behind
// (write "<path>.tmp.<pid>", fsync, rename), readers report the file they failed on.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace strata {

/// Writes `bytes` to `path` atomically: the data goes to "<path>.tmp.<pid>", is
/// fsync'ed, then renamed over `path` (and the directory is fsync'ed). On any failure
/// the temporary file is removed and DataError names the path. Not thread-safe for
/// concurrent writers of the same path within one process.
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);
/// Convenience overload for text (JSON, YAML).
void write_file_atomic(const std::string& path, const std::string& text);
/// Several buffers written back to back into one file, atomically (avoids a concat copy).
void write_file_atomic(const std::string& path, const std::vector<std::span<const uint8_t>>& parts);

/// Reads the whole file; DataError naming the path if it is missing or unreadable.
std::vector<uint8_t> read_file_bytes(const std::string& path);
std::string read_file_text(const std::string& path);

/// fsyncs a directory so a rename inside it is durable (best effort; errors ignored).
void fsync_dir(const std::string& dir);

}  // namespace strata
