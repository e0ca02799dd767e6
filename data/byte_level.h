// GPT-2's byte-level alphabet: each of the 256 bytes is shown as a printable code point
// (printable Latin-1 bytes as themselves, the rest as U+0100 onwards), so every byte
// string is a valid Unicode string and every vocabulary entry of tokenizer.json is text.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::data::byte_level {

/// The code point that stands for byte b.
uint32_t byte_to_code_point(uint8_t b);
/// The UTF-8 text of the code point that stands for byte b (1 or 2 bytes).
const std::string& byte_to_text(uint8_t b);
/// `bytes` in the alphabet: each byte replaced by its code point's UTF-8.
std::string encode(std::string_view bytes);
/// Inverse of encode(): false (out untouched past its old size) when `text` is not valid
/// UTF-8 or holds a code point outside the alphabet.
bool decode(std::string_view text, std::string& out);

}  // namespace strata::data::byte_level
