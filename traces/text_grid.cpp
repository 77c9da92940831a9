#include "traces/text_grid.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "schedule/text_format.hpp"

namespace ppsched {
namespace {

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s : s + std::string(w - s.size(), ' '); }

// Whether a slot is drawn at all: every slot, or (compute_only) the compute steps.
bool drawn(const Slot& slot, const GridOptions& o) { return !o.compute_only || (slot && shown_as_compute(*slot)); }

std::vector<std::string> row_labels(const Program& p, const GridOptions& o) {
  std::vector<std::string> out;
  for (const auto& slot : p) {
    if (!drawn(slot, o)) continue;
    if (o.max_steps >= 0 && static_cast<int>(out.size()) >= o.max_steps) break;
    if (slot) out.push_back(short_label(*slot));
    else if (o.keep_idle) out.push_back(".");
  }
  return out;
}

// Items joined by `sep` into lines of at most `width` characters (an item longer than a line
// gets one of its own, or with break_words is broken between its words); continuation lines
// start with two spaces.
std::string wrap_items(const std::vector<std::string>& items, const std::string& sep, size_t width, bool break_words = false) {
  std::vector<std::string> pieces;  // each with the separator that follows it
  for (size_t k = 0; k < items.size(); ++k) {
    const std::string after = k + 1 < items.size() ? sep : "";
    if (!break_words || items[k].size() + 2 <= width) {
      pieces.push_back(items[k] + after);
      continue;
    }
    size_t start = 0;
    while (start < items[k].size()) {
      size_t space = items[k].find(' ', start);
      if (space == std::string::npos) {
        pieces.push_back(items[k].substr(start) + after);
        break;
      }
      pieces.push_back(items[k].substr(start, space - start + 1));
      start = space + 1;
    }
  }
  std::string out, line;
  for (const std::string& piece : pieces) {
    std::string trimmed = piece;
    while (!trimmed.empty() && trimmed.back() == ' ') trimmed.pop_back();
    if (!line.empty() && line.size() + trimmed.size() > width && !(break_words && line == "  ")) {
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
      line = "  ";
    }
    line += piece;
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return out + line + "\n";
}

void collect_ops(const Step& st, std::set<Op>& ops) {
  ops.insert(st.op);
  for (const auto& sub : st.sub_steps()) collect_ops(sub, ops);
}

// A timeline cell: the short name and micro-batch ("F3"), the stage too when a rank holds
// several ("F3s1"); a composite as "[a|b]".
std::string cell_label(const Step& st, bool with_stage) {
  if (is_composite(st.op)) {
    std::string out = "[";
    for (size_t k = 0; k < st.sub_steps().size(); ++k) out += (k ? "|" : "") + cell_label(st.sub_steps()[k], with_stage);
    return out + "]";
  }
  std::string out(info(st.op).short_name);
  if (st.micro >= 0) out += std::to_string(st.micro);
  if (with_stage && st.stage >= 0) out += "s" + std::to_string(st.stage);
  return out;
}

std::string header_line(const Schedule& s) { return (s.name.empty() ? std::string("schedule") : s.name) + ": " + std::to_string(s.ranks) + " ranks"; }

}  // namespace

bool shown_as_compute(const Step& step) {
  if (is_compute(step.op)) return true;
  if (!is_overlap(step.op) || step.sub_steps().empty()) return false;
  for (const auto& sub : step.sub_steps())
    if (!shown_as_compute(sub)) return false;
  return true;
}

std::string render_grid(const Schedule& s, const GridOptions& o) {
  const size_t width = static_cast<size_t>(std::max(o.width, 20));
  std::vector<std::string> header = {
      header_line(s),
      std::to_string(s.stages) + " stages (" + std::string(to_string(s.placement.kind)) + ")",
      std::to_string(s.micro_batches) + " micro-batches"};
  if (s.mpipe)
    header.push_back("mpipe " + std::string(to_string(s.mpipe->overflow)) + "/" + std::string(to_string(s.mpipe->tower)) +
                     (s.mpipe->owner_backward ? "/owner-backward" : ""));
  if (o.compute_only) header.push_back("compute steps only, in program order (communication left out)");
  std::string out = wrap_items(header, ", ", width);
  std::vector<std::vector<std::string>> rows;
  size_t cell = 1, longest = 0;
  for (const auto& p : s.programs) {
    rows.push_back(row_labels(p, o));
    for (const auto& l : rows.back()) cell = std::max(cell, l.size());
    longest = std::max(longest, rows.back().size());
  }
  const std::string rank_w = "r" + std::to_string(std::max(0, s.ranks - 1));
  const size_t prefix = rank_w.size() + 3;
  // Columns of cell + 1 characters; the last column's padding is trimmed, so a block of n
  // columns takes prefix + n (cell + 1) - 1 characters.
  const size_t per_block = width > prefix + cell ? std::max<size_t>(1, (width - prefix + 1) / (cell + 1)) : 1;
  for (size_t start = 0; start < longest; start += per_block) {
    size_t end = std::min(longest, start + per_block);
    out += pad("", prefix) + (o.compute_only ? "compute step " : "step ") + std::to_string(start) + (end - start > 1 ? ".." + std::to_string(end - 1) : "") + "\n";
    for (int r = 0; r < s.ranks; ++r) {
      std::string line = pad("r" + std::to_string(r), rank_w.size()) + " | ";
      const auto& row = rows[static_cast<size_t>(r)];
      for (size_t k = start; k < end && k < row.size(); ++k) line += pad(row[k], cell + 1);
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
  }
  if (o.max_steps >= 0) {
    for (int r = 0; r < s.ranks; ++r) {
      size_t total = o.keep_idle && !o.compute_only ? s.programs[static_cast<size_t>(r)].size() : 0;
      if (!o.keep_idle || o.compute_only)
        for (const auto& slot : s.programs[static_cast<size_t>(r)]) total += slot && drawn(slot, o) ? 1 : 0;
      if (total > rows[static_cast<size_t>(r)].size()) {
        out += "(showing the first " + std::to_string(o.max_steps) + (o.compute_only ? " compute" : "") +
               " steps of each rank)\n";
        break;
      }
    }
  }
  if (o.legend) {
    std::set<Op> ops;
    bool composite = false;
    for (const auto& p : s.programs)
      for (const auto& slot : p)
        if (slot && drawn(slot, o)) {
          collect_ops(*slot, ops);
          composite = composite || is_composite(slot->op);
        }
    std::vector<std::string> legend = {"legend: <short><micro>s<stage>"};
    for (Op op : ops) legend.push_back(std::string(info(op).short_name) + "=" + std::string(info(op).name));
    // The compute view names only what it shows: no idle slots, composites when there are some.
    if (!o.compute_only || composite) legend.push_back("[a|b]=composite");
    if (!o.compute_only) legend.push_back(".=idle");
    out += wrap_items(legend, "; ", width);
  }
  return out;
}

// The compute step a slice of the run is, or nullptr (another lane, a local step, no step).
const Step* compute_step_of(const Schedule& s, const TimedSlice& sl) {
  if (sl.lane != Lane::Compute || sl.rank < 0 || sl.rank >= s.ranks) return nullptr;
  const auto& prog = s.programs[static_cast<size_t>(sl.rank)];
  if (sl.step_index < 0 || static_cast<size_t>(sl.step_index) >= prog.size()) return nullptr;
  const Slot& slot = prog[static_cast<size_t>(sl.step_index)];
  return slot && shown_as_compute(*slot) ? &*slot : nullptr;
}

double shortest_compute_ms(const Schedule& s, const RunRecord& r) {
  double best = 0;
  for (const auto& sl : r.slices) {
    const double d = sl.end_ms - sl.start_ms;
    if (d > 0 && (best == 0 || d < best) && compute_step_of(s, sl)) best = d;
  }
  return best;
}

int64_t timeline_columns(const RunRecord& r, double unit_ms) {
  if (!(unit_ms > 0) || !(r.makespan_ms > 0)) return 0;
  // A makespan of a whole number of units gives that many columns, despite rounding.
  const double n = std::ceil(r.makespan_ms / unit_ms * (1 - 1e-12));
  if (!(n < 9.0e18)) return std::numeric_limits<int64_t>::max();
  return std::max<int64_t>(1, static_cast<int64_t>(n));
}

TimelineGrid timeline_grid(const Schedule& s, const RunRecord& r, double unit_ms) {
  TimelineGrid g;
  g.unit_ms = unit_ms;
  g.makespan_ms = r.makespan_ms;
  g.completed = r.completed;
  for (int q = 0; q < s.ranks && !g.rank_stage_in_label; ++q) g.rank_stage_in_label = s.stages_of(q).size() > 1;
  const int64_t n = timeline_columns(r, unit_ms);
  g.cells.assign(static_cast<size_t>(s.ranks), std::vector<std::string>(static_cast<size_t>(n)));
  for (const auto& sl : r.slices) {
    const Step* step = compute_step_of(s, sl);
    if (!step || !(sl.end_ms > sl.start_ms)) continue;
    ++g.compute_steps;
    // Columns k whose middle (k + 1/2) unit lies in [start, end); both ends moved by the same
    // hair, so that a step exactly one unit long always owns one middle despite rounding.
    const double a = sl.start_ms / unit_ms, b = sl.end_ms / unit_ms;
    const double eps = 1e-9;
    int64_t first = static_cast<int64_t>(std::ceil(a - 0.5 - eps));
    int64_t last = static_cast<int64_t>(std::ceil(b - 0.5 - eps)) - 1;
    if (last < first && b - a >= 1 - 1e-6) last = first;
    first = std::max<int64_t>(first, 0);
    last = std::min<int64_t>(last, n - 1);
    if (last < first) {
      ++g.hidden_steps;
      continue;
    }
    const std::string label = cell_label(*step, g.rank_stage_in_label);
    auto& row = g.cells[static_cast<size_t>(sl.rank)];
    for (int64_t k = first; k <= last; ++k)
      if (row[static_cast<size_t>(k)].empty()) row[static_cast<size_t>(k)] = label;
  }
  return g;
}

std::string render_timeline(const Schedule& s, const TimelineGrid& g, const TimelineOptions& o) {
  const size_t width = static_cast<size_t>(std::max(o.width, 20));
  const size_t columns = g.cells.empty() ? 0 : g.cells.front().size();
  std::vector<std::string> header = {header_line(s),
                                     std::to_string(s.stages) + " stages (" + std::string(to_string(s.placement.kind)) + ")",
                                     std::to_string(s.micro_batches) + " micro-batches",
                                     "simulated makespan " + fixed(g.makespan_ms, 3) + " ms" + (g.completed ? "" : " (STOPPED: deadlock)"),
                                     "one column = " + ms_text(g.unit_ms) + " ms" + (o.unit_note.empty() ? "" : " (" + o.unit_note + ")"),
                                     std::to_string(columns) + " columns"};
  if (!o.costs.empty()) header.push_back("costs: " + o.costs);
  std::string out = wrap_items(header, ", ", width, true);
  size_t cell = 1;
  for (const auto& row : g.cells)
    for (const auto& c : row) cell = std::max(cell, c.size());
  const std::string rank_w = "r" + std::to_string(std::max(0, s.ranks - 1));
  const size_t prefix = rank_w.size() + 3;
  const size_t per_block = width > prefix + cell ? std::max<size_t>(1, (width - prefix + 1) / (cell + 1)) : 1;
  for (size_t start = 0; start < columns; start += per_block) {
    const size_t end = std::min(columns, start + per_block);
    // "column 12..23 from 415.044 ms", the time left out where it does not fit the width.
    std::string block = pad("", prefix) + "column " + std::to_string(start) + (end - start > 1 ? ".." + std::to_string(end - 1) : "");
    const std::string from = " from " + fixed(static_cast<double>(start) * g.unit_ms, 3) + " ms";
    out += (block.size() + from.size() <= width ? block + from : block) + "\n";
    for (int r = 0; r < s.ranks; ++r) {
      std::string line = pad("r" + std::to_string(r), rank_w.size()) + " | ";
      const auto& row = g.cells[static_cast<size_t>(r)];
      for (size_t k = start; k < end; ++k) line += pad(row[k].empty() ? "." : row[k], cell + 1);
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
  }
  if (!g.completed)
    out += wrap_items({"(the run stopped at " + fixed(g.makespan_ms, 3) +
                       " ms in a deadlock: ppsched simulate and ppsched check say where)"},
                      "", width, true);
  if (g.hidden_steps > 0)
    out += wrap_items({"(" + std::to_string(g.hidden_steps) + " of " + std::to_string(g.compute_steps) +
                       " compute steps are shorter than a column and cover no column's middle, so they do not show: a "
                       "smaller --unit shows them)"},
                      "", width, true);
  if (o.legend) {
    std::set<Op> ops;
    bool composite = false;
    for (const auto& p : s.programs)
      for (const auto& slot : p)
        if (slot && shown_as_compute(*slot)) {
          collect_ops(*slot, ops);
          composite = composite || is_composite(slot->op);
        }
    std::vector<std::string> legend = {std::string("legend: a cell is the compute step running at the middle of its column, <short><micro>") +
                                       (g.rank_stage_in_label ? "s<stage>" : "")};
    for (Op op : ops)
      if (!is_composite(op)) legend.push_back(std::string(info(op).short_name) + "=" + std::string(info(op).name));
    if (composite) legend.push_back("[a|b]=overlapped computes");
    legend.push_back(".=no compute (idle, or waiting for a message)");
    out += wrap_items(legend, "; ", width, true);
  }
  return out;
}

std::string render_excerpt(const Schedule& s, int rank, int index, int context) {
  if (rank < 0 || rank >= s.ranks) return "";
  const auto& p = s.programs[static_cast<size_t>(rank)];
  int lo = std::max(0, index - context);
  int hi = std::min(static_cast<int>(p.size()) - 1, index + context);
  std::string out = "r" + std::to_string(rank) + " | ";
  if (lo > 0) out += "... ";
  for (int k = lo; k <= hi; ++k) {
    std::string l = p[static_cast<size_t>(k)] ? short_label(*p[static_cast<size_t>(k)]) : ".";
    out += k == index ? ">" + l + "< " : l + " ";
  }
  if (hi + 1 < static_cast<int>(p.size())) out += "...";
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string render_summary(const Schedule& s) {
  std::string out;
  for (int r = 0; r < s.ranks; ++r) {
    std::map<std::string, int> n;
    int idle = 0;
    for (const auto& slot : s.programs[static_cast<size_t>(r)]) {
      if (!slot) { ++idle; continue; }
      switch (info(slot->op).kind) {
        case StepKind::Compute: n["compute"]++; break;
        case StepKind::P2PSend: case StepKind::P2PRecv: n["p2p"]++; break;
        case StepKind::Collective: n["collective"]++; break;
        case StepKind::Local: n["local"]++; break;
        case StepKind::Composite: n["composite"]++; break;
      }
    }
    out += "r" + std::to_string(r) + ": stages";
    for (int st : s.stages_of(r)) out += " " + std::to_string(st);
    out += ";";
    for (auto& [k, v] : n) out += " " + k + " " + std::to_string(v);
    out += " idle " + std::to_string(idle) + "\n";
  }
  return out;
}

}  // namespace ppsched
