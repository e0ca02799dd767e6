// Window batches over in-memory ids, and the corpus encoding that fills them.
#include <strata/data/token_stream.h>

#include <strata/core/error.h>
#include <strata/data/text_chunks.h>
#include <strata/data/tokenize_files.h>

namespace strata::data {

TokenStreamDataset::TokenStreamDataset(std::shared_ptr<const std::vector<uint32_t>> tokens, int64_t begin,
                                       int64_t end, int64_t block_size, int64_t stride)
    : tokens_(std::move(tokens)), begin_(begin), end_(end), block_size_(block_size), stride_(stride) {
  STRATA_CHECK(block_size > 0, "[text] block_size must be positive, got ", block_size);
  STRATA_CHECK(stride > 0, "[text] stride must be positive, got ", stride);
  STRATA_CHECK(0 <= begin && begin <= end && end <= int64_t(tokens_->size()), "[text] range [", begin, ", ", end,
               ") is not inside the ", tokens_->size(), " tokens");
  if (end - begin < block_size + 1)
    STRATA_THROW(DataError, "[text] ", end - begin, " tokens", begin > 0 ? " (val tail)" : "",
                 " are fewer than one window of block_size+1 = ", block_size + 1,
                 " tokens; use a smaller block_size or more text");
  num_windows_ = (end - begin - block_size - 1) / stride + 1;
}

Batch TokenStreamDataset::get_batch(const std::vector<int64_t>& indices) const {
  detail::check_indices("text", indices, num_windows_);
  const int64_t b = int64_t(indices.size()), t = block_size_;
  Batch out{Tensor::empty({b, t}, DType::i64), Tensor::empty({b, t}, DType::i64)};
  int64_t* x = out.input.data<int64_t>();   // (B,T)
  int64_t* y = out.target.data<int64_t>();  // (B,T)
  const uint32_t* ids = tokens_->data();
  for (int64_t k = 0; k < b; ++k) {
    const uint32_t* src = ids + begin_ + indices[size_t(k)] * stride_;
    for (int64_t j = 0; j < t; ++j) x[k * t + j] = src[j];
    for (int64_t j = 0; j < t; ++j) y[k * t + j] = src[j + 1];
  }
  return out;
}

std::vector<uint32_t> tokenize_text_corpus(const std::string& path, const Tokenizer& tok, int threads) {
  std::vector<uint32_t> ids;
  tokenize_files(list_text_files({path}), tok, {.threads = threads},
                 [&](std::span<const uint32_t> part, uint64_t) { ids.insert(ids.end(), part.begin(), part.end()); });
  return ids;
}

}  // namespace strata::data
