// Numbers and byte counts as text, for messages and reports: the one helper set behind every
// formatted number ppsched prints (issue 25 item 9), and the only caller of snprintf. Each
// function is printf's conversion of the same name, returned as a std::string of any length.
#pragma once

#include <string>

namespace ppsched {

// printf into a string, of whatever length the result has (no fixed buffer to truncate at).
// For rows of a table: format_text("  r%-3d %9.3f\n", rank, ms). The format is checked by the
// compiler like printf's.
std::string format_text(const char* format, ...) __attribute__((format(printf, 1, 2)));

// "%.*f": `decimals` digits after the point (round half to even on the binary value, as printf).
std::string fixed(double v, int decimals);

// "%.*g": at most `significant` significant digits, trailing zeros dropped ("%g" is 6).
std::string general(double v, int significant = 6);

// A duration in milliseconds for grids and their notes: three decimals from 1 ms up ("12.500"),
// three significant digits below ("0.0125").
std::string ms_text(double ms);

// A byte count in binary units, the one rule of every report, message and picture: below
// 1 KiB the whole number of bytes ("512 B"); then KiB and MiB with one decimal ("1.5 KiB",
// "24.0 MiB"), GiB with two ("80.00 GiB"), GiB the largest unit ("2048.00 GiB"). The unit is
// the largest whose size the magnitude reaches, before rounding (1,048,575 B is "1024.0 KiB");
// the digits are fixed()'s. Negative counts read like positive ones with a sign ("-2.0 KiB").
std::string human_bytes(double bytes);

}  // namespace ppsched
