// Token files: the committed llm.c-format and raw uint16 fixtures (written by
// tools/make_tokens.py and numpy) read back as the corpus bytes; windows are shifted
// pairs; hostile headers and out-of-vocabulary ids are refused naming the file.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>

#include <strata/data/token_dataset.h>
#include "test_util.h"

using namespace strata;
using namespace strata::data;
using namespace strata::data::testing;

namespace {

const std::string kFiles = std::string(STRATA_SOURCE_DIR) + "/tests/data_files/";

std::vector<uint8_t> corpus() { return read_bytes(kFiles + "tiny_corpus.txt"); }

/// An llm.c file: header (magic, version, count) then uint16 tokens.
std::vector<uint8_t> llmc(int32_t magic, int32_t version, int32_t count, const std::vector<uint16_t>& toks) {
  std::vector<uint8_t> out(1024, 0);
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 4, &version, 4);
  std::memcpy(out.data() + 8, &count, 4);
  const size_t off = out.size();
  out.resize(off + toks.size() * 2);
  std::memcpy(out.data() + off, toks.data(), toks.size() * 2);
  return out;
}

}  // namespace

TEST(Tokens, LlmcFixtureIsTheCorpusBytes) {
  const auto text = corpus();
  TokenFile train(kFiles + "tokens/train.bin"), val(kFiles + "tokens/val.bin");
  EXPECT_TRUE(train.has_header());
  EXPECT_EQ(train.bytes_per_token(), 2);
  ASSERT_EQ(size_t(train.size() + val.size()), text.size());
  for (int64_t i = 0; i < train.size(); ++i) ASSERT_EQ(train.at(i), text[size_t(i)]) << i;
  for (int64_t i = 0; i < val.size(); ++i) ASSERT_EQ(val.at(i), text[size_t(train.size() + i)]) << i;
  EXPECT_EQ(train.max_id(), *std::max_element(text.begin(), text.begin() + train.size()));
}

TEST(Tokens, RawUint16FixtureIsTheCorpusBytes) {
  const auto text = corpus();
  TokenFile raw(kFiles + "tokens_raw.bin");
  EXPECT_FALSE(raw.has_header());
  ASSERT_EQ(raw.size(), 600);
  for (int64_t i = 0; i < raw.size(); ++i) ASSERT_EQ(raw.at(i), text[size_t(i)]) << i;
}

TEST(Tokens, WindowsAreShiftedPairs) {
  auto f = std::make_shared<const TokenFile>(kFiles + "tokens_raw.bin");
  TokenDataset ds(f, 100, 600, 8, 5);  // windows over tokens [100, 600), stride 5
  EXPECT_EQ(ds.size(), (500 - 9) / 5 + 1);
  const Batch b = ds.get_batch({0, 3, ds.size() - 1});
  ASSERT_EQ(b.input.shape(), (Shape{3, 8}));
  const int64_t* x = b.input.data<int64_t>();
  const int64_t* y = b.target.data<int64_t>();
  const int64_t starts[] = {100, 115, 100 + (ds.size() - 1) * 5};
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(x[k * 8 + j], f->at(starts[k] + j));
      EXPECT_EQ(y[k * 8 + j], f->at(starts[k] + j + 1));
    }
  EXPECT_THROW(ds.get_batch({ds.size()}), Error);
  // A range shorter than one window names the file.
  const std::string msg = data_error([&] { TokenDataset(f, 590, 600, 16, 1); });
  EXPECT_NE(msg.find("tokens_raw.bin"), std::string::npos) << msg;
}

TEST(Tokens, VocabCheckNamesFileIdAndPosition) {
  TempDir dir;
  write_bytes(dir.file("t.bin"), llmc(TokenFile::kLlmcMagic, 1, 5, {1, 2, 300, 4, 700}));
  TokenFile f(dir.file("t.bin"));
  EXPECT_EQ(f.max_id(), 700);
  EXPECT_NO_THROW(f.check_vocab(701, "model.vocab_size"));
  const std::string msg = data_error([&] { f.check_vocab(256, "model.vocab_size"); });
  EXPECT_NE(msg.find(dir.file("t.bin")), std::string::npos) << msg;
  EXPECT_NE(msg.find("token id 300 at position 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("vocabulary of 256"), std::string::npos) << msg;
}

TEST(Tokens, Uint32LlamaHeader) {
  TempDir dir;
  std::vector<uint8_t> b(1024, 0);
  const int32_t h[3] = {TokenFile::kLlmcMagicU32, 7, 3};
  std::memcpy(b.data(), h, 12);
  const uint32_t toks[3] = {5, 128000, 7};
  b.resize(1024 + 12);
  std::memcpy(b.data() + 1024, toks, 12);
  write_bytes(dir.file("l.bin"), b);
  TokenFile f(dir.file("l.bin"));
  EXPECT_EQ(f.bytes_per_token(), 4);
  EXPECT_EQ(f.at(1), 128000);
  EXPECT_EQ(f.max_id(), 128000);
}

TEST(Tokens, HostileFilesNameTheFile) {
  TempDir dir;
  const std::vector<uint16_t> t = {1, 2, 3, 4};
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    const char* expect;
  };
  std::vector<uint8_t> short_header = llmc(TokenFile::kLlmcMagic, 1, 4, t);
  short_header.resize(100);
  const Case cases[] = {
      // A count far past the file (no allocation may follow from it).
      {"huge_count.bin", llmc(TokenFile::kLlmcMagic, 1, 2147483647, t), "promises 2147483647 tokens"},
      {"negative_count.bin", llmc(TokenFile::kLlmcMagic, 1, -5, t), "promises -5 tokens"},
      {"short_count.bin", llmc(TokenFile::kLlmcMagic, 1, 3, t), "truncated or the header is corrupt"},
      {"bad_version.bin", llmc(TokenFile::kLlmcMagic, 9, 4, t), "has version 9"},
      {"u32_bad_version.bin", llmc(TokenFile::kLlmcMagicU32, 1, 2, t), "has version 1"},
      {"short_header.bin", short_header, "fewer than the 1024-byte header"},
      {"odd.bin", {1, 0, 2, 0, 3}, "5 bytes is odd"},
      {"one_token.bin", {1, 0}, "holds 1 tokens"},
      {"empty.bin", {}, "holds 0 tokens"},
  };
  for (const auto& c : cases) {
    write_bytes(dir.file(c.name), c.bytes);
    const std::string msg = data_error([&] { TokenFile f(dir.file(c.name)); });
    EXPECT_NE(msg.find(dir.file(c.name)), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
  }
  EXPECT_NE(data_error([&] { TokenFile f(dir.file("missing.bin")); }).find("missing.bin"), std::string::npos);
  EXPECT_NE(data_error([&] { TokenFile f(dir.path().string()); }).find("a directory"), std::string::npos);
  // A FIFO is refused before open(), which would block until a writer appears.
  ASSERT_EQ(::mkfifo(dir.file("fifo.bin").c_str(), 0600), 0);
  EXPECT_NE(data_error([&] { TokenFile f(dir.file("fifo.bin")); }).find("is a FIFO"), std::string::npos);
}
