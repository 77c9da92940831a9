#include "sim/search/repair.hpp"

#include <algorithm>
#include <chrono>
#include <set>

namespace ppsched::search {
namespace {

using Clock = std::chrono::steady_clock;

void apply_in_place(Schedule& s, const Move& m) {
  auto& prog = s.programs[static_cast<size_t>(m.rank)];
  Slot x = std::move(prog[static_cast<size_t>(m.from)]);
  prog.erase(prog.begin() + m.from);
  prog.insert(prog.begin() + m.to, std::move(x));
}

bool in_scope(ViolationKind k) {
  return k == ViolationKind::Deadlock || k == ViolationKind::P2PMismatch || k == ViolationKind::Dependency ||
         k == ViolationKind::CacheViolation;
}

// The steps worth moving: the ones the violations locate, and their rank neighbours (a step
// in the way of the located one is often the one to move).
std::vector<std::pair<int, int>> suspects(const Schedule& s, const CheckReport& rep) {
  std::set<std::pair<int, int>> out;
  for (const Violation& v : rep.violations)
    for (const StepRef& ref : v.steps) {
      if (ref.rank < 0 || ref.index < 0) continue;
      const int n = static_cast<int>(s.programs[static_cast<size_t>(ref.rank)].size());
      for (int d = -2; d <= 2; ++d) {
        const int i = ref.index + d;
        if (i >= 0 && i < n && s.programs[static_cast<size_t>(ref.rank)][static_cast<size_t>(i)]) out.insert({ref.rank, i});
      }
    }
  return {out.begin(), out.end()};
}

// Every move of a suspect, shortest first (ties: by rank, index, direction).
std::vector<Move> moves_of(const Schedule& s, const std::vector<std::pair<int, int>>& sus) {
  std::vector<Move> out;
  for (auto [r, i] : sus) {
    const int n = static_cast<int>(s.programs[static_cast<size_t>(r)].size());
    for (int j = 0; j < n; ++j)
      if (j != i) out.push_back({r, i, j});
  }
  std::stable_sort(out.begin(), out.end(), [](const Move& a, const Move& b) {
    return std::abs(a.from - a.to) < std::abs(b.from - b.to);
  });
  return out;
}

size_t weight(const CheckReport& r) {
  size_t n = 0;
  for (const Violation& v : r.violations) n += 1 + v.steps.size();
  return n;
}

}  // namespace

Schedule apply_move(const Schedule& s, const Move& m) {
  Schedule out = s;
  apply_in_place(out, m);
  return out;
}

Repair suggest_repair(const Schedule& s, const CheckOptions& check, const RepairOptions& opt) {
  Repair res;
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  const CheckReport first = verify(s, check);
  res.candidates = 1;
  if (first.ok()) {
    res.already_ok = true;
    res.seconds = elapsed();
    return res;
  }
  for (const Violation& v : first.violations)
    if (!in_scope(v.kind)) {
      res.why_not = std::string("a ") + std::string(to_string(v.kind)) + " violation is not repaired by moving steps";
      res.seconds = elapsed();
      return res;
    }
  // Best-first by (moves, total distance): all single moves in distance order first; the
  // first that verifies is the answer. Otherwise second moves from the single moves that left
  // fewer violations behind, and the pair with the least total distance wins.
  struct Partial {
    Move m;
    Schedule s;
    CheckReport rep;
  };
  std::vector<Partial> promising;
  const size_t base = weight(first);
  for (const Move& m : moves_of(s, suspects(s, first))) {
    if (elapsed() > opt.seconds) {
      res.out_of_time = true;
      break;
    }
    Schedule c = apply_move(s, m);
    CheckReport rep = verify(c, check);
    ++res.candidates;
    if (rep.ok()) {
      res.found = true;
      res.moves = {m};
      res.fixed = std::move(c);
      res.seconds = elapsed();
      return res;
    }
    if (opt.max_moves >= 2 && weight(rep) < base && promising.size() < 64) promising.push_back({m, std::move(c), std::move(rep)});
  }
  if (opt.max_moves >= 2) {
    int best_cost = -1;
    for (const Partial& p : promising) {
      const int d1 = std::abs(p.m.from - p.m.to);
      if (best_cost >= 0 && d1 + 1 >= best_cost) continue;
      for (const Move& m : moves_of(p.s, suspects(p.s, p.rep))) {
        const int cost = d1 + std::abs(m.from - m.to);
        if (best_cost >= 0 && cost >= best_cost) break;  // moves come shortest first
        if (elapsed() > opt.seconds) {
          res.out_of_time = true;
          break;
        }
        Schedule c = apply_move(p.s, m);
        CheckReport rep = verify(c, check);
        ++res.candidates;
        if (rep.ok()) {
          best_cost = cost;
          res.found = true;
          res.moves = {p.m, m};
          res.fixed = std::move(c);
          break;
        }
      }
      if (res.out_of_time) break;
    }
  }
  if (!res.found)
    res.why_not = res.out_of_time ? "no fix found within the time budget"
                                  : "no edit of at most " + std::to_string(opt.max_moves) +
                                        " moves of the located steps makes it verify";
  res.seconds = elapsed();
  return res;
}

std::string repair_excerpt(const Schedule& before, const Repair& r, int context) {
  std::string out;
  Schedule cur = before;
  for (const Move& m : r.moves) {
    Schedule next = apply_move(cur, m);
    auto line = [&](const Schedule& s, int centre) {
      const auto& prog = s.programs[static_cast<size_t>(m.rank)];
      const int lo = std::max(0, std::min(m.from, m.to) - context);
      const int hi = std::min(static_cast<int>(prog.size()) - 1, std::max(m.from, m.to) + context);
      std::string l = lo > 0 ? "... " : "";
      for (int i = lo; i <= hi; ++i) {
        const std::string lab = prog[static_cast<size_t>(i)] ? short_label(*prog[static_cast<size_t>(i)]) : ".";
        l += (i == centre ? ">" + lab + "<" : lab) + (i < hi ? " " : "");
      }
      if (hi + 1 < static_cast<int>(prog.size())) l += " ...";
      return l;
    };
    const auto& prog = cur.programs[static_cast<size_t>(m.rank)];
    out += "  move " + (prog[static_cast<size_t>(m.from)] ? short_label(*prog[static_cast<size_t>(m.from)]) : ".") + " on rank " +
           std::to_string(m.rank) + " from step " + std::to_string(m.from) + " to step " + std::to_string(m.to) + "\n";
    out += "    before r" + std::to_string(m.rank) + " | " + line(cur, m.from) + "\n";
    out += "    after  r" + std::to_string(m.rank) + " | " + line(next, m.to) + "\n";
    cur = std::move(next);
  }
  return out;
}

}  // namespace ppsched::search
