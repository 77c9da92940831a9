// Shared by the JSON readers (schedule files, cost files): a strict parser, how a value's type
// is named in an error message, and a list of keys for "expected one of ..." messages.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace ppsched {

// Parses like nlohmann::json::parse, but refuses duplicate keys (which json::parse silently
// collapses) and turns syntax errors into InputErrors with file, line and column; a duplicate
// names its JSON path, and with `step_locations` also the rank and step when it lies inside
// "programs" (schedule files). Throws InputError.
nlohmann::json parse_json_strict(std::string_view text, const std::string& file, bool step_locations);

// For a SAX handler's parse_error: throws an InputError with the file, the line and column of
// byte `position`, and nlohmann's explanation without its exception tag, clipped.
[[noreturn]] void throw_json_syntax_error(std::string_view text, const std::string& file, std::size_t position,
                                          const nlohmann::detail::exception& ex);

// The same for a message already free of tags (parse_json_sax's).
[[noreturn]] void throw_json_syntax_error(std::string_view text, const std::string& file, std::size_t position,
                                          std::string_view message);

// "null", "a boolean", "a string", "an array", "an object", and for numbers either "a number"
// or, where integers are expected, "an integer" / "a number with a fraction".
inline std::string json_type_name(const nlohmann::json& j, bool integers_apart) {
  using T = nlohmann::json::value_t;
  switch (j.type()) {
    case T::null: return "null";
    case T::boolean: return "a boolean";
    case T::string: return "a string";
    case T::array: return "an array";
    case T::object: return "an object";
    case T::number_integer:
    case T::number_unsigned: return integers_apart ? "an integer" : "a number";
    case T::number_float: return integers_apart ? "a number with a fraction" : "a number";
    default: return "an unsupported value";
  }
}

// "a, b, c"
inline std::string join_keys(const std::vector<std::string_view>& keys) {
  std::string out;
  for (auto k : keys) out += (out.empty() ? "" : ", ") + std::string(k);
  return out;
}

}  // namespace ppsched
