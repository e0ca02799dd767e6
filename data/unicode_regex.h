// The regular expressions of tokenizer.json's pre-tokenizers, run by PCRE2 (UTF and UCP
// modes, JIT-compiled). `tokenizers` runs them with Oniguruma; the one difference that
// matters for these patterns is \s: Oniguruma's is Unicode White_Space, which holds U+0085
// (NEL), PCRE2's is category Z plus \t\n\v\f\r, which does not. Patterns are rewritten so
// that \s and \S agree (see translate_pattern).
//
// Why PCRE2 rather than ICU or a generated table: PCRE2 runs any pattern a tokenizer.json
// may carry (Split patterns differ between model families), its JIT matches the GPT-2 and
// Llama 3 patterns at hundreds of MB/s, and it is one small Debian package (libpcre2-dev).
// ICU's regex engine runs the same patterns several times slower through UText, and a
// hand-written matcher over a generated category table would only cover the two patterns
// it was written for. See docs/tokenizer.md for the measured figures.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata::data {

/// A compiled pattern. Immutable after construction; find_all may run concurrently.
class UnicodeRegex {
 public:
  /// Throws strata::DataError "<what>: bad regex '<pattern>': <PCRE2's message> at offset N".
  UnicodeRegex(const std::string& pattern, const std::string& what, bool literal = false);
  ~UnicodeRegex();
  UnicodeRegex(const UnicodeRegex&) = delete;
  UnicodeRegex& operator=(const UnicodeRegex&) = delete;

  struct Match {
    size_t begin, end;  // byte offsets into the searched text
  };
  /// Appends to `out` the matches of a left-to-right scan of `text` (valid UTF-8), as
  /// Oniguruma's find_iter yields them: after a match ends at e the scan resumes at e, and
  /// an empty match right where the previous one ended is skipped by one code point.
  void find_all(std::string_view text, std::vector<Match>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
};

/// `pattern` with \s and \S made to match Unicode White_Space (adds U+0085). Exposed for tests.
std::string translate_pattern(const std::string& pattern);

}  // namespace strata::data
