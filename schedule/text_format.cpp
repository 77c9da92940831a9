#include "schedule/text_format.hpp"

#include <cmath>
#include <cstdarg>
#include <cstdio>

namespace ppsched {

std::string format_text(const char* format, ...) {
  char small[256];
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(small, sizeof small, format, args);
  va_end(args);
  std::string out;
  if (n < 0) {
    out = "?";  // an encoding error: not reached with ppsched's formats
  } else if (static_cast<size_t>(n) < sizeof small) {
    out.assign(small, static_cast<size_t>(n));
  } else {
    out.resize(static_cast<size_t>(n));
    std::vsnprintf(out.data(), out.size() + 1, format, again);  // C++17: data()[size()] is writable as '\0'
  }
  va_end(again);
  return out;
}

std::string fixed(double v, int decimals) { return format_text("%.*f", decimals, v); }

std::string general(double v, int significant) { return format_text("%.*g", significant, v); }

std::string ms_text(double ms) { return ms >= 1 ? fixed(ms, 3) : general(ms, 3); }

std::string human_bytes(double bytes) {
  const double m = std::abs(bytes);
  if (m >= 1024.0 * 1024 * 1024) return fixed(bytes / (1024.0 * 1024 * 1024), 2) + " GiB";
  if (m >= 1024.0 * 1024) return fixed(bytes / (1024.0 * 1024), 1) + " MiB";
  if (m >= 1024.0) return fixed(bytes / 1024.0, 1) + " KiB";
  return fixed(bytes, 0) + " B";
}

}  // namespace ppsched
