// Text files read in bounded chunks for tokenizing and tokenizer training: a corpus far
// larger than memory is streamed, and each chunk ends where a GPT-2 or Llama 3
// pre-token ends, so encoding chunk by chunk gives the ids of encoding the whole file.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace strata::data {

/// The files of `paths`: a file as it is, a directory as its regular files (not
/// symlinks, not ending in ".dat", as the text dataset reads the fortunes directory) in
/// name order. Throws strata::DataError naming a path that is missing, not a regular file
/// or directory, or a directory without files.
std::vector<std::string> list_text_files(const std::vector<std::string>& paths);

/// Byte offset in `text` (0 when none) of the last place in [from, text.size()) where a
/// chunk may end: after a '\n' followed by an ASCII letter, or between an ASCII letter and
/// " " followed by an ASCII letter. Both patterns' pre-tokens never span such a place.
size_t last_chunk_cut(const std::string& text, size_t from);

/// Reads one file in chunks of at least `target` bytes (the last may be shorter) cut at
/// last_chunk_cut places; where none occurs within `max_bytes`, the chunk is cut at a
/// UTF-8 character boundary near `max_bytes` (its ids may then differ from a whole-file
/// encoding at that one place). Holds at most max_bytes + one read block in memory.
class TextChunker {
 public:
  TextChunker(const std::string& path, size_t target = size_t(1) << 20, size_t max_bytes = size_t(64) << 20);
  /// The next chunk into `chunk`; false at the end of the file. `continues` is false for
  /// the file's first chunk.
  bool next(std::string& chunk, bool& continues);
  uint64_t bytes_read() const { return read_; }

 private:
  std::string path_;
  std::ifstream in_;
  std::string buf_;
  size_t target_, max_;
  bool eof_ = false, first_ = true;
  uint64_t read_ = 0;
};

}  // namespace strata::data
