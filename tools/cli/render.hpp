// Rendering of check results for people (text) and programs (JSON). Only the CLI prints.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "lowering/diagnostics.hpp"
#include "lowering/stream_program.hpp"
#include "schedule/schedule.hpp"
#include "schedule/text_format.hpp"

namespace ppsched::cli {

// The one definition of "bubble" (simulate, compare and tune print it as their legend): per
// rank, idle time over the run's span (0 to the makespan), where busy is the wall time of the
// compute stream, so an OVERLAP step's overlapped part counts as busy once.
inline constexpr const char* kBubbleLegend =
    "bubble: a rank's idle time over the run's span (0 to the makespan), overlap counted as busy, so an OVERLAP "
    "schedule can finish sooner with a larger bubble; per schedule, the mean over its ranks";

nlohmann::json step_json(const Step& st);
nlohmann::json report_json(const Schedule& s, const CheckReport& r);
std::string report_text(const std::string& what, const Schedule& s, const CheckReport& r);
// The same for a multi-stream program (checkers/stream_order.cpp).
nlohmann::json stream_report_json(const StreamProgram& p, const CheckReport& r);
std::string stream_report_text(const std::string& what, const StreamProgram& p, const CheckReport& r);
// "80GiB", "1.5e9B", "512MB", "4096B" -> bytes; throws InputError, also for a number without
// its unit ("10": bytes or GiB?), with the spellings that would be taken.
int64_t parse_bytes(const std::string& text, const std::string& flag);

// A long search's progress on stderr: on a terminal, one line rewritten in place, clipped to the
// terminal's width and redrawn at most four times a second; in a log (stderr not a terminal) or
// when quiet, nothing. done() ends the line (if one was drawn).
class ProgressLine {
 public:
  explicit ProgressLine(bool quiet);
  void show(const std::string& text);
  void done();

 private:
  bool on_ = false, drawn_ = false;
  size_t width_ = 80;
  double last_ = -1;  // seconds since construction when last drawn
  double t0_ = 0;
};

}  // namespace ppsched::cli
