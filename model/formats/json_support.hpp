// Small helpers shared by the JSON readers (schedule files, cost files): how a value's type
// is named in an error message, and a list of keys for "expected one of ..." messages.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace ppsched {

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
