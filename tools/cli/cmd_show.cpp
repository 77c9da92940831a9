#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>

#include "schedule/errors.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/text_format.hpp"
#include "sim/cost_model.hpp"
#include "sim/engine.hpp"
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

// The timeline's size: without --unit the shortest compute step is one column unless that
// makes more than kDefaultColumns columns (then the unit grows to fit, and the grid says so);
// a --unit that makes more than kMaxCells cells over all ranks is refused.
constexpr int64_t kDefaultColumns = 10000;
constexpr int64_t kMaxCells = int64_t{1} << 22;

std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// What `ppsched show` was asked, as its flags say.
struct ShowFlags {
  std::string file;
  GridOptions grid;
  bool no_idle = false;
  bool summary = false;
  bool json = false;
  int width = 0;  // 0: terminal_width()
  bool compute = false, timeline = false;
  double unit_ms = 0;  // 0: the shortest compute step
  SimFlags sim;
  std::vector<CLI::Option*> sim_options;  // given only with --timeline
  CLI::Option *max_steps_opt = nullptr, *unit_opt = nullptr;
};

CLI::App* declare_show_flags(CLI::App& app, ShowFlags& f) {
  auto* cmd = app.add_subcommand("show", "print a schedule as a per-rank grid in compact notation");
  cmd->add_option("file", f.file, "schedule file (.json or .csv)")->required();
  cmd->add_option("--width", f.width, "wrap at N columns (20 to 100000; default: $COLUMNS, else the terminal's width, else 120)")
      ->check(whole_in(20, 100000));
  f.max_steps_opt = cmd->add_option("--max-steps", f.grid.max_steps,
                                      "show at most N steps of each rank (with --compute: N compute steps; not with --timeline)")
                          ->check(whole_in(1, std::numeric_limits<int32_t>::max()));
  cmd->add_flag("--no-idle", f.no_idle, "leave idle slots out (not with --compute, which has none, or --timeline)");
  cmd->add_flag("--summary", f.summary, "one line per rank: step counts by kind (not with --compute or --timeline)");
  cmd->add_flag("--json", f.json,
                "the grid as JSON: {\"ranks\": [[label, ...], ...]} (with --compute or --timeline: that view, with \"view\")");
  cmd->add_flag("--compute", f.compute,
                "compute steps only (F, B, Bi, Bw, ...), per rank in program order: communication left out, like PyTorch "
                "pipelining's compute-only schedule");
  cmd->add_flag("--timeline", f.timeline,
                "a time-aligned grid of the simulated run, like PyTorch's schedule visualizer: one column per time unit, a "
                "row per rank, a cell the compute step running then (\".\": none); priced as `simulate` prices it (--costs, "
                "--model, ...)");
  f.unit_opt = cmd->add_option("--unit", f.unit_ms,
                                 "with --timeline: milliseconds per column (default: the shortest compute step, so that "
                                 "every step shows)")
                     ->check(number_in(0, 1e12));
  const size_t before = cmd->get_options().size();
  add_sim_flags(*cmd, f.sim);
  const auto all = cmd->get_options();
  for (size_t k = before; k < all.size(); ++k) {
    all[k]->description(all[k]->get_description() + " (--timeline only)");
    f.sim_options.push_back(all[k]);
  }
  return cmd;
}

// The views exclude each other, and the timeline's flags apply to it alone.
void refuse_inapplicable(const ShowFlags& f) {
  const auto refuse = [](const std::string& flag, const std::string& why) {
    throw InputError({}, flag + " does not apply: " + why);
  };
  if (f.compute && f.timeline)
    throw InputError({}, "--compute and --timeline are two views of the schedule: give one of them");
  if (!f.timeline) {
    if (f.unit_opt->count() > 0) refuse("--unit", "it sets the length of a column of --timeline");
    for (CLI::Option* o : f.sim_options)
      if (o->count() > 0)
        refuse(o->get_name(), "it sets how --timeline simulates the run; show without --timeline prints the program "
                              "as written, without simulating it");
  }
  if (f.compute || f.timeline) {
    const std::string view = f.compute ? "--compute" : "--timeline";
    if (f.summary) refuse("--summary", "it is a view of its own, not one of " + view);
    if (f.no_idle)
      refuse("--no-idle", f.compute ? "the compute view leaves idle slots out already"
                                      : "the timeline shows each rank's idle time, as \".\"");
    if (f.timeline && f.max_steps_opt->count() > 0)
      refuse("--max-steps", "the timeline's columns are time units, not steps; --unit sets a column's length and "
                            "--width wraps the grid");
  }
}

