// PCRE2 behind UnicodeRegex: compile once with JIT, match with per-thread match data.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <strata/data/unicode_regex.h>

#include <pcre2.h>

#include <strata/core/error.h>

namespace strata::data {
namespace {

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

// One match-data block per thread, reused by every search: matching allocates nothing.
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(md); }
  };
  thread_local Holder h;
  return h.md;
}

size_t code_point_length(std::string_view s, size_t i) {
  const uint8_t b = uint8_t(s[i]);
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

}  // namespace

std::string translate_pattern(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (e == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

UnicodeRegex::UnicodeRegex(const std::string& pattern, const std::string& what, bool literal) : pattern_(pattern) {
  const std::string src = literal ? pattern : translate_pattern(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2_LITERAL admits no UCP (a literal has no classes for it to change).
  const uint32_t options = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(src.data()), src.size(), options, &err, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    STRATA_THROW(DataError, what, ": bad regex '", pattern, "': ", reinterpret_cast<const char*>(msg), " at offset ",
                 size_t(offset));
  }
  // JIT is an optimisation: where it is unavailable pcre2_match interprets the same code.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

UnicodeRegex::~UnicodeRegex() { pcre2_code_free(as_code(code_)); }

void UnicodeRegex::find_all(std::string_view text, std::vector<Match>& out) const {
  pcre2_match_data* md = thread_match_data();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (pos <= text.size()) {
    const int rc = pcre2_match(as_code(code_), subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      STRATA_THROW(DataError, "regex '", pattern_, "': matching failed: ", reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (b == e && have_last && last_end == e) {
      if (pos >= text.size()) return;
      pos += code_point_length(text, pos);
      continue;
    }
    out.push_back({b, e});
    have_last = true;
    last_end = e;
    pos = e;
  }
}

}  // namespace strata::data
