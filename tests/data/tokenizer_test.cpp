// The tokenizer's own rules, without Python: UTF-8 replacement as Python does it, the
// \s rewrite for PCRE2, BPE merge order on a hand-made vocabulary, added-token flags,
// chunk cut places, the trainer's determinism, and one clear error per malformed
// tokenizer.json field (tests/data/tokenizer_compare.py checks against `tokenizers`).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <strata/core/error.h>
#include <strata/data/bpe_trainer.h>
#include <strata/data/byte_level.h>
#include <strata/data/text_chunks.h>
#include <strata/data/tokenizer_json.h>
#include <strata/data/utf8.h>
#include "test_util.h"

using namespace strata;
using namespace strata::data;
using namespace strata::data::testing;
using json = nlohmann::json;

namespace {

const std::string kFffd = "\xEF\xBF\xBD";

// A GPT-2-style tokenizer.json: the 256 bytes, then merges "Ġ t" -> "Ġt", "h e" -> "he",
// "Ġt he" -> "Ġthe", "e e" -> "ee", and <|endoftext|> as a special added token.
json small_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::byte_to_text(uint8_t(b))] = b;
  vocab["Ġt"] = 256;
  vocab["he"] = 257;
  vocab["Ġthe"] = 258;
  vocab["ee"] = 259;
  json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens",
             json::array({{{"id", 260}, {"content", "<|endoftext|>"}, {"single_word", false}, {"lstrip", false},
                           {"rstrip", false}, {"normalized", false}, {"special", true}}})},
            {"normalizer", nullptr},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
            {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
            {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"vocab", vocab},
              {"merges", json::array({"Ġ t", "h e", "Ġt he", json::array({"e", "e"})})}}}};
  return j;
}

std::string load_error(const json& j, const std::string& name = "tok.json") {
  TempDir dir;
  const std::string path = dir.file(name);
  const std::string text = j.dump();
  write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
  return data_error([&] { load_tokenizer(path); });
}

std::vector<uint32_t> bytes_ids(const std::string& s) {
  std::vector<uint32_t> ids;
  for (unsigned char c : s) ids.push_back(c);
  return ids;
}

}  // namespace

TEST(Utf8, ReplacesMaximalSubpartsAsPython) {
  // Expected strings are Python's bytes.decode("utf-8", errors="replace").
  EXPECT_EQ(utf8::replace_invalid("abc"), "abc");
  EXPECT_EQ(utf8::replace_invalid("a\xff"
                                  "b"),
            "a" + kFffd + "b");
  EXPECT_EQ(utf8::replace_invalid("\xe2\x82"), kFffd);                           // truncated 3-byte: one
  EXPECT_EQ(utf8::replace_invalid("\xf0\x9f\x98"
                                  "x"),
            kFffd + "x");                                                          // truncated 4-byte: one
  EXPECT_EQ(utf8::replace_invalid("\xed\xa0\x80"), kFffd + kFffd + kFffd);       // a surrogate: three
  EXPECT_EQ(utf8::replace_invalid("\xc0\xaf"), kFffd + kFffd);                   // overlong: two
  EXPECT_EQ(utf8::replace_invalid("\xf4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(utf8::replace_invalid("\xc3\xa9\x80"), "\xc3\xa9" + kFffd);
  EXPECT_TRUE(utf8::is_valid("\xf0\x9f\x98\x80"));
  EXPECT_FALSE(utf8::is_valid("\xf0\x9f\x98"));
}

TEST(UnicodeRegex, WhitespaceClassesIncludeNel) {
  EXPECT_EQ(translate_pattern(R"(\s+(?!\S)|[^\s\p{L}])"), R"([\s\x{85}]+(?![^\s\x{85}])|[^\s\x{85}\p{L}])");
  EXPECT_EQ(translate_pattern(R"([\]\s]\\s)"), R"([\]\s\x{85}]\\s)");
  const UnicodeRegex re(R"(\s+)", "test");
  std::vector<UnicodeRegex::Match> m;
  re.find_all("a\xc2\x85\xe3\x80\x80"
              "b",
              m);  // NEL, ideographic space
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].begin, 1u);
  EXPECT_EQ(m[0].end, 6u);
}

TEST(UnicodeRegex, BadPatternNamesThePattern) {
  const std::string msg = data_error([] { UnicodeRegex("(?<", "field x"); });
  EXPECT_NE(msg.find("field x: bad regex '(?<'"), std::string::npos) << msg;
}

