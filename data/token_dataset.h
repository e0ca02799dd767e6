// Pre-tokenized text: the .bin token files that nanoGPT (raw uint16) and llm.c (a
// 1024-byte header, then uint16 or uint32 tokens) write, memory-mapped and cut into
// windows of block_size+1 tokens for GPT training.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <strata/data/dataset.h>
#include <strata/data/mapped_file.h>

namespace strata::data {

/// A memory-mapped token file. Two layouts are recognised:
///  - llm.c: 256 little-endian int32 (magic, version, token count, zeros), then the
///    tokens: magic 20240520 with version 1 or 2 -> uint16 tokens (GPT-2),
///    magic 20240801 with version 7 -> uint32 tokens (LLaMA-3). The count must match the
///    file size exactly (a hostile count is refused; nothing is allocated from it).
///  - nanoGPT: no header, raw little-endian uint16 tokens (np.uint16 .tofile()); the
///    file size must be even.
/// Loading scans every token once for the largest id. Thread-safety: const methods may
/// run concurrently.
class TokenFile {
 public:
  static constexpr int32_t kLlmcMagic = 20240520;     // uint16 tokens
  static constexpr int32_t kLlmcMagicU32 = 20240801;  // uint32 tokens
  static constexpr int64_t kLlmcHeaderBytes = 256 * 4;

  /// Throws strata::DataError naming the file: missing, not a regular file, an llm.c
  /// header with an unknown version or a count that disagrees with the file size, an odd
  /// size for raw uint16, or fewer than 2 tokens.
  explicit TokenFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  int64_t size() const { return count_; }
  /// 2 (uint16) or 4 (uint32).
  int bytes_per_token() const { return width_; }
  /// True for an llm.c header, false for raw nanoGPT uint16.
  bool has_header() const { return header_; }
  /// Largest token id in the file.
  int64_t max_id() const { return max_id_; }
  /// Token i (0 <= i < size(), unchecked).
  int64_t at(int64_t i) const;
  /// Throws strata::DataError "[tokens] <file>: token id X at position P is outside the
  /// vocabulary of <vocab_size> (<what>)" when max_id() >= vocab_size.
  void check_vocab(int64_t vocab_size, const std::string& what) const;

 private:
  MappedFile file_;
  const uint8_t* tokens_ = nullptr;
  int64_t count_ = 0;
  int width_ = 2;
  bool header_ = false;
  int64_t max_id_ = 0;
};

/// Windows over tokens [begin, end) of a TokenFile. Sample i starts at token
/// s = begin + i*stride and covers block_size+1 tokens; size() = number of starts with
/// s + block_size + 1 <= end.
/// input: i64 (B,T) = tokens s..s+T-1; target: i64 (B,T) = tokens s+1..s+T (T = block_size).
class TokenDataset : public Dataset {
 public:
  /// Throws strata::DataError naming the file when the range holds fewer than
  /// block_size+1 tokens.
  TokenDataset(std::shared_ptr<const TokenFile> file, int64_t begin, int64_t end, int64_t block_size,
               int64_t stride);
  /// The whole file.
  TokenDataset(std::shared_ptr<const TokenFile> file, int64_t block_size, int64_t stride)
      : TokenDataset(file, 0, file->size(), block_size, stride) {}

  int64_t size() const override { return num_windows_; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  const TokenFile& file() const { return *file_; }

 private:
  std::shared_ptr<const TokenFile> file_;
  int64_t begin_, end_, block_size_, stride_, num_windows_;
};

}  // namespace strata::data
