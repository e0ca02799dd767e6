// Depth pre-scan, duplicate-key rejection and non-recursive value descriptions for JSON
// read from files (see json_limits.h).
#include <strata/core/json_limits.h>

#include <set>
#include <vector>

#include <strata/core/error.h>

namespace strata {
namespace {

template <class Json>
Json parse_checked(std::string_view text, const std::string& where) {
  if (json_nesting_depth(text) > kMaxJsonDepth)
    STRATA_THROW(DataError, where, ": JSON nested deeper than ", kMaxJsonDepth, " levels (recursion limit exceeded)");
  // Keys seen in each open object, innermost last (objects only: arrays have no keys).
  std::vector<std::set<std::string>> open;
  std::string duplicate;
  auto cb = [&](int, nlohmann::detail::parse_event_t ev, Json& parsed) {
    using E = nlohmann::detail::parse_event_t;
    if (ev == E::object_start) {
      open.emplace_back();
    } else if (ev == E::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (ev == E::key && !open.empty() && duplicate.empty() && parsed.is_string()) {
      if (!open.back().insert(parsed.template get_ref<const std::string&>()).second)
        duplicate = parsed.template get<std::string>();
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), cb);
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(DataError, where, ": not valid JSON: ", e.what());
  }
  if (!duplicate.empty())
    STRATA_THROW(DataError, where, ": duplicate key ", json_brief(nlohmann::json(duplicate)),
                 " in one JSON object (readers would disagree on which one counts)");
  return j;
}

template <class Json>
std::string brief(const Json& j) {
  if (j.is_array()) return "an array of " + std::to_string(j.size());
  if (j.is_object()) return "an object of " + std::to_string(j.size()) + " keys";
  if (j.is_string()) {
    const std::string& s = j.template get_ref<const std::string&>();
    if (s.size() <= 64) return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return Json(s.substr(0, 64)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "...";
  }
  return j.dump();
}

}  // namespace

int json_nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest && (deepest = depth) > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

nlohmann::json parse_json_file_text(std::string_view text, const std::string& where) {
  return parse_checked<nlohmann::json>(text, where);
}

nlohmann::ordered_json parse_ordered_json_file_text(std::string_view text, const std::string& where) {
  return parse_checked<nlohmann::ordered_json>(text, where);
}

std::string json_brief(const nlohmann::json& j) { return brief(j); }
std::string json_brief(const nlohmann::ordered_json& j) { return brief(j); }

}  // namespace strata