TEST(Tokenizer, MergesByRankAndDecodes) {
  const auto tok = parse_tokenizer_json(small_tokenizer().dump(), "small");
  // " the": Ġ t -> Ġt (rank 0) before h e -> he (rank 1), then Ġt he -> Ġthe (rank 2).
  EXPECT_EQ(tok->encode(" the"), (std::vector<uint32_t>{258}));
  // "eee": the leftmost of equal-rank pairs merges first.
  EXPECT_EQ(tok->encode("eee"), (std::vector<uint32_t>{259, 'e'}));
  // Special token cut out first; the pre-token before it still splits off its space.
  EXPECT_EQ(tok->encode("a<|endoftext|> the"), (std::vector<uint32_t>{'a', 260, 258}));
  EXPECT_EQ(tok->decode({{'a', 260, 258}}), "a the");
  EXPECT_EQ(tok->decode({{'a', 260, 258}}, false), "a<|endoftext|> the");
  EXPECT_EQ(tok->decode({{0xE2, 0x82}}), kFffd);  // bytes that are not UTF-8
  EXPECT_EQ(tok->decode({{999, 'x'}}), "x");     // unknown ids are skipped
  EXPECT_EQ(tok->encode("\xff"), bytes_ids(kFffd));
  EXPECT_EQ(tok->encode(""), std::vector<uint32_t>{});
  EXPECT_EQ(tok->vocab_size(), 261);
}

TEST(Tokenizer, AddPrefixSpaceAndContinuation) {
  json j = small_tokenizer();
  j["pre_tokenizer"]["add_prefix_space"] = true;
  const auto tok = parse_tokenizer_json(j.dump(), "prefix");
  EXPECT_EQ(tok->encode("the"), (std::vector<uint32_t>{258}));
  std::vector<uint32_t> ids;
  tok->encode("the", false, ids, /*continues=*/true);
  EXPECT_EQ(ids, (std::vector<uint32_t>{'t', 257}));
}

TEST(Tokenizer, AddedTokenFlags) {
  json j = small_tokenizer();
  j["added_tokens"].push_back({{"id", 261}, {"content", "xy"}, {"single_word", true}, {"lstrip", true},
                               {"rstrip", true}, {"normalized", true}, {"special", false}});
  const auto tok = parse_tokenizer_json(j.dump(), "flags");
  // single_word: inside a word it is ordinary text; alone it swallows the spaces around it.
  EXPECT_EQ(tok->encode("axy"), (std::vector<uint32_t>{'a', 'x', 'y'}));
  EXPECT_EQ(tok->encode("a  xy  b"), (std::vector<uint32_t>{'a', 261, 'b'}));
  EXPECT_EQ(tok->decode({{261}}), "xy");  // not special: kept by decode
}

TEST(Tokenizer, TemplateAddsBos) {
  json j = small_tokenizer();
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
                                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                         {"pair", json::array()},
                         {"special_tokens", {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {260}}, {"tokens", {"<|endoftext|>"}}}}}}};
  const auto tok = parse_tokenizer_json(j.dump(), "template");
  EXPECT_EQ(tok->encode("a", true), (std::vector<uint32_t>{260, 'a'}));
  EXPECT_EQ(tok->encode("a", false), (std::vector<uint32_t>{'a'}));
}

