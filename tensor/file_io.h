// Whole-file I/O with crash safety, the one atomic-commit helper of strata: files are
// written as "<path>.tmp.<pid>", fsync'ed and renamed; checkpoint directories are
// filled as "<dir>.tmp" and swapped into place. Readers report the file they failed on.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace strata {

/// A file written in pieces and published atomically. It keeps the CRC32 (zlib's crc32_z)
/// of every byte written, so a writer learns its file's checksum without reading it back: bytes go to "<path>.tmp.<pid>";
/// commit() fsyncs, closes and renames it over `path` (then fsyncs the directory). If
/// the writer is destroyed uncommitted (an exception on the way), the temporary file is
/// removed and `path` is untouched. DataError naming the file on any I/O failure.
/// Move-less, single-threaded.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  void write(const void* data, size_t n);
  /// Overwrites bytes already written at `offset` (a header whose counts are known only
  /// at the end); crc32() then no longer describes the file.
  void write_at(uint64_t offset, const void* data, size_t n);
  void commit();
  /// CRC32 of the bytes written so far.
  uint32_t crc32() const { return crc_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
  uint32_t crc_ = 0;
};

/// Writes `bytes` to `path` atomically (AtomicFileWriter). Not thread-safe for
/// concurrent writers of the same path within one process.
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);
/// Convenience overload for text (JSON, YAML).
void write_file_atomic(const std::string& path, const std::string& text);
/// Several buffers written back to back into one file, atomically (avoids a concat copy).
/// Returns the file's CRC32.
uint32_t write_file_atomic(const std::string& path, const std::vector<std::span<const uint8_t>>& parts);

/// Publishes the finished directory `tmp` as `dir` (same parent filesystem): a plain
/// rename when `dir` does not exist; else an atomic exchange of the two names
/// (renameat2 RENAME_EXCHANGE) followed by removing the old contents, or, where the
/// filesystem cannot exchange, `dir` -> "<dir>.old", `tmp` -> `dir`, remove the old one
/// (restoring `dir` if the second rename fails). fsyncs `tmp` before and the parent
/// after. DataError naming both paths on failure; `dir` is then the old or the new
/// checkpoint, never a mix.
void commit_dir(const std::string& tmp, const std::string& dir);

/// Opens `path` read-only (O_CLOEXEC) if it is a regular file, without blocking: a FIFO,
/// device, socket or directory is refused (DataError "<what> '<path>': is a FIFO, not a
/// regular file") instead of hanging in open() or read(). Returns the descriptor (the
/// caller closes it) and its size in *size. `what` prefixes the message ("cannot open").
int open_regular_file(const std::string& path, uint64_t* size, const char* what = "cannot open");

/// "a FIFO", "a directory", "a character device", ... for a stat mode (messages).
const char* file_kind_name(unsigned mode);

/// Reads the whole file; DataError naming the path if it is missing, unreadable or not a
/// regular file (open_regular_file).
std::vector<uint8_t> read_file_bytes(const std::string& path);
std::string read_file_text(const std::string& path);

/// fsyncs a directory so a rename inside it is durable (best effort; errors ignored).
void fsync_dir(const std::string& dir);

}  // namespace strata
