// Reading the fields of a strict JSON document (a cost file, a model file) with located errors:
// every message names the file and the JSON path of the value, and what was expected. Keys
// named "comment" or starting with "x-" are annotations and ignored; any other unknown key is
// an error, so a misspelt key never silently falls back to a default.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedule/errors.hpp"
#include "schedule/formats/json_support.hpp"
#include "schedule/validate.hpp"

namespace ppsched {

// What a number in a file stands for: its unit, range and how an error describes it.
enum class Quantity { Time, Bytes, Bandwidth, Fraction };

// A number as a file writes it: whole numbers without a fraction (bytes, counts), others as they are.
inline nlohmann::ordered_json json_number(double v) {
  if (v == std::floor(v) && std::fabs(v) < 9e15) return static_cast<int64_t>(v);
  return v;
}

class JsonFields {
 public:
  using Keys = std::vector<std::string_view>;
  explicit JsonFields(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  [[noreturn]] void fail(const std::string& path, const std::string& msg) const {
    Location loc = in_file(file_);
    loc.field = path;
    throw InputError(loc, msg);
  }

  static bool is_annotation(std::string_view key) { return key == "comment" || key.substr(0, 2) == "x-"; }
  static std::string type_of(const nlohmann::json& j) { return json_type_name(j, false); }
  static std::string shown(const nlohmann::json& j) { return j.is_number() || j.is_boolean() ? j.dump() : type_of(j); }

  // `j` is an object whose keys are all in `known` (or annotations).
  const nlohmann::json& object(const nlohmann::json& j, const std::string& path, const Keys& known) const {
    if (!j.is_object()) fail(path, "expected an object, got " + type_of(j));
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& key = it.key();
      if (is_annotation(key)) continue;
      bool ok = false;
      for (auto k : known) ok = ok || k == key;
      if (!ok)
        fail(path.empty() ? key : path + "." + key,
             "unknown key '" + clip(key) + "' in " + (path.empty() ? "the top level" : path) + ": expected one of " +
                 join_keys(known) + " (keys named \"comment\" or starting with x- are ignored)");
    }
    return j;
  }

  // A number from lo to hi (inclusive), finite.
  double number(const nlohmann::json& j, const std::string& path, double lo, double hi, const std::string& what) const {
    if (!j.is_number()) fail(path, "expected " + what + ", got " + type_of(j));
    const double v = j.get<double>();
    if (!std::isfinite(v) || v < lo || v > hi) fail(path, "expected " + what + ", got " + j.dump());
    return v;
  }
  // A whole number from lo to hi.
  int64_t whole(const nlohmann::json& j, const std::string& path, int64_t lo, int64_t hi, const std::string& what) const {
    const bool integral = j.is_number_integer() || j.is_number_unsigned() ||
                          (j.is_number_float() && std::isfinite(j.get<double>()) && j.get<double>() == std::floor(j.get<double>()));
    if (!integral) fail(path, "expected " + what + ", got " + (j.is_number() ? j.dump() : type_of(j)));
    if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail(path, "expected " + what + ", got " + j.dump());
    const double d = j.get<double>();
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) fail(path, "expected " + what + ", got " + j.dump());
    return j.is_number_float() ? static_cast<int64_t>(d) : j.get<int64_t>();
  }
  // A time in ms, a byte count, a bandwidth or a fraction, within its range and the limits
  // (README "Limits", which keep every sum and product a model forms finite and every byte
  // count within int64). `forms`: the other forms the value may take, for the message.
  double quantity(const nlohmann::json& j, const std::string& path, Quantity q, const std::string& forms = "") const {
    if (!j.is_number()) fail(path, "expected " + expected(q) + forms + ", got " + type_of(j));
    const double v = j.get<double>();
    if (const std::string why = quantity_problem(v, q, j.dump()); !why.empty()) fail(path, why);
    return v;
  }
  // What is wrong with `v` as a `q` ("" when nothing), `shown` as the file spells it. The cost
  // file's writer refuses by the same rules what its reader would refuse.
  static std::string quantity_problem(double v, Quantity q, const std::string& shown) {
    const bool ok = q == Quantity::Bandwidth ? v > 0
                    : q == Quantity::Fraction ? v >= 0 && v <= 1
                    : q == Quantity::Bytes    ? v >= 0 && v == std::floor(v)
                                              : v >= 0;
    if (!ok || !std::isfinite(v)) return "expected " + expected(q) + ", got " + shown;
    if (q == Quantity::Bytes && v > kMaxBytes)
      return shown + " bytes is over the limit of " + std::to_string(static_cast<int64_t>(kMaxBytes)) + " bytes (1 TiB)";
    if (q == Quantity::Time && v > kMaxTimeMs) return shown + " ms is over the limit of 1e9 ms (11.6 days)";
    if (q == Quantity::Bandwidth && (v < kMinBandwidthGBps || v > kMaxBandwidthGBps))
      return shown + " GB/s is outside the limits of 1e-6 to 1e9 GB/s (null for infinite)";
    return "";
  }
  static std::string expected(Quantity q) {
    switch (q) {
      case Quantity::Time: return "a time in ms >= 0";
      case Quantity::Bytes: return "a whole number of bytes >= 0";
      case Quantity::Bandwidth: return "a bandwidth in GB/s > 0, or null for infinite";
      case Quantity::Fraction: return "a number between 0 and 1";
    }
    return "";
  }
  bool boolean(const nlohmann::json& j, const std::string& path) const {
    if (!j.is_boolean()) fail(path, "expected true or false, got " + type_of(j));
    return j.get<bool>();
  }
  const std::string& text(const nlohmann::json& j, const std::string& path, const std::string& what) const {
    if (!j.is_string()) fail(path, "expected " + what + ", got " + type_of(j));
    return j.get_ref<const std::string&>();
  }
  // One of `choices`; returns its index.
  size_t choice(const nlohmann::json& j, const std::string& path, const Keys& choices) const {
    std::string list;
    for (auto c : choices) list += (list.empty() ? "\"" : ", \"") + std::string(c) + "\"";
    if (!j.is_string()) fail(path, "expected one of " + list + ", got " + type_of(j));
    const std::string& s = j.get_ref<const std::string&>();
    for (size_t k = 0; k < choices.size(); ++k)
      if (choices[k] == s) return k;
    fail(path, "expected one of " + list + ", got \"" + clip(s, 60) + "\"");
  }

 private:
  std::string file_;
};

}  // namespace ppsched
