// Added tokens (special tokens such as <|endoftext|> among them) are cut out of the text
// before pre-tokenization, as `tokenizers`' AddedVocabulary does: the leftmost-longest
// occurrence wins, then the token's flags (single_word, lstrip, rstrip) decide whether it
// counts and how much whitespace around it it swallows.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::data {

/// One entry of tokenizer.json's added_tokens.
struct AddedToken {
  uint32_t id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

/// A segment of text after added-token extraction: bytes [begin, end) of the text, and
/// the added token it is (-1: ordinary text, to be pre-tokenized).
struct Segment {
  size_t begin, end;
  int64_t token;  // index into the AddedTokenMatcher's tokens, or -1
};

/// Finds one set of added tokens (the non-normalized or the normalized ones) in text.
/// Immutable after construction; find() may run concurrently.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  /// `tokens` with non-empty contents; `which[k]` is the index reported for tokens[k].
  AddedTokenMatcher(const std::vector<AddedToken>& tokens, std::vector<size_t> which);

  bool empty() const { return which_.empty(); }
  /// Splits text [begin, end) into segments covering it, appended to `out`.
  void find(std::string_view text, size_t begin, size_t end, std::vector<Segment>& out) const;

 private:
  std::vector<AddedToken> tokens_;
  std::vector<size_t> which_;
  // Token indices by first byte, longest content first (a leftmost-longest search).
  std::array<std::vector<uint32_t>, 256> by_first_{};
};

}  // namespace strata::data
