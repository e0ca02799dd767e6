// The pre-tokenizers of tokenizer.json that byte-level BPE tokenizers use: Split (a
// regex or literal pattern with one of the five split behaviours) and ByteLevel (the
// GPT-2 regex, optionally, and the prefix space), applied in sequence as `tokenizers`
// applies a Sequence: each step splits every piece the previous step produced.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <strata/data/unicode_regex.h>

namespace strata::data {

/// GPT-2's pre-tokenization regex (the ByteLevel pre-tokenizer's, with use_regex).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
/// Llama 3's Split pattern.
inline constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

/// SplitDelimiterBehavior of `tokenizers`.
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

/// One pre-tokenizer step.
struct PreTokenizeStep {
  enum class Kind { split, byte_level } kind = Kind::split;
  std::shared_ptr<const UnicodeRegex> regex;  // split; byte_level with use_regex
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;            // split
  bool add_prefix_space = false;  // byte_level
};

/// A piece of pre-tokenized text: bytes [begin, end) of PreTokenizeScratch::text.
struct Piece {
  uint32_t begin, end;
};

/// Reusable buffers of one thread's pre-tokenization (no allocation once warm).
struct PreTokenizeScratch {
  std::string text;  // the input segment, then any prefixed copies appended behind it
  std::vector<Piece> pieces, next;
  std::vector<UnicodeRegex::Match> matches;
  struct Flagged {
    Piece p;
    bool is_match;
  };
  std::vector<Flagged> flagged, merged;
};

/// A sequence of steps. Immutable; run() may be called concurrently with distinct scratches.
class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<PreTokenizeStep> steps) : steps_(std::move(steps)) {}

  /// Splits `segment` (valid UTF-8) into s.pieces (over s.text); empty pieces are dropped.
  /// `continues`: the segment continues text cut before it (a chunk of a long file), so
  /// a ByteLevel first step adds no prefix space to it.
  void run(std::string_view segment, PreTokenizeScratch& s, bool continues = false) const;

  const std::vector<PreTokenizeStep>& steps() const { return steps_; }

 private:
  std::vector<PreTokenizeStep> steps_;
};

}  // namespace strata::data
