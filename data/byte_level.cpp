// The byte <-> code point tables of the byte-level alphabet (GPT-2's bytes_to_unicode).
#include <strata/data/byte_level.h>

#include <strata/data/utf8.h>

namespace strata::data::byte_level {
namespace {

struct Tables {
  std::array<uint32_t, 256> cp{};
  std::array<std::string, 256> text{};
  std::array<int16_t, 324> byte_of{};  // code point -> byte, -1 outside the alphabet (all are < 0x144)
  Tables() {
    byte_of.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      cp[size_t(b)] = printable ? uint32_t(b) : next++;
      utf8::append_code_point(text[size_t(b)], cp[size_t(b)]);
      byte_of[cp[size_t(b)]] = int16_t(b);
    }
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint32_t byte_to_code_point(uint8_t b) { return tables().cp[b]; }
const std::string& byte_to_text(uint8_t b) { return tables().text[b]; }

std::string encode(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.text[uint8_t(c)];
  return out;
}

bool decode(std::string_view text, std::string& out) {
  const Tables& t = tables();
  const size_t old = out.size();
  size_t i = 0;
  while (i < text.size()) {
    if (utf8::valid_sequence_length(text, i) == 0) {
      out.resize(old);
      return false;
    }
    const uint32_t cp = utf8::next_code_point(text, i);
    if (cp >= t.byte_of.size() || t.byte_of[cp] < 0) {
      out.resize(old);
      return false;
    }
    out.push_back(char(t.byte_of[cp]));
  }
  return true;
}

}  // namespace strata::data::byte_level
