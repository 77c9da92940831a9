// Located input errors. Reading a file or building a schedule from bad parameters throws
// an InputError that carries where the problem is and what was expected; the CLI is the
// only place that turns it into text and exit code 2.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace ppsched {

struct Location {
  std::string file;  // "" when not read from a file
  int rank = -1;     // -1: not about one rank
  int index = -1;    // step index within the rank's program; -1: not about one step
  int line = -1;     // CSV row / JSON line where known
  std::string field; // JSON path or field name where known ("programs[1][3].micro")
};

// A piece of the input quoted in a message: at most `max` bytes (not cutting a UTF-8
// sequence), then how long it was, so that a 1 MB cell does not become a 1 MB message.
inline std::string clip(std::string_view s, size_t max = 200) {
  if (s.size() <= max) return std::string(s);
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return std::string(s.substr(0, cut)) + "... (" + std::to_string(s.size()) + " bytes)";
}

// A library exception's text for a message: without the library's tag
// ("[json.exception.parse_error.101] "), clipped.
inline std::string library_message(std::string_view what) {
  if (!what.empty() && what.front() == '[') {
    const size_t close = what.find("] ");
    if (close != std::string_view::npos) what.remove_prefix(close + 2);
  }
  return clip(what, 300);
}

inline Location in_file(std::string file) {
  Location l;
  l.file = std::move(file);
  return l;
}

class InputError : public std::runtime_error {
 public:
  InputError(Location where, std::string what_expected)
      : std::runtime_error(render(where, what_expected)), where_(std::move(where)),
        message_(std::move(what_expected)) {}
  const Location& where() const { return where_; }
  const std::string& message() const { return message_; }

  static std::string render(const Location& w, const std::string& msg) {
    std::string s;
    if (!w.file.empty()) s += clip(w.file);
    if (w.line >= 0) s += (s.empty() ? "" : ":") + std::string("line ") + std::to_string(w.line);
    if (w.rank >= 0) s += (s.empty() ? "" : ": ") + std::string("rank ") + std::to_string(w.rank);
    if (w.index >= 0) s += (s.empty() ? "" : ", ") + std::string("step ") + std::to_string(w.index);
    if (!w.field.empty()) s += (s.empty() ? "" : " ") + std::string("(") + clip(w.field) + ")";
    return s.empty() ? msg : s + ": " + msg;
  }

 private:
  Location where_;
  std::string message_;
};

}  // namespace ppsched
