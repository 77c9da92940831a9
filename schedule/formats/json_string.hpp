// The one JSON string escaper: the schedule writer (schedule_json_write.cpp) and the Chrome trace
// writer (traces/chrome_trace.cpp) both write string literals through it.
#pragma once

#include <string>
#include <string_view>

namespace ppsched {

// `s` as a JSON string literal, quotes included, handed to `append` (a callable taking a
// std::string_view) in pieces: runs of bytes that stand for themselves, and escapes. '"' and
// '\\' and the control characters with a short form (\b \f \n \r \t) are written as such, the
// other control characters below 0x20 as \u00XX (lower-case hex); every other byte, UTF-8
// included, as is. The bytes are not checked for valid UTF-8: the writers' strings come from
// the IR (names read from files the readers checked) and from step tables.
template <class Append>
void write_json_string(std::string_view s, Append&& append) {
  static constexpr char hex[] = "0123456789abcdef";
  append(std::string_view("\"", 1));
  size_t plain = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    if (i > plain) append(s.substr(plain, i - plain));
    plain = i + 1;
    switch (c) {
      case '"': append(std::string_view("\\\"", 2)); break;
      case '\\': append(std::string_view("\\\\", 2)); break;
      case '\b': append(std::string_view("\\b", 2)); break;
      case '\f': append(std::string_view("\\f", 2)); break;
      case '\n': append(std::string_view("\\n", 2)); break;
      case '\r': append(std::string_view("\\r", 2)); break;
      case '\t': append(std::string_view("\\t", 2)); break;
      default: {
        const char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        append(std::string_view(e, 6));
      }
    }
  }
  if (s.size() > plain) append(s.substr(plain));
  append(std::string_view("\"", 1));
}

// The same, appended to `out`.
inline void append_json_string(std::string& out, std::string_view s) {
  write_json_string(s, [&out](std::string_view piece) { out.append(piece); });
}

}  // namespace ppsched
