// Byte-level text for GPT training: a corpus (one file, or the fortunes directory of
// the Debian package `fortunes`) split into train/val token streams, windows of
// block_size+1 bytes as samples, and the unigram/bigram entropies to compare against.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <strata/data/dataset.h>

namespace strata::data {

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

/// Bytes of a corpus. `path` is a file, or a directory whose regular files (not
/// symlinks, not ending in ".dat") are concatenated in name order. Throws
/// strata::DataError naming the file when the path is missing (naming the Debian package
/// `fortunes` for the default directory), cannot be stat'ed (a symlink loop), is not a
/// regular file or directory (a FIFO or device is refused before it is opened), is
/// unreadable, holds no bytes, or would not fit in physical memory (its size is named).
std::vector<uint8_t> read_text_corpus(const std::string& path = kFortunesDir);
/// The files read_text_corpus reads from the directory `dir`: its regular files but
/// "*.dat" (symlinks, loops included, and special files skipped without being followed or
/// opened), in name order. DataError naming `dir` when it cannot be listed.
std::vector<std::string> corpus_directory_files(const std::string& dir);

/// A token stream cut in two: train is the head, val the tail.
struct TextSplits {
  std::vector<uint8_t> train;
  std::vector<uint8_t> val;
};
/// val gets round(n * val_fraction) tokens (val_fraction in [0, 1)).
TextSplits split_tokens(std::vector<uint8_t> tokens, double val_fraction = 0.1);
/// read_text_corpus + split_tokens.
TextSplits load_text_splits(const std::string& path = kFortunesDir, double val_fraction = 0.1);

/// Windows over a byte stream. Sample i starts at byte s = i*stride and covers
/// block_size+1 bytes; size() = number of starts with s + block_size + 1 <= n.
/// input: i64 (B,T) = bytes s..s+T-1; target: i64 (B,T) = bytes s+1..s+T (T = block_size).
class TextDataset : public Dataset {
 public:
  static constexpr int64_t kVocabSize = 256;

  /// Throws strata::DataError when the stream is shorter than block_size+1 bytes.
  TextDataset(std::vector<uint8_t> tokens, int64_t block_size, int64_t stride = 1);

  int64_t size() const override { return num_windows_; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  int64_t block_size() const { return block_size_; }
  int64_t stride() const { return stride_; }
  int64_t vocab_size() const { return kVocabSize; }
  const std::vector<uint8_t>& tokens() const { return tokens_; }

 private:
  std::vector<uint8_t> tokens_;
  int64_t block_size_;
  int64_t stride_;
  int64_t num_windows_;
};

/// Cross-entropy in nats/token of `eval` under the unigram byte model estimated on
/// `train` with add-one smoothing: p(b) = (count(b)+1) / (n_train+256).
double unigram_entropy(std::span<const uint8_t> train, std::span<const uint8_t> eval);
/// Cross-entropy in nats/token of the next byte of `eval` under the bigram model of
/// `train` with add-one smoothing: p(b|a) = (count(a,b)+1) / (count(a,*)+256), averaged
/// over the eval.size()-1 consecutive pairs of eval. Finite for any input.
double bigram_entropy(std::span<const uint8_t> train, std::span<const uint8_t> eval);

}  // namespace strata::data
