// UTF-8 as the tokenizer needs it: text from files is arbitrary bytes, while the
// `tokenizers` package only ever sees Python str. Bytes that are not UTF-8 are replaced
// exactly as Python's bytes.decode("utf-8", errors="replace") and Rust's
// String::from_utf8_lossy replace them, so both sides tokenize the same code points.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::data::utf8 {

/// Length of the valid UTF-8 sequence at s[i], or 0 when the bytes there are not one.
/// Valid means the Unicode table 3-7 ranges: no overlongs, no surrogates, <= U+10FFFF.
size_t valid_sequence_length(std::string_view s, size_t i);

/// True when all of `s` is valid UTF-8.
bool is_valid(std::string_view s);

/// `s` with every maximal ill-formed subpart replaced by U+FFFD (the W3C/Unicode
/// "substitution of maximal subparts" practice that Python and Rust follow). Returns `s`
/// unchanged (one copy) when it is valid.
std::string replace_invalid(std::string_view s);

/// Decodes the code point at s[i] (s must be valid there); advances i past it.
uint32_t next_code_point(std::string_view s, size_t& i);

/// Appends the UTF-8 encoding of code point `cp` (< 0x110000, not a surrogate).
void append_code_point(std::string& out, uint32_t cp);

}  // namespace strata::data::utf8
