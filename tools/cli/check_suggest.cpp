// `ppsched check --suggest [--fix-out FIXED.json]`: the repair search of sim/search/repair.hpp,
// rendered. cmd_check.cpp calls this for each schedule that failed.
#include <cstdio>
#include <iostream>

#include "schedule/formats/schedule_io.hpp"
#include "schedule/text_format.hpp"
#include "sim/search/repair.hpp"
#include "tools/cli/command.hpp"
#include "tools/cli/render.hpp"

namespace ppsched::cli {

void suggest_fix(const std::string& name, const Schedule& s, const CheckOptions& o, const std::string& fix_out,
                 nlohmann::json* json) {
  const search::Repair r = search::suggest_repair(s, o);
  if (r.found && !fix_out.empty()) write_output(fix_out, write_schedule(r.fixed, FileFormat::Json));
  if (json) {
    nlohmann::json moves = nlohmann::json::array();
    for (const auto& m : r.moves) moves.push_back({{"rank", m.rank}, {"from", m.from}, {"to", m.to}});
    (*json)["suggestion"] = {{"found", r.found}, {"moves", moves}, {"candidates", r.candidates},
                             {"seconds", r.seconds}, {"why_not", r.why_not}};
    return;
  }
  if (r.found) {
    std::cout << format_text("suggested fix for %s: %zu move%s (%zu candidates verified, %.3f s)\n", name.c_str(),
                             r.moves.size(), r.moves.size() == 1 ? "" : "s", r.candidates, r.seconds)
              << search::repair_excerpt(s, r);
    if (!fix_out.empty()) std::cout << "  wrote " << fix_out << " (verified)\n";
  } else {
    std::cout << "no fix suggested for " << name << ": " << r.why_not << " (" << r.candidates << " candidates verified)\n";
  }
}

}  // namespace ppsched::cli
