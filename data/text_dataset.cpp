// Corpus reading, the train/val split, window batches and the n-gram baselines
// printed next to GPT's validation loss.
#include <strata/data/text_dataset.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <strata/core/error.h>
#include <strata/data/regular_file.h>

namespace strata::data {
namespace fs = std::filesystem;
namespace {

// Appends the bytes of regular file `p` to `out`. The corpus is held whole in memory, so
// a total beyond physical memory (a 1 TB sparse file, say) is refused before allocating.
void append_file(const fs::path& p, std::vector<uint8_t>& out) {
  const uint64_t n = regular_file_size(p.string(), "text");  // before open(): a FIFO would block
  const uint64_t total = uint64_t(out.size()) + n, mem = physical_memory_bytes();
  if (total > mem) {
    STRATA_THROW(DataError, "[text] ", p.string(), " is ", n, " bytes (", human_bytes(n), "); the corpus would hold ",
                 human_bytes(total), " in memory, more than this machine's ", human_bytes(mem),
                 ". Pass a smaller text file or directory");
  }
  std::ifstream in(p, std::ios::binary);
  if (!in) STRATA_THROW(DataError, "[text] cannot open ", p.string(), ": ", std::strerror(errno));
  const size_t old = out.size();
  try {
    out.resize(old + size_t(n));
  } catch (const std::bad_alloc&) {
    STRATA_THROW(DataError, "[text] ", p.string(), " is ", n, " bytes (", human_bytes(n),
                 "): out of memory while loading the corpus (", human_bytes(total), " in all)");
  }
  in.read(reinterpret_cast<char*>(out.data() + old), std::streamsize(n));
  if (size_t(in.gcount()) != size_t(n)) {
    STRATA_THROW(DataError, "[text] ", p.string(), ": read ", in.gcount(), " of ", n, " bytes");
  }
}

}  // namespace

std::vector<std::string> corpus_directory_files(const std::string& dir) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    // Symlinks (loops included) and special files are skipped without being followed or opened.
    std::error_code kind_ec;
    if (e.is_symlink(kind_ec) || !e.is_regular_file(kind_ec) || e.path().extension() == ".dat") continue;
    files.push_back(e.path());
  }
  if (ec) STRATA_THROW(DataError, "[text] cannot list ", dir, ": ", ec.message());
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
  std::vector<std::string> out;
  for (const fs::path& f : files) out.push_back(f.string());
  return out;
}

std::vector<uint8_t> read_text_corpus(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec) && ec && ec != std::errc::no_such_file_or_directory)  // a symlink loop, no permission
    STRATA_THROW(DataError, "[text] cannot stat corpus ", path, ": ", ec.message());
  if (!fs::exists(path, ec)) {
    if (fs::path(path).lexically_normal() == fs::path(kFortunesDir).lexically_normal()) {
      STRATA_THROW(DataError, "[text] corpus not found: ", path,
                   ". The default text corpus comes from the Debian package `fortunes` "
                   "(apt-get install fortunes); or pass a text file or directory");
    }
    STRATA_THROW(DataError, "[text] corpus not found: ", path,
                 " (pass a text file or a directory of text files; the default corpus is ", kFortunesDir,
                 " from the Debian package `fortunes`)");
  }
  std::vector<uint8_t> out;
  if (fs::is_directory(path, ec)) {
    for (const std::string& f : corpus_directory_files(path)) append_file(f, out);
  } else {
    append_file(path, out);
  }
  if (out.empty()) STRATA_THROW(DataError, "[text] corpus ", path, " holds no text (no bytes in non-.dat regular files)");
  return out;
}

TextSplits split_tokens(std::vector<uint8_t> tokens, double val_fraction) {
  STRATA_CHECK(val_fraction >= 0.0 && val_fraction < 1.0, "[text] val_fraction must be in [0, 1), got ",
               val_fraction);
  const size_t n = tokens.size();
  const size_t n_val = size_t(std::llround(double(n) * val_fraction));
  TextSplits s;
  s.val.assign(tokens.end() - std::ptrdiff_t(n_val), tokens.end());
  tokens.resize(n - n_val);
  s.train = std::move(tokens);
  return s;
}

TextSplits load_text_splits(const std::string& path, double val_fraction) {
  return split_tokens(read_text_corpus(path), val_fraction);
}

TextDataset::TextDataset(std::vector<uint8_t> tokens, int64_t block_size, int64_t stride)
    : tokens_(std::move(tokens)), block_size_(block_size), stride_(stride) {
  STRATA_CHECK(block_size > 0, "[text] block_size must be positive, got ", block_size);
  STRATA_CHECK(stride > 0, "[text] stride must be positive, got ", stride);
  const int64_t n = int64_t(tokens_.size());
  if (n < block_size + 1) {
    STRATA_THROW(DataError, "[text] token stream of ", n, " bytes is shorter than one window of block_size+1 = ",
                 block_size + 1, " bytes; use a smaller block_size or a larger split");
  }
  num_windows_ = (n - block_size - 1) / stride + 1;
}

Batch TextDataset::get_batch(const std::vector<int64_t>& indices) const {
  detail::check_indices("text", indices, num_windows_);
  const int64_t b = int64_t(indices.size()), t = block_size_;
  Batch out{Tensor::empty({b, t}, DType::i64), Tensor::empty({b, t}, DType::i64)};
  int64_t* x = out.input.data<int64_t>();   // (B,T)
  int64_t* y = out.target.data<int64_t>();  // (B,T)
  for (int64_t k = 0; k < b; ++k) {
    const uint8_t* src = tokens_.data() + indices[size_t(k)] * stride_;
    int64_t* xr = x + k * t;
    int64_t* yr = y + k * t;
    for (int64_t j = 0; j < t; ++j) xr[j] = src[j];
    for (int64_t j = 0; j < t; ++j) yr[j] = src[j + 1];
  }
  return out;
}

double unigram_entropy(std::span<const uint8_t> train, std::span<const uint8_t> eval) {
  STRATA_CHECK(!eval.empty(), "[unigram_entropy] eval stream is empty");
  std::vector<int64_t> count(256, 0);
  for (uint8_t c : train) ++count[c];
  const double denom = double(train.size()) + 256.0;
  std::vector<double> nll(256);
  for (int c = 0; c < 256; ++c) nll[size_t(c)] = -std::log((double(count[size_t(c)]) + 1.0) / denom);
  double sum = 0.0;
  for (uint8_t c : eval) sum += nll[c];
  return sum / double(eval.size());
}

double bigram_entropy(std::span<const uint8_t> train, std::span<const uint8_t> eval) {
  STRATA_CHECK(eval.size() >= 2, "[bigram_entropy] eval stream needs at least 2 tokens, got ", eval.size());
  std::vector<int64_t> count(256 * 256, 0), row(256, 0);  // count[a*256+b] of pair (a,b)
  for (size_t i = 0; i + 1 < train.size(); ++i) {
    ++count[size_t(train[i]) * 256 + train[i + 1]];
    ++row[train[i]];
  }
  double sum = 0.0;
  for (size_t i = 0; i + 1 < eval.size(); ++i) {
    const size_t a = eval[i], b = eval[i + 1];
    sum -= std::log((double(count[a * 256 + b]) + 1.0) / (double(row[a]) + 256.0));
  }
  return sum / double(eval.size() - 1);
}

}  // namespace strata::data
