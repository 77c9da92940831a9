// Rendering of check results for people (text) and programs (JSON). Only the CLI prints.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "lowering/diagnostics.hpp"
#include "model/schedule.hpp"

namespace ppsched::cli {

nlohmann::json step_json(const Step& st);
nlohmann::json report_json(const Schedule& s, const CheckReport& r);
std::string report_text(const std::string& what, const Schedule& s, const CheckReport& r);
// "80GiB", "1.5e9", "512MiB", "1000000" -> bytes; throws InputError.
int64_t parse_bytes(const std::string& text, const std::string& flag);
std::string human_bytes(int64_t b);

}  // namespace ppsched::cli
