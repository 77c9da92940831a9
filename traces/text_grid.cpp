#include "traces/text_grid.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace ppsched {
namespace {

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s : s + std::string(w - s.size(), ' '); }

std::vector<std::string> row_labels(const Program& p, const GridOptions& o) {
  std::vector<std::string> out;
  for (const auto& slot : p) {
    if (o.max_steps >= 0 && static_cast<int>(out.size()) >= o.max_steps) break;
    if (slot) out.push_back(short_label(*slot));
    else if (o.keep_idle) out.push_back(".");
  }
  return out;
}

// Items joined by `sep` into lines of at most `width` characters (an item longer than a line
// gets one of its own); continuation lines start with two spaces.
std::string wrap_items(const std::vector<std::string>& items, const std::string& sep, size_t width) {
  std::string out, line;
  for (size_t k = 0; k < items.size(); ++k) {
    const std::string piece = items[k] + (k + 1 < items.size() ? sep : "");
    std::string trimmed = piece;
    while (!trimmed.empty() && trimmed.back() == ' ') trimmed.pop_back();
    if (!line.empty() && line.size() + trimmed.size() > width) {
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
  for (const auto& sub : st.sub_steps) collect_ops(sub, ops);
}

}  // namespace

std::string render_grid(const Schedule& s, const GridOptions& o) {
  const size_t width = static_cast<size_t>(std::max(o.width, 20));
  std::vector<std::string> header = {
      (s.name.empty() ? std::string("schedule") : s.name) + ": " + std::to_string(s.ranks) + " ranks",
      std::to_string(s.stages) + " stages (" + std::string(to_string(s.placement.kind)) + ")",
      std::to_string(s.micro_batches) + " micro-batches"};
  if (s.mpipe)
    header.push_back("mpipe " + std::string(to_string(s.mpipe->overflow)) + "/" + std::string(to_string(s.mpipe->tower)) +
                     (s.mpipe->owner_backward ? "/owner-backward" : ""));
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
    out += pad("", prefix) + "step " + std::to_string(start) + (end - start > 1 ? ".." + std::to_string(end - 1) : "") + "\n";
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
      size_t total = o.keep_idle ? s.programs[static_cast<size_t>(r)].size() : 0;
      if (!o.keep_idle)
        for (const auto& slot : s.programs[static_cast<size_t>(r)]) total += slot ? 1 : 0;
      if (total > rows[static_cast<size_t>(r)].size()) {
        out += "(showing the first " + std::to_string(o.max_steps) + " steps of each rank)\n";
        break;
      }
    }
  }
  if (o.legend) {
    std::set<Op> ops;
    for (const auto& p : s.programs)
      for (const auto& slot : p)
        if (slot) collect_ops(*slot, ops);
    std::vector<std::string> legend = {"legend: <short><micro>s<stage>"};
    for (Op op : ops) legend.push_back(std::string(info(op).short_name) + "=" + std::string(info(op).name));
    legend.push_back("[a|b]=composite");
    legend.push_back(".=idle");
    out += wrap_items(legend, "; ", width);
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
