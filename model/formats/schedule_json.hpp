// The canonical schedule file (JSON, "format": "ppsched-schedule", version 1).
#pragma once

#include <string>
#include <string_view>

#include "model/schedule.hpp"

namespace ppsched {

// Parses and validates; throws InputError naming file, rank, step index and what was expected.
Schedule read_schedule_json(std::string_view text, const std::string& file_name);

// Canonical writer: one step object per element, one program per block; stable output.
std::string write_schedule_json(const Schedule& s);

}  // namespace ppsched
