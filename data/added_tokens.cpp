// Leftmost-longest search by first byte, then the flag rules of `tokenizers`'
// AddedVocabulary::find_matches (whitespace and word characters as Rust's Unicode \s, \w).
#include <strata/data/added_tokens.h>

#include <algorithm>

#include <strata/data/unicode_regex.h>
#include <strata/data/utf8.h>

namespace strata::data {
namespace {

bool is_white_space(uint32_t c) {  // the Unicode White_Space property
  return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t char_start_before(std::string_view s, size_t i) {  // start of the code point ending at i
  do --i;
  while (i > 0 && (uint8_t(s[i]) & 0xC0) == 0x80);
  return i;
}

// Rust regex's Unicode \w: Alphabetic, marks, decimal digits, connector punctuation, joiners.
bool is_word_char_at(std::string_view s, size_t i) {
  static const UnicodeRegex word(R"(\A[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])", "added token word test");
  std::vector<UnicodeRegex::Match> m;
  size_t j = i;
  utf8::next_code_point(s, j);
  word.find_all(s.substr(i, j - i), m);
  return !m.empty();
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens, std::vector<size_t> which)
    : tokens_(tokens), which_(std::move(which)) {
  for (uint32_t k = 0; k < tokens_.size(); ++k) by_first_[uint8_t(tokens_[k].content[0])].push_back(k);
  for (auto& b : by_first_)
    std::stable_sort(b.begin(), b.end(),
                     [&](uint32_t x, uint32_t y) { return tokens_[x].content.size() > tokens_[y].content.size(); });
}

void AddedTokenMatcher::find(std::string_view text, size_t begin, size_t end, std::vector<Segment>& out) const {
  size_t start_offset = begin;
  size_t i = begin;
  while (i < end) {
    const auto& cands = by_first_[uint8_t(text[i])];
    const AddedToken* hit = nullptr;
    uint32_t hit_k = 0;
    for (uint32_t k : cands) {
      const std::string& c = tokens_[k].content;
      if (c.size() <= end - i && text.compare(i, c.size(), c) == 0) {
        hit = &tokens_[k];
        hit_k = k;
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + hit->content.size();
    i = stop;  // matches never overlap, even one the flags below discard
    if (hit->single_word) {
      const bool start_space = start == begin || !is_word_char_at(text, char_start_before(text, start));
      const bool stop_space = stop == end || !is_word_char_at(text, stop);
      if (!start_space || !stop_space) continue;
    }
    if (hit->lstrip) {
      size_t s = start;
      while (s > begin) {
        const size_t p = char_start_before(text, s);
        size_t q = p;
        if (!is_white_space(utf8::next_code_point(text, q))) break;
        s = p;
      }
      start = std::max(s, start_offset);  // spaces an earlier match took stay with it
    }
    if (hit->rstrip) {
      while (stop < end) {
        size_t q = stop;
        if (!is_white_space(utf8::next_code_point(text, q))) break;
        stop = q;
      }
      i = stop;
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, int64_t(which_[hit_k])});
    start_offset = stop;
  }
  if (start_offset < end || begin == end) out.push_back({start_offset, end, -1});
}

}  // namespace strata::data
