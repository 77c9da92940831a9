#include <iostream>

#include "model/formats/schedule_io.hpp"
#include "tools/cli/command.hpp"
#include "traces/text_grid.hpp"

namespace ppsched::cli {

Action add_show(CLI::App& app) {
  auto* cmd = app.add_subcommand("show", "print a schedule as a per-rank grid in compact notation");
  struct State {
    std::string file;
    GridOptions grid;
    bool no_idle = false;
    bool summary = false;
    bool json = false;
  };
  auto st = std::make_shared<State>();
  cmd->add_option("file", st->file, "schedule file (.json or .csv)")->required();
  cmd->add_option("--width", st->grid.width, "terminal width (default 120)")->check(whole_in(20, 100000));
  cmd->add_option("--max-steps", st->grid.max_steps, "show at most N steps of each rank")
      ->check(whole_in(1, std::numeric_limits<int32_t>::max()));
  cmd->add_flag("--no-idle", st->no_idle, "leave idle slots out");
  cmd->add_flag("--summary", st->summary, "one line per rank: step counts by kind");
  cmd->add_flag("--json", st->json, "the grid as JSON: {\"ranks\": [[label, ...], ...]}");
  return [st]() {
    Schedule s = read_schedule_file(st->file);
    st->grid.keep_idle = !st->no_idle;
    if (st->json) {
      std::cout << "{\"name\": \"" << s.name << "\", \"ranks\": [";
      for (int r = 0; r < s.ranks; ++r) {
        std::cout << (r ? "," : "") << "\n  [";
        bool first = true;
        for (const auto& slot : s.programs[static_cast<size_t>(r)]) {
          if (!slot && st->no_idle) continue;
          std::cout << (first ? "" : ", ") << "\"" << (slot ? short_label(*slot) : ".") << "\"";
          first = false;
        }
        std::cout << "]";
      }
      std::cout << "\n]}\n";
      return kOk;
    }
    std::cout << (st->summary ? render_summary(s) : render_grid(s, st->grid));
    return kOk;
  };
}

}  // namespace ppsched::cli