// The timeline's column length: --unit (within the cell limit), else the shortest compute step,
// widened when it would make too many columns; `note` says which, for the header.
double timeline_unit(const ShowFlags& f, const Schedule& s, const RunRecord& r, std::string& note) {
  double unit = f.unit_ms;
  note = "--unit";
  if (unit > 0) {
    const int64_t n = timeline_columns(r, unit);
    if (n > kMaxCells / std::max(1, s.ranks))
      throw InputError({}, "--unit " + ms_text(unit) + " makes " + std::to_string(n) + " columns of " + std::to_string(s.ranks) +
                               " ranks, over " + std::to_string(kMaxCells) + " cells: give a larger --unit (the run takes " +
                               ms_text(r.makespan_ms) + " ms)");
  } else {
    unit = shortest_compute_ms(s, r);
    note = "the shortest compute step";
    const int64_t most = std::max<int64_t>(1, std::min(kDefaultColumns, kMaxCells / std::max(1, s.ranks)));
    if (!(unit > 0)) {
      unit = r.makespan_ms > 0 ? r.makespan_ms : 1;
      note = "no compute step ran";
    } else if (timeline_columns(r, unit) > most) {
      note = "the shortest compute step, " + ms_text(unit) + " ms, would make more than " + std::to_string(most) +
             " columns; --unit sets it";
      unit = r.makespan_ms / static_cast<double>(most);
    }
  }
  return unit;
}

// `show --timeline`: the simulated run as a time-aligned grid.
int show_timeline(const ShowFlags& f, const Schedule& s, const std::optional<CsvKind>& kind) {
  SimFlags sim = f.sim;
  take_planned_for({{f.file, &s}}, sim.cost, sim.dp, "show --timeline");
  CostModel c = load_cost_model(sim.cost, sim.dp, s);
  const SimOptions so = sim_options(sim, c, s, f.file, true, selects_overlap_p2p(kind));
  // As `simulate` says it: a compute_comms CSV runs under PyTorch's runtime semantics.
  if (overlap_by_csv(sim.mode, selects_overlap_p2p(kind)))
    std::cerr << "note: " << clip(f.file) << " is a compute_comms CSV (PyTorch's lowered schedule): simulated under "
              << "--overlap-p2p, PyTorch's runtime semantics; --no-overlap-p2p runs it blocking\n";
  const RunRecord r = simulate(s, c, so);
  std::string note;
  const double unit = timeline_unit(f, s, r, note);
  const TimelineGrid g = timeline_grid(s, r, unit);
  const bool ok = r.completed && r.check.ok();
  if (f.json) {
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (const auto& row : g.cells) {
      nlohmann::ordered_json cells = nlohmann::ordered_json::array();
      for (const auto& c : row) cells.push_back(c.empty() ? "." : c);
      ranks.push_back(std::move(cells));
    }
    nlohmann::ordered_json j = {{"name", s.name},
                        {"view", "timeline"},
                        {"unit_ms", g.unit_ms},
                        {"makespan_ms", g.makespan_ms},
                        {"completed", g.completed},
                        {"violations", r.check.violations.size()},
                        {"columns", g.cells.empty() ? 0 : g.cells.front().size()},
                        {"hidden_steps", g.hidden_steps},
                        {"costs", c.source},
                        {"ranks", std::move(ranks)}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return ok ? kOk : kFound;
  }
  TimelineOptions to;
  to.width = f.grid.width;
  to.unit_note = note;
  to.costs = c.source;
  std::cout << render_timeline(s, g, to);
  if (!r.check.ok())
    std::cout << "verification: " << r.check.violations.size() << " violation" << (r.check.violations.size() == 1 ? "" : "s")
              << ": ppsched simulate " << clip(f.file) << " lists them\n";
  return ok ? kOk : kFound;
}

// The program as written, as JSON: a label per slot and rank (with --compute, its compute steps).
void print_grid_json(const ShowFlags& f, const Schedule& s) {
  std::cout << "{\"name\": " << json_string(s.name) << (f.compute ? ", \"view\": \"compute\"" : "") << ", \"ranks\": [";
  for (int r = 0; r < s.ranks; ++r) {
    std::cout << (r ? "," : "") << "\n  [";
    bool first = true;
    int shown = 0;
    for (const auto& slot : s.programs[static_cast<size_t>(r)]) {
      if (!slot && (f.no_idle || f.compute)) continue;
      if (f.compute && !shown_as_compute(*slot)) continue;
      if (f.compute && f.grid.max_steps >= 0 && shown >= f.grid.max_steps) break;
      std::cout << (first ? "" : ", ") << "\"" << (slot ? short_label(*slot) : ".") << "\"";
      first = false;
      ++shown;
    }
    std::cout << "]";
}
std::cout << "\n]}\n";
}

}  // namespace

Action add_show(CLI::App& app) {
  auto st = std::make_shared<ShowFlags>();
  declare_show_flags(app, *st);
  return [st]() {
    refuse_inapplicable(*st);
    std::optional<CsvKind> kind;
    Schedule s = read_schedule_input(st->file, {}, {}, &kind);
    st->grid.keep_idle = !st->no_idle;
    st->grid.compute_only = st->compute;
    st->grid.width = st->width > 0 ? st->width : terminal_width();
    if (st->timeline) return show_timeline(*st, s, kind);
    if (st->json) {
      print_grid_json(*st, s);
      return kOk;
    }
    std::cout << (st->summary ? render_summary(s) : render_grid(s, st->grid));
    return kOk;
  };
}

}  // namespace ppsched::cli
