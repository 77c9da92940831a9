#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>

#include "model/formats/schedule_io.hpp"
#include "tools/cli/command.hpp"
#include "traces/text_grid.hpp"

namespace ppsched::cli {
namespace {

// The width `show` wraps to without --width: $COLUMNS when it is a number, else the width of
// the terminal on stdout, else 120 (a pipe or a file).
int terminal_width() {
  if (const char* columns = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long v = std::strtol(columns, &end, 10);
    if (end != columns && *end == '\0' && v > 0 && v <= 100000) return static_cast<int>(v);
  }
  struct winsize ws {};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 120;
}

}  // namespace

Action add_show(CLI::App& app) {
  auto* cmd = app.add_subcommand("show", "print a schedule as a per-rank grid in compact notation");
  struct State {
    std::string file;
    GridOptions grid;
    bool no_idle = false;
    bool summary = false;
    bool json = false;
    int width = 0;  // 0: terminal_width()
  };
  auto st = std::make_shared<State>();
  cmd->add_option("file", st->file, "schedule file (.json or .csv)")->required();
  cmd->add_option("--width", st->width, "wrap at N columns (20 to 100000; default: $COLUMNS, else the terminal's width, else 120)")
      ->check(whole_in(20, 100000));
  cmd->add_option("--max-steps", st->grid.max_steps, "show at most N steps of each rank")
      ->check(whole_in(1, std::numeric_limits<int32_t>::max()));
  cmd->add_flag("--no-idle", st->no_idle, "leave idle slots out");
  cmd->add_flag("--summary", st->summary, "one line per rank: step counts by kind");
  cmd->add_flag("--json", st->json, "the grid as JSON: {\"ranks\": [[label, ...], ...]}");
  return [st]() {
    Schedule s = read_schedule_input(st->file);
    st->grid.keep_idle = !st->no_idle;
    st->grid.width = st->width > 0 ? st->width : terminal_width();
    if (st->json) {
      std::cout << "{\"name\": " << nlohmann::json(s.name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << ", \"ranks\": [";
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
