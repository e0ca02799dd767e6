// Directory listing and newline/space-aligned chunking of text files.
#include <strata/data/text_chunks.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <strata/core/error.h>
#include <strata/data/regular_file.h>
#include <strata/data/text_dataset.h>

namespace strata::data {
namespace fs = std::filesystem;
namespace {

bool ascii_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

}  // namespace

std::vector<std::string> list_text_files(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      const std::vector<std::string> files = corpus_directory_files(path);
      if (files.empty()) STRATA_THROW(DataError, "[text] ", path, ": the directory holds no text files");
      out.insert(out.end(), files.begin(), files.end());
    } else {
      regular_file_size(path, "text");  // missing, a FIFO, a device: refused before opening
      out.push_back(path);
    }
  }
  return out;
}

size_t last_chunk_cut(const std::string& t, size_t from) {
  for (size_t i = t.size() - 1; i > from && i >= 2; --i) {
    if (!ascii_letter(t[i])) continue;
    if (t[i - 1] == '\n') return i;
    if (t[i - 1] == ' ' && ascii_letter(t[i - 2])) return i - 1;
  }
  return 0;
}

TextChunker::TextChunker(const std::string& path, size_t target, size_t max_bytes)
    : path_(path), target_(target), max_(std::max(max_bytes, target)) {
  regular_file_size(path, "text");
  in_.open(path, std::ios::binary);
  if (!in_) STRATA_THROW(DataError, "[text] cannot open ", path, ": ", std::strerror(errno));
}

bool TextChunker::next(std::string& chunk, bool& continues) {
  constexpr size_t kBlock = size_t(1) << 20;
  size_t cut = 0;
  size_t searched = 0;  // cut places before this offset were looked for already
  while (true) {
    if (buf_.size() >= target_) {
      cut = last_chunk_cut(buf_, std::max(searched, target_ - 1));
      if (cut) break;
      searched = buf_.size() - 1;
      if (buf_.size() >= max_) {
        cut = max_;
        while (cut > 0 && (uint8_t(buf_[cut]) & 0xC0) == 0x80) --cut;  // a character boundary
        if (cut == 0) cut = max_;
        break;
      }
    }
    if (eof_) {
      cut = buf_.size();
      break;
    }
    const size_t old = buf_.size();
    buf_.resize(old + kBlock);
    in_.read(buf_.data() + old, std::streamsize(kBlock));
    const size_t got = size_t(in_.gcount());
    buf_.resize(old + got);
    read_ += got;
    if (got < kBlock) {
      if (in_.bad()) STRATA_THROW(DataError, "[text] cannot read ", path_, ": ", std::strerror(errno));
      eof_ = true;
    }
  }
  if (cut == 0) return false;
  chunk.assign(buf_, 0, cut);
  buf_.erase(0, cut);
  continues = !first_;
  first_ = false;
  return true;
}

}  // namespace strata::data
