// The schedule reader's own JSON parser (schedule/formats/json_lexer.hpp) against nlohmann's as an
// oracle: for every input both accept or both refuse, and what they accept is the same value.
#include <catch2/catch.hpp>
#include <rapidcheck.h>
#include <rapidcheck/catch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "schedule/formats/json_lexer.hpp"
#include "schedule/formats/json_string.hpp"

using namespace ppsched;
using nlohmann::json;

namespace {

// Builds nlohmann's document from parse_json_sax's events (a later duplicate key wins, as in
// json::parse), and keeps the error.
class DomBuilder {
 public:
  bool null() { return put(nullptr); }
  bool boolean(bool v) { return put(v); }
  bool number_integer(int64_t v) { return put(v); }
  bool number_unsigned(uint64_t v) { return put(v); }
  bool number_float(double v, std::string_view) { return put(v); }
  bool string(std::string_view v) { return put(std::string(v)); }
  bool key(std::string_view k) {
    key_ = std::string(k);
    return true;
  }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t position, const std::string& message) {
    error_position = position;
    error = message;
    return false;
  }

  json root;
  std::string error;
  std::size_t error_position = 0;

 private:
  json* place(json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }
  bool put(json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(json&& v) {
    stack_.push_back(place(std::move(v)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
  std::vector<json*> stack_;
  std::string key_;
};

struct Verdict {
  bool ok;
  json value;
  std::string error;
  std::size_t position;
};

Verdict ours(const std::string& text) {
  DomBuilder b;
  const bool ok = parse_json_sax(text, b);
  return {ok, b.root, b.error, b.error_position};
}

// nlohmann, with one difference taken out: its lexer takes a NUL byte outside a string for the
// end of the input (it accepts "{}\0junk"), where RFC 8259 allows no NUL there and ours refuses
// it like any other stray byte. \x01 is refused by both, in a string and outside one, as a NUL
// must be.
Verdict theirs(std::string text) {
  for (char& c : text)
    if (c == '\0') c = '\x01';
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return {!j.is_discarded(), j, {}, 0};
}

// "" when both accept with the same value, or both refuse with a message and a position
// within the text (one past it for the end of input); else what differs.
std::string disagreement(const std::string& text) {
  const Verdict a = ours(text), b = theirs(text);
  const std::string shown = json(text).dump(-1, ' ', true, json::error_handler_t::replace);
  if (a.ok != b.ok)
    return shown + ": ours " + (a.ok ? "accepts" : "refuses (" + a.error + ")") + ", nlohmann " +
           (b.ok ? "accepts" : "refuses");
  if (a.ok) {
    // Integers and floats stay apart (2 vs 2.0), as the reader's type messages need.
    if (a.value != b.value || a.value.dump() != b.value.dump())
      return shown + ": ours reads " + a.value.dump() + ", nlohmann " + b.value.dump();
  } else if (a.error.empty() || a.position < 1 || a.position > text.size() + 1) {
    return shown + ": refused without a message or at position " + std::to_string(a.position);
  }
  return {};
}

void agree(const std::string& text) { CHECK(disagreement(text) == ""); }

}  // namespace

TEST_CASE("the JSON parser agrees with nlohmann on tricky inputs", "[formats][json]") {
  const std::vector<std::string> inputs = {
      // structure
      "", " ", "{}", "[]", "[[]]", "{\"a\":{}}", "[1,]", "[,1]", "{\"a\":1,}", "{,}", "{\"a\"}", "{\"a\":}",
      "{1:2}", "{\"a\" 1}", "[1 2]", "[1,,2]", "]", "}", "[", "{", "{\"a\":1", "[1", "[\"a\"", "{\"a\":[}",
      "[}", "{]", "{\"a\":1}}", "[1]]", "{} {}", "[] x", "1 2", "{\"a\":1,\"a\":2}", "  [ 1 , { \"b\" : [ ] } ]  ",
      "\t\r\n[\t\r\n]\t\r\n", "[\f]", "[\v]", std::string("[1]\x00", 4), std::string("[1\x00]", 4),
      std::string("{}\x00junk", 7), std::string("\x00", 1), "\xEF\xBB\xBF{}",
      "\xEF\xBB\xBF", "\xEF\xBB{}", "\xEF{}", "{}\xEF\xBB\xBF", " \xEF\xBB\xBF{}",
      // literals
      "true", "false", "null", "[true,false,null]", "tru", "truee", "nul", "nulll", "True", "NULL", "[t]",
      "[nan]", "[NaN]", "[Infinity]", "[-Infinity]", "[undefined]",
      // numbers
      "0", "-0", "1", "-1", "01", "-01", "00", "1.", "1.0", ".5", "-.5", "1e", "1e+", "1e-", "1e5", "1E5",
      "1e+5", "1e-5", "1.5e3", "-1.5E-3", "+1", "--1", "-", "1.e3", "0e0", "0.0", "-0.0", "1x", "[1x]",
      "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
      "18446744073709551615", "18446744073709551616", "-18446744073709551616", "123456789012345678901234567890",
      "1E432", "-1E432", "1e308", "1.7976931348623157e308", "1.7976931348623159e308", "1e-400", "4.9e-324",
      "0.1", "1e0001", "[1.5,2,-3,4e2]", "[0x10]", "[1_000]",
      // strings
      "\"\"", "\"a\"", "\"a", "\"\\\"", "\"\\\\\"", "\"\\/\"", "\"\\b\\f\\n\\r\\t\"", "\"\\a\"", "\"\\x41\"",
      "\"\\'\"", "\"\\u0041\"", "\"\\u00e9\"", "\"\\u00E9\"", "\"\\u0000\"", "\"\\u\"", "\"\\u12\"", "\"\\u12g4\"",
      "\"\\uD83D\\uDE00\"", "\"\\ud83d\\ude00\"", "\"\\uD83D\"", "\"\\uD83Dx\"", "\"\\uD83D\\u0041\"",
      "\"\\uDE00\"", "\"\\uDE00\\uD83D\"", "\"\\uD83D\\uD83D\"", "\"\\uDBFF\\uDFFF\"", "\"\\uD800\\uDC00\"",
      "\"\\uFFFF\"", "\"\\uD83D\\", "\"\\uD83D\\u", "\"\\uD83D\\uDE0\"",
      std::string("\"a\x01\""), std::string("\"a\x1f\""), std::string("\"\x00\"", 3), "\"\t\"", "\"\n\"",
      "\"\x7f\"", "\"\xc3\xa9\"", "\"\xc3\"", "\"\xc3\x28\"", "\"\xc0\x80\"", "\"\xc1\xbf\"", "\"\xc2\x80\"",
      "\"\xe0\x80\x80\"", "\"\xe0\xa0\x80\"", "\"\xed\x9f\xbf\"", "\"\xed\xa0\x80\"", "\"\xef\xbf\xbf\"",
      "\"\xf0\x8f\xbf\xbf\"", "\"\xf0\x90\x80\x80\"", "\"\xf4\x8f\xbf\xbf\"", "\"\xf4\x90\x80\x80\"",
      "\"\xf5\x80\x80\x80\"", "\"\xff\"", "\"\xfe\"", "\"\x80\"", "\"\xe2\x82\"", "\"\xe2\x82\xac\"",
      "\"\xf0\x9f\x98\x80\"", "\"\xf0\x9f\x98\"", "\"\xe2\x82\xac", "{\"\xc3\xa9\":1}", "{\"\xff\":1}",
      "{\"a\\u0000b\":1}", "[\"a\",\"b\"]", "'a'", "[a]", "{a:1}",
      // the reader's own shapes
      R"({"format": "ppsched-schedule", "version": 1, "programs": [[{"op": "FWD", "micro": 0, "stage": 0}, null]]})",
      R"({"format": "ppsched-schedule", "version": 1E432})",
  };
  for (const auto& text : inputs) agree(text);
}

TEST_CASE("the JSON parser's errors carry nlohmann's wording and the offending byte", "[formats][json]") {
  auto err = [](const std::string& text) {
    const Verdict v = ours(text);
    REQUIRE(!v.ok);
    return v;
  };
  // A missing comma: the next key is named, at its closing quote (column 9 of line 2).
  Verdict v = err("{\"a\": 1\n  \"ranks\": 1}");
  CHECK_THAT(v.error, Catch::Contains("syntax error while parsing object - unexpected string literal"));
  CHECK(v.position == 17);
  CHECK_THAT(err("[\"\\uD83D\"]").error, Catch::Contains("surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"));
  CHECK_THAT(err("[\"\\uDE00\"]").error, Catch::Contains("surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF"));
  CHECK_THAT(err("[\"\xff\"]").error, Catch::Contains("ill-formed UTF-8 byte"));
  CHECK(err("[\"\xff\"]").position == 3);
  CHECK_THAT(err("[1E432]").error, Catch::Contains("number overflow parsing '1E432'"));
  CHECK_THAT(err("{} []").error, Catch::Contains("expected end of input"));
  CHECK_THAT(err("").error, Catch::Contains("unexpected end of input"));
  CHECK(err("").position == 1);
}

TEST_CASE("deep nesting is parsed without recursion", "[formats][json]") {
  // (No document here: nlohmann's comparison and dump recurse.)
  struct Count {
    long events = 0;
    bool null() { return ++events; }
    bool boolean(bool) { return ++events; }
    bool number_integer(int64_t) { return ++events; }
    bool number_unsigned(uint64_t) { return ++events; }
    bool number_float(double, std::string_view) { return ++events; }
    bool string(std::string_view) { return ++events; }
    bool key(std::string_view) { return ++events; }
    bool start_object(std::size_t) { return ++events; }
    bool start_array(std::size_t) { return ++events; }
    bool end_object() { return ++events; }
    bool end_array() { return ++events; }
    bool parse_error(std::size_t, const std::string&) { return false; }
  };
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  Count c;
  CHECK(parse_json_sax(deep, c));
  CHECK(c.events == 400000);
  CHECK(json::accept(deep));
  const std::string unclosed = std::string(200000, '[') + std::string(199999, ']');
  Count u;
  CHECK(!parse_json_sax(unclosed, u));
  CHECK(!json::accept(unclosed));
}

namespace {

// A random JSON text: values of every kind, random whitespace, escapes and non-ASCII text.
std::string gen_value(int depth);

std::string gen_ws() {
  static const char* const ws[] = {"", "", " ", "\n", "\t", "\r\n  "};
  return ws[*rc::gen::inRange(0, 6)];
}

std::string gen_string() {
  static const char* const pieces[] = {"a", "Z", "0", " ", "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r",
                                       "\\t", "\\u0041", "\\u00e9", "\\u20AC", "\\uD83D\\uDE00", "\\u0000",
                                       "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "op", "FWD"};
  std::string s = "\"";
  const int n = *rc::gen::inRange(0, 6);
  for (int k = 0; k < n; ++k) s += pieces[*rc::gen::inRange(0, 22)];
  return s + "\"";
}

std::string gen_number() {
  switch (*rc::gen::inRange(0, 5)) {
    case 0: return std::to_string(*rc::gen::arbitrary<int64_t>());
    case 1: return std::to_string(*rc::gen::arbitrary<uint64_t>());
    case 2: return std::to_string(*rc::gen::inRange(-1000, 1000)) + "." + std::to_string(*rc::gen::inRange(0, 1000));
    case 3: return std::to_string(*rc::gen::inRange(-9, 10)) + (*rc::gen::arbitrary<bool>() ? "e" : "E-") +
                   std::to_string(*rc::gen::inRange(0, 400));
    default: return "123456789012345678901234567890";
  }
}

std::string gen_value(int depth) {
  const int kind = *rc::gen::inRange(0, depth > 4 ? 4 : 6);
  switch (kind) {
    case 0: {
      static const char* const lit[] = {"true", "false", "null"};
      return lit[*rc::gen::inRange(0, 3)];
    }
    case 1: return gen_number();
    case 2:
    case 3: return gen_string();
    case 4: {
      std::string s = "[" + gen_ws();
      const int n = *rc::gen::inRange(0, 4);
      for (int k = 0; k < n; ++k) s += (k ? "," + gen_ws() : "") + gen_value(depth + 1) + gen_ws();
      return s + "]";
    }
    default: {
      std::string s = "{" + gen_ws();
      const int n = *rc::gen::inRange(0, 4);
      for (int k = 0; k < n; ++k)
        s += (k ? "," + gen_ws() : "") + gen_string() + gen_ws() + ":" + gen_ws() + gen_value(depth + 1) + gen_ws();
      return s + "}";
    }
  }
}

}  // namespace

TEST_CASE("the JSON parser agrees with nlohmann on generated texts and their corruptions", "[formats][json]") {
  rc::prop("generated JSON, then a few bytes changed, inserted or dropped", [] {
    std::string text = gen_ws() + gen_value(0) + gen_ws();
    RC_ASSERT(disagreement(text) == "");
    static const char bytes[] = {'"', '\\', '{', '}', '[', ']', ',', ':', '0', '-', 'e', '.', 'u', 'D', 'x',
                                 ' ', '\x01', '\x00', '\x80', '\xc3', '\xed', '\xf4', '\xff', 't', 'n'};
    const int edits = *rc::gen::inRange(1, 4);
    for (int k = 0; k < edits && !text.empty(); ++k) {
      const size_t at = *rc::gen::inRange<size_t>(0, text.size());
      const char b = bytes[*rc::gen::inRange<size_t>(0, sizeof bytes)];
      switch (*rc::gen::inRange(0, 3)) {
        case 0: text[at] = b; break;
        case 1: text.insert(text.begin() + static_cast<long>(at), b); break;
        default: text.erase(at, 1);
      }
    }
    RC_ASSERT(disagreement(text) == "");
  });
}

TEST_CASE("the JSON string escaper writes every byte so that a parser reads it back", "[formats][json_lexer]") {
  std::string all;
  for (int c = 1; c < 0x80; ++c) all += static_cast<char>(c);
  all += '\0';
  all += "\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";  // UTF-8 as is
  std::string out;
  append_json_string(out, all);
  CHECK(json::parse(out).get<std::string>() == all);
  // The short forms where JSON has them, \u00XX for the other control characters.
  std::string shorts;
  append_json_string(shorts, std::string("\"\\\b\f\n\r\t\x01\x1f\x7f", 10));
  CHECK(shorts == "\"\\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\"");
}