TEST(TokenizerJson, MalformedFilesNameTheFileAndField) {
  auto expect = [](const json& j, const std::string& needle) {
    const std::string msg = load_error(j);
    EXPECT_NE(msg.find("tok.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << msg;
  };
  json j = small_tokenizer();
  j.erase("model");
  expect(j, "model: missing");
  j = small_tokenizer();
  j["model"]["type"] = "WordPiece";
  expect(j, "model.type: 'WordPiece' is not supported");
  j = small_tokenizer();
  j["model"]["merges"].push_back("Ġt zz");
  expect(j, "model.merges[4]: token 'zz' is not in model.vocab");
  j = small_tokenizer();
  j["model"]["merges"].push_back("a b");
  expect(j, "model.merges[4]: the merged token 'ab' is not in model.vocab");
  j = small_tokenizer();
  j["model"]["vocab"]["ee"] = 258;
  expect(j, "model.vocab: duplicate id 258");
  j = small_tokenizer();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", "(?<"}}}, {"behavior", "Isolated"}},
                                                       {{"type", "ByteLevel"}, {"use_regex", false}}})}};
  expect(j, "pre_tokenizer.pretokenizers[0].pattern.Regex: bad regex '(?<'");
  j = small_tokenizer();
  j["normalizer"] = {{"type", "NFC"}};
  expect(j, "normalizer: '\"NFC\"' is not supported");
  j = small_tokenizer();
  j["added_tokens"][0]["id"] = 300;
  expect(j, "added_tokens[0].id: '<|endoftext|>' has id 300 but `tokenizers` gives it 260");
  j = small_tokenizer();
  j["decoder"] = nullptr;
  expect(j, "decoder: expected the ByteLevel decoder");
  j = small_tokenizer();
  j["pre_tokenizer"]["type"] = "Whitespace";
  expect(j, "pre_tokenizer.type: 'Whitespace' is not supported");
  j = small_tokenizer();
  j["model"]["merges"][0] = 7;
  expect(j, "model.merges[0]: expected \"left right\" or [\"left\", \"right\"]");

  TempDir dir;
  const std::string bad = dir.file("bad.json");
  write_bytes(bad, {'{', '"', 'm'});
  const std::string msg = data_error([&] { load_tokenizer(bad); });
  EXPECT_NE(msg.find(bad), std::string::npos) << msg;
  const std::string missing = data_error([&] { load_tokenizer(dir.file("none.json")); });
  EXPECT_NE(missing.find("none.json"), std::string::npos) << missing;
}

TEST(TokenizerJson, WrittenFileReadsBackTheSame) {
  const auto tok = parse_tokenizer_json(small_tokenizer().dump(), "small");
  const auto again = parse_tokenizer_json(tokenizer_json_text(tok->spec()), "again");
  for (const std::string s : {" the eee<|endoftext|>x", "hello  world\n\n", "\xc3\xa9t\xc3\xa9"})
    EXPECT_EQ(tok->encode(s), again->encode(s)) << s;
}

TEST(TextChunks, CutsOnlyWherePreTokensEnd) {
  EXPECT_EQ(last_chunk_cut("ab\ncd", 0), 3u);
  EXPECT_EQ(last_chunk_cut("ab cd", 0), 2u);
  EXPECT_EQ(last_chunk_cut("a  cd", 0), 0u);  // a space run may join the next pre-token
  EXPECT_EQ(last_chunk_cut("ab\n1d", 0), 0u);
}

TEST(BpeTrainer, DeterministicAndRoundTrips) {
  BpeTrainerOptions o{.vocab_size = 300, .special_tokens = {"<s>"}, .min_frequency = 1};
  auto train_once = [&] {
    PreTokenCounter c(o);
    c.add("the cat sat on the mat; the cat ate the rat. ", false);
    c.add("then the theme thereof<s>there", true);
    return tokenizer_json_text(train_bpe(c, o));
  };
  const std::string a = train_once();
  EXPECT_EQ(a, train_once());
  const auto tok = parse_tokenizer_json(a, "trained");
  EXPECT_GT(tok->model().merges().size(), 10u);
  EXPECT_EQ(tok->token_to_id("<s>"), std::optional<uint32_t>(0));
  for (const std::string s : {"the cat", "<s>a theme\xff", "\xe6\x97\xa5\xe6\x9c\xac"})
    EXPECT_EQ(tok->decode(tok->encode(s), false), utf8::replace_invalid(s)) << s;
  EXPECT_LT(tok->encode(" the cat").size(), 4u);
  const std::string small = [&] {
    try {
      BpeTrainerOptions tiny{.vocab_size = 200};
      PreTokenCounter c(tiny);
      train_bpe(c, tiny);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_NE(small.find("--vocab-size: 200 is below"), std::string::npos) << small;
}

TEST(Tokenizer, ConcurrentEncodesAndCacheRefillsAgree) {
  const auto tok = parse_tokenizer_json(small_tokenizer().dump(), "small");
  // 200k distinct pre-tokens: more than the per-thread cache holds before it is emptied.
  std::string text;
  std::vector<std::string> words;
  for (int i = 0; i < 200000; ++i) {
    std::string w = " t";
    for (int v = i; v > 0; v /= 26) w += char('a' + v % 26);
    w += "ee";
    words.push_back(w);
    text += w;
  }
  std::vector<uint32_t> piecewise;
  for (const std::string& w : words) tok->encode(w, false, piecewise);
  const std::vector<uint32_t> whole = tok->encode(text, false);
  EXPECT_EQ(whole, piecewise);
  std::vector<std::vector<uint32_t>> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) threads.emplace_back([&, t] { got[t] = tok->encode(text, false); });
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, whole);
}
