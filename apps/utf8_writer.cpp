// Utf8Writer: a small UTF-8 validator in front of stdout (see utf8_writer.h).
#include "apps/utf8_writer.h"

namespace strata::apps {
namespace {

// Length of the character a lead byte starts (0: not a lead byte).
int sequence_length(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;  // continuation bytes, overlong leads C0/C1, F5-FF
}

// Whether `b` may follow the lead byte `lead` as byte `i` (1-based) of its character
// (excludes overlong forms, UTF-16 surrogates and code points above U+10FFFF).
bool valid_continuation(unsigned char lead, size_t i, unsigned char b) {
  if ((b & 0xC0) != 0x80) return false;
  if (i != 1) return true;
  if (lead == 0xE0) return b >= 0xA0;
  if (lead == 0xED) return b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90;
  if (lead == 0xF4) return b <= 0x8F;
  return true;
}

}  // namespace

void Utf8Writer::emit(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), out_);
  written_ += s;
}

void Utf8Writer::escape_first() {
  static const char* kHex = "0123456789abcdef";
  const unsigned char b = static_cast<unsigned char>(pending_[0]);
  emit(std::string("\\x") + kHex[b >> 4] + kHex[b & 15]);
  const std::string rest = pending_.substr(1);
  pending_.clear();
  for (unsigned char c : rest) put(c);
}

void Utf8Writer::put(unsigned char byte) {
  pending_ += static_cast<char>(byte);
  const unsigned char lead = static_cast<unsigned char>(pending_[0]);
  const int need = sequence_length(lead);
  if (need == 0 || (pending_.size() > 1 && !valid_continuation(lead, pending_.size() - 1, byte))) {
    escape_first();
    return;
  }
  if (int(pending_.size()) == need) {
    emit(pending_);
    pending_.clear();
  }
}

void Utf8Writer::finish() {
  while (!pending_.empty()) escape_first();
  std::fflush(out_);
}

}  // namespace strata::apps
