// Parsing JSON from files strata did not necessarily write (checkpoint indexes,
// safetensors headers): bounded nesting, no duplicate keys, and error messages that
// never print an untrusted value whole (nlohmann's dump() recurses once per level).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace strata {

/// Deepest nesting of arrays/objects accepted in a file's JSON (the safetensors
/// reference implementation's serde_json stops at 128 too).
inline constexpr int kMaxJsonDepth = 128;

/// Nesting depth of the arrays/objects in `text` (brackets inside strings ignored),
/// counted without recursion; stops counting once it exceeds `limit`.
int json_nesting_depth(std::string_view text, int limit = kMaxJsonDepth);

/// Parses `text` as JSON: DataError "<where>: ..." when it nests deeper than
/// kMaxJsonDepth ("recursion limit exceeded", checked before parsing), is not valid JSON
/// (including ill-formed UTF-8), or repeats a key within one object (nlohmann would keep
/// the last). `where` should name the file, e.g. "checkpoint 'dir/index.json'".
nlohmann::json parse_json_file_text(std::string_view text, const std::string& where);
/// As above, keeping the keys in file order.
nlohmann::ordered_json parse_ordered_json_file_text(std::string_view text, const std::string& where);

/// A short description of an untrusted JSON value for an error message: scalars as JSON
/// (strings cut to 64 characters), containers as "an array of N" / "an object of N keys".
/// Never recurses.
std::string json_brief(const nlohmann::json& j);
std::string json_brief(const nlohmann::ordered_json& j);

}  // namespace strata
