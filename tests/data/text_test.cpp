// Byte-level text: corpus reading rules, the split, window batches, and the n-gram
// entropies against hand-computed values and on the real fortunes corpus.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include <strata/data/text_dataset.h>
#include "test_util.h"

using namespace strata;
using namespace strata::data;
using namespace strata::data::testing;

namespace {
std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
}  // namespace

TEST(TextCorpus, DirectoryRulesSortedNoDatNoSymlinks) {
  TempDir dir;
  write_bytes(dir.file("b"), bytes_of("BBB"));
  write_bytes(dir.file("a"), bytes_of("AA"));
  write_bytes(dir.file("a.dat"), bytes_of("index"));
  std::filesystem::create_symlink(dir.file("a"), dir.file("a.u8"));
  std::filesystem::create_directory(dir.file("sub"));
  write_bytes(dir.file("sub/zz"), bytes_of("nested"));
  EXPECT_EQ(read_text_corpus(dir.path().string()), bytes_of("AABBB"));
  EXPECT_EQ(read_text_corpus(dir.file("b")), bytes_of("BBB"));
}

TEST(TextCorpus, MissingOrEmptyIsDataError) {
  TempDir dir;
  const std::string missing = dir.file("no-such-corpus");
  try {
    read_text_corpus(missing);
    FAIL() << "no error";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(missing), std::string::npos) << msg;
    EXPECT_NE(msg.find("`fortunes`"), std::string::npos) << msg;
  }
  write_bytes(dir.file("x.dat"), bytes_of("only an index"));
  EXPECT_THROW(read_text_corpus(dir.path().string()), DataError);
}

TEST(TextCorpus, SplitTakesTheTail) {
  TextSplits s = split_tokens(bytes_of("0123456789abcdefghij"), 0.25);
  EXPECT_EQ(s.train, bytes_of("0123456789abcde"));
  EXPECT_EQ(s.val, bytes_of("fghij"));
  EXPECT_THROW(split_tokens(bytes_of("abc"), 1.0), Error);
}

TEST(TextDataset, WindowsAndShiftedTargets) {
  const std::string text = "hello, strata world";  // 19 bytes
  TextDataset ds(bytes_of(text), 4);
  EXPECT_EQ(ds.size(), 19 - 4);  // starts 0..14
  Batch b = ds.get_batch({0, 14, 3});
  EXPECT_EQ(b.input.shape(), (Shape{3, 4}));
  EXPECT_EQ(b.input.dtype(), DType::i64);
  EXPECT_EQ(b.target.dtype(), DType::i64);
  auto x = b.input.to_vector<int64_t>(), y = b.target.to_vector<int64_t>();
  const int64_t starts[3] = {0, 14, 3};
  for (int k = 0; k < 3; ++k)
    for (int t = 0; t < 4; ++t) {
      EXPECT_EQ(x[size_t(k * 4 + t)], int64_t(uint8_t(text[size_t(starts[k] + t)])));
      EXPECT_EQ(y[size_t(k * 4 + t)], int64_t(uint8_t(text[size_t(starts[k] + t + 1)])));
    }
  EXPECT_THROW(ds.get_batch({15}), Error);

  TextDataset strided(bytes_of(text), 4, 3);
  EXPECT_EQ(strided.size(), 5);  // starts 0,3,6,9,12 (12+5 <= 19; 15+5 > 19)
  Batch s = strided.get_batch({4});
  EXPECT_EQ(s.input.to_vector<int64_t>()[0], int64_t(uint8_t(text[12])));
  EXPECT_EQ(s.target.to_vector<int64_t>()[3], int64_t(uint8_t(text[16])));
  EXPECT_THROW(TextDataset(bytes_of("abcd"), 4), DataError);
  EXPECT_EQ(TextDataset(bytes_of("abcde"), 4).size(), 1);
}

TEST(TextEntropy, HandComputedTinyStrings) {
  // train "abab": pairs ab, ba, ab -> count(a,b)=2, count(a,*)=2, count(b,a)=1, count(b,*)=1.
  // eval "aba": pairs ab, ba.
  const auto train = bytes_of("abab"), eval = bytes_of("aba");
  const double want_bigram = -(std::log(3.0 / 258.0) + std::log(2.0 / 257.0)) / 2.0;
  EXPECT_NEAR(bigram_entropy(train, eval), want_bigram, 1e-12);
  // Unigram: count(a)=2, count(b)=2, n=4 -> p(a)=3/260, p(b)=3/260.
  EXPECT_NEAR(unigram_entropy(train, eval), -std::log(3.0 / 260.0), 1e-12);
  // An unseen byte gets the smoothed floor 1/(count(a,*)+256), not infinity.
  EXPECT_NEAR(bigram_entropy(train, bytes_of("az")), -std::log(1.0 / 258.0), 1e-12);
  // No training data: uniform over 256 bytes.
  EXPECT_NEAR(bigram_entropy({}, bytes_of("xyz")), std::log(256.0), 1e-12);
  EXPECT_NEAR(unigram_entropy({}, bytes_of("xyz")), std::log(256.0), 1e-12);
}

TEST(TextDataset, RealFortunesCorpus) {
  if (!std::filesystem::exists(kFortunesDir)) GTEST_SKIP() << "fortunes not installed (apt-get install fortunes)";
  // Expected size from the directory listing: regular, non-symlink, non-.dat files.
  uintmax_t want = 0;
  for (const auto& e : std::filesystem::directory_iterator(kFortunesDir))
    if (!e.is_symlink() && e.is_regular_file() && e.path().extension() != ".dat") want += e.file_size();
  const std::vector<uint8_t> all = read_text_corpus();
  ASSERT_EQ(all.size(), want);
  ASSERT_GT(all.size(), 100000u);

  TextSplits s = load_text_splits(kFortunesDir, 0.1);
  EXPECT_EQ(s.train.size() + s.val.size(), all.size());
  EXPECT_EQ(s.val.size(), size_t(std::llround(0.1 * double(all.size()))));
  EXPECT_TRUE(std::equal(s.val.begin(), s.val.end(), all.end() - std::ptrdiff_t(s.val.size())));

  TextDataset train(s.train, 64), val(s.val, 64);
  EXPECT_EQ(train.size(), int64_t(s.train.size()) - 64);
  EXPECT_EQ(train.vocab_size(), 256);
  Batch b = val.get_batch({0, val.size() - 1});
  auto x = b.input.to_vector<int64_t>(), y = b.target.to_vector<int64_t>();
  for (size_t i = 0; i + 1 < 64; ++i) EXPECT_EQ(y[i], x[i + 1]);
  EXPECT_EQ(y[127], int64_t(s.val.back()));

  const double h2 = bigram_entropy(s.train, s.val), h1 = unigram_entropy(s.train, s.val);
  EXPECT_LT(h2, h1);
  EXPECT_LT(h1, std::log(256.0));
  EXPECT_GT(h2, 1.0);  // English text is not that predictable from one byte
}
