// UTF-8 validation and the maximal-subpart replacement of ill-formed bytes.
#include <strata/data/utf8.h>

namespace strata::data::utf8 {
namespace {

// Allowed range of the second byte for lead byte b (Unicode table 3-7); the bytes after
// the second are always 80..BF. {0, 0} marks an invalid lead byte.
struct SecondRange {
  uint8_t lo, hi;
};
SecondRange second_range(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return {0x80, 0xBF};
  if (b == 0xE0) return {0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {0x80, 0xBF};
  if (b == 0xED) return {0x80, 0x9F};  // no surrogates
  if (b == 0xF0) return {0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {0x80, 0xBF};
  if (b == 0xF4) return {0x80, 0x8F};  // <= U+10FFFF
  return {0, 0};
}

size_t sequence_length(uint8_t b) { return b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

// Bytes of s[i..] that form the longest valid prefix of a sequence (>= 1: a lone bad
// byte is a maximal subpart of its own), and whether that prefix is a whole sequence.
size_t maximal_subpart(std::string_view s, size_t i, bool& complete) {
  const uint8_t b = uint8_t(s[i]);
  complete = false;
  if (b < 0x80) {
    complete = true;
    return 1;
  }
  const SecondRange r = second_range(b);
  if (r.lo == 0) return 1;
  const size_t need = sequence_length(b);
  size_t k = 1;
  for (; k < need && i + k < s.size(); ++k) {
    const uint8_t c = uint8_t(s[i + k]);
    const bool ok = k == 1 ? (c >= r.lo && c <= r.hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) break;
  }
  complete = k == need;
  return k;
}

}  // namespace

size_t valid_sequence_length(std::string_view s, size_t i) {
  bool complete = false;
  const size_t n = maximal_subpart(s, i, complete);
  return complete ? n : 0;
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = valid_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string replace_invalid(std::string_view s) {
  if (is_valid(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 16);
  size_t i = 0;
  while (i < s.size()) {
    bool complete = false;
    const size_t n = maximal_subpart(s, i, complete);
    if (complete)
      out.append(s.substr(i, n));
    else
      out.append("\xEF\xBF\xBD");
    i += n;
  }
  return out;
}

uint32_t next_code_point(std::string_view s, size_t& i) {
  const uint8_t b = uint8_t(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  const size_t n = sequence_length(b);
  uint32_t cp = b & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void append_code_point(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

}  // namespace strata::data::utf8
