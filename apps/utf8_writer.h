// What `strata sample` prints: a byte-level model emits any byte, and a terminal shown
// invalid UTF-8 garbles the line. Bytes that form valid UTF-8 are written as they are; any
// other byte is written as the escape \xNN, so the output is always valid UTF-8 text.
#pragma once
#include <cstdio>
#include <string>

namespace strata::apps {

/// Streams bytes to `out` as valid UTF-8 (see above). A multi-byte character may arrive
/// one byte per call: it is held until complete. Not thread-safe.
class Utf8Writer {
 public:
  explicit Utf8Writer(std::FILE* out) : out_(out) {}
  /// Accepts one byte; writes whatever is decided by it.
  void put(unsigned char byte);
  /// Escapes an incomplete trailing sequence and flushes.
  void finish();
  /// The text written so far (tests).
  const std::string& written() const { return written_; }

 private:
  void emit(const std::string& s);
  void escape_first();  // pending_[0] as \xNN; the rest is re-examined

  std::FILE* out_;
  std::string pending_;  // the start of a multi-byte character
  std::string written_;
};

}  // namespace strata::apps
