// The measurement behind the pre-tokenizer's regex engine (data/unicode_regex.h): GPT-2's
// and Llama 3's patterns over a UTF-8 text with PCRE2 (JIT, UTF + UCP) and with ICU's
// regex engine (UText over UTF-8), matches counted the same way. Needs libicu-dev besides
// libpcre2-dev (ICU is not a build dependency of strata). Build and run:
//   g++ -O2 -std=c++20 scripts/bench_regex_engines.cpp -o /tmp/bench_regex \
//       $(pkg-config --cflags --libs libpcre2-8 icu-i18n icu-uc)
//   /tmp/bench_regex /tmp/text.txt     (on an otherwise idle machine)
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/uregex.h>
#include <unicode/utext.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

static const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
static const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

static size_t pcre2_count(const std::string& pat, const std::string& text, double& secs) {
  int err;
  PCRE2_SIZE off;
  pcre2_code* re = pcre2_compile((PCRE2_SPTR)pat.c_str(), pat.size(), PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  const double t0 = now();
  size_t n = 0, pos = 0;
  while (pcre2_match(re, (PCRE2_SPTR)text.data(), text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr) > 0) {
    pos = pcre2_get_ovector_pointer(md)[1];
    ++n;
  }
  secs = now() - t0;
  pcre2_match_data_free(md);
  pcre2_code_free(re);
  return n;
}

static size_t icu_count(const std::string& pat, const std::string& text, double& secs) {
  UErrorCode st = U_ZERO_ERROR;
  UText* up = utext_openUTF8(nullptr, pat.data(), int64_t(pat.size()), &st);
  URegularExpression* re = uregex_openUText(up, 0, nullptr, &st);
  UText* ut = utext_openUTF8(nullptr, text.data(), int64_t(text.size()), &st);
  uregex_setUText(re, ut, &st);
  const double t0 = now();
  size_t n = 0;
  while (uregex_findNext(re, &st)) ++n;
  secs = now() - t0;
  if (U_FAILURE(st)) std::fprintf(stderr, "icu: %s\n", u_errorName(st));
  uregex_close(re);
  utext_close(ut);
  utext_close(up);
  return n;
}

int main(int argc, char** argv) {
  std::ifstream in(argc > 1 ? argv[1] : "/dev/stdin", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const double mb = double(text.size()) / 1e6;
  for (auto [name, pat] : {std::pair{"gpt2", kGpt2}, {"llama3", kLlama3}}) {
    double tp, ti;
    const size_t np = pcre2_count(pat, text, tp), ni = icu_count(pat, text, ti);
    std::printf("%-7s pcre2-jit %7.1f MB/s (%zu matches)   icu %7.1f MB/s (%zu matches)\n", name, mb / tp, np, mb / ti,
                ni);
  }
}
