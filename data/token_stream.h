// Token ids held in memory (a text corpus encoded with data.tokenizer), cut into windows
// of block_size+1 tokens for GPT training, as TokenDataset cuts a token file.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <strata/data/dataset.h>
#include <strata/data/tokenizer.h>

namespace strata::data {

/// Windows over ids [begin, end) of `tokens`. Sample i starts at s = begin + i*stride;
/// input: i64 (B,T) = ids s..s+T-1; target: i64 (B,T) = ids s+1..s+T (T = block_size).
class TokenStreamDataset : public Dataset {
 public:
  /// Throws strata::DataError when the range holds fewer than block_size+1 ids.
  TokenStreamDataset(std::shared_ptr<const std::vector<uint32_t>> tokens, int64_t begin, int64_t end,
                     int64_t block_size, int64_t stride);
  int64_t size() const override { return num_windows_; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;

 private:
  std::shared_ptr<const std::vector<uint32_t>> tokens_;
  int64_t begin_, end_, block_size_, stride_, num_windows_;
};

/// The ids of the text corpus at `path` (a file, or a directory's files as
/// read_text_corpus takes them), each file encoded whole, on `threads` threads.
std::vector<uint32_t> tokenize_text_corpus(const std::string& path, const Tokenizer& tok, int threads);

}  // namespace strata::data
