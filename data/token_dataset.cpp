// Token file layout detection (llm.c header or raw uint16), the one-pass maximum id, and
// window batches read straight from the mapping.
#include <strata/data/token_dataset.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include <strata/core/error.h>

namespace strata::data {
namespace {

static_assert(std::endian::native == std::endian::little, "token files are little-endian; add a byte swap");

int32_t le32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

template <class T>
int64_t max_of(const uint8_t* p, int64_t n) {
  T m = 0;
  const T* t = reinterpret_cast<const T*>(p);  // mmap'ed at a page boundary + 0 or 1024: aligned
  for (int64_t i = 0; i < n; ++i) m = std::max(m, t[i]);
  return int64_t(m);
}

}  // namespace

TokenFile::TokenFile(const std::string& path) : file_(path, "tokens") {
  const auto bytes = file_.bytes();
  const int64_t n = int64_t(bytes.size());
  const int32_t magic = n >= 4 ? le32(bytes.data()) : 0;
  if (magic == kLlmcMagic || magic == kLlmcMagicU32) {
    if (n < kLlmcHeaderBytes)
      STRATA_THROW(DataError, "[tokens] ", path, ": starts with the llm.c magic ", magic, " but holds ", n,
                   " bytes, fewer than the 1024-byte header");
    const int32_t version = le32(bytes.data() + 4), count = le32(bytes.data() + 8);
    const bool ok = magic == kLlmcMagic ? (version == 1 || version == 2) : version == 7;
    if (!ok)
      STRATA_THROW(DataError, "[tokens] ", path, ": llm.c header with magic ", magic, " has version ", version,
                   ", expected ", magic == kLlmcMagic ? "1 or 2 (uint16 tokens)" : "7 (uint32 tokens)");
    width_ = magic == kLlmcMagic ? 2 : 4;
    const int64_t payload = n - kLlmcHeaderBytes;
    if (count < 0 || int64_t(count) * width_ != payload)
      STRATA_THROW(DataError, "[tokens] ", path, ": the llm.c header promises ", count, " tokens (",
                   int64_t(count) * width_, " bytes) but the file holds ", payload,
                   " bytes after its header; the file is truncated or the header is corrupt");
    header_ = true;
    count_ = count;
    tokens_ = bytes.data() + kLlmcHeaderBytes;
  } else {
    if (n % 2 != 0)
      STRATA_THROW(DataError, "[tokens] ", path, ": ", n,
                   " bytes is odd; a raw token file holds little-endian uint16 tokens (2 bytes each) and an "
                   "llm.c file starts with the magic ", kLlmcMagic, " (this one starts with ", magic, ")");
    count_ = n / 2;
    tokens_ = bytes.data();
  }
  if (count_ < 2) STRATA_THROW(DataError, "[tokens] ", path, ": holds ", count_, " tokens; training needs at least 2");
  max_id_ = width_ == 2 ? max_of<uint16_t>(tokens_, count_) : max_of<uint32_t>(tokens_, count_);
}

int64_t TokenFile::at(int64_t i) const {
  if (width_ == 2) return reinterpret_cast<const uint16_t*>(tokens_)[i];
  return reinterpret_cast<const uint32_t*>(tokens_)[i];
}

void TokenFile::check_vocab(int64_t vocab_size, const std::string& what) const {
  if (max_id_ < vocab_size) return;
  int64_t pos = 0;
  while (at(pos) < vocab_size) ++pos;
  STRATA_THROW(DataError, "[tokens] ", path(), ": token id ", at(pos), " at position ", pos,
               " is outside the vocabulary of ", vocab_size, " (", what, "; the file's largest id is ", max_id_, ")");
}

TokenDataset::TokenDataset(std::shared_ptr<const TokenFile> file, int64_t begin, int64_t end, int64_t block_size,
                           int64_t stride)
    : file_(std::move(file)), begin_(begin), end_(end), block_size_(block_size), stride_(stride) {
  STRATA_CHECK(block_size > 0, "[tokens] block_size must be positive, got ", block_size);
  STRATA_CHECK(stride > 0, "[tokens] stride must be positive, got ", stride);
  STRATA_CHECK(0 <= begin && begin <= end && end <= file_->size(), "[tokens] range [", begin, ", ", end,
               ") is not inside the file's ", file_->size(), " tokens");
  if (end - begin < block_size + 1)
    STRATA_THROW(DataError, "[tokens] ", file_->path(), ": ", end - begin, " tokens", begin > 0 ? " (val tail)" : "",
                 " are fewer than one window of block_size+1 = ", block_size + 1,
                 " tokens; use a smaller block_size or more data");
  num_windows_ = (end - begin - block_size - 1) / stride + 1;
}

Batch TokenDataset::get_batch(const std::vector<int64_t>& indices) const {
  detail::check_indices("tokens", indices, num_windows_);
  const int64_t b = int64_t(indices.size()), t = block_size_;
  Batch out{Tensor::empty({b, t}, DType::i64), Tensor::empty({b, t}, DType::i64)};
  int64_t* x = out.input.data<int64_t>();   // (B,T)
  int64_t* y = out.target.data<int64_t>();  // (B,T)
  for (int64_t k = 0; k < b; ++k) {
    const int64_t s = begin_ + indices[size_t(k)] * stride_;
    int64_t* xr = x + k * t;
    int64_t* yr = y + k * t;
    for (int64_t j = 0; j < t; ++j) xr[j] = file_->at(s + j);
    for (int64_t j = 0; j + 1 < t; ++j) yr[j] = xr[j + 1];
    yr[t - 1] = file_->at(s + t);
  }
  return out;
}

}  // namespace strata::data
