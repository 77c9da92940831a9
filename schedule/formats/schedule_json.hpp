// The canonical schedule file (JSON, "format": "ppsched-schedule", version 1).
#pragma once

#include <string>
#include <string_view>

#include "schedule/schedule.hpp"

namespace ppsched {

// The top object's "format" and "version": what the writer writes and the only ones the
// reader accepts.
inline constexpr std::string_view kScheduleJsonFormat = "ppsched-schedule";
inline constexpr int kScheduleJsonVersion = 1;

// Parses and validates; throws InputError naming file, rank, step index and what was expected
// (schedule_json_read.cpp).
Schedule read_schedule_json(std::string_view text, const std::string& file_name);

// Canonical writer: one step object per element, one program per block; stable output
// (schedule_json_write.cpp).
std::string write_schedule_json(const Schedule& s);

}  // namespace ppsched
