#include "sim/search/pareto.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace ppsched::search {

double frontier_memory(const Entry& e, MemoryRule rule) {
  double m = 0;
  if (rule == MemoryRule::Ppsched) {
    for (int64_t b : e.peak_bytes) m = std::max(m, static_cast<double>(b));
  } else {
    for (double b : e.rule_peak) m = std::max(m, b);
  }
  return m;
}

namespace {

bool nearly_equal(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(a)); }

}  // namespace

ParetoResult pareto(const TuneRequest& request, int max_searches) {
  ParetoResult out;
  const auto t0 = std::chrono::steady_clock::now();
  const bool by_span = request.settings.objective == Objective::Span;
  auto objective_of = [&](const Entry& e) { return by_span ? e.span_ms : e.makespan_ms; };
  TuneRequest rq = request;
  rq.keep_schedules = true;
  rq.keep_search_best = by_span;
  std::vector<ParetoPoint> points;  // descending cap
  while (out.searches < max_searches) {
    TuneResult r = tune(rq);
    ++out.searches;
    out.evaluations += r.evaluations;
    out.stopped_by_time = out.stopped_by_time || r.stopped_by_time;
    // The cap's best: the objective, then the other one, then the lower memory.
    int best = -1;
    for (size_t i = 0; i < r.leaderboard.size(); ++i) {
      const Entry& e = r.leaderboard[i];
      if (!e.verified) continue;
      if (best < 0) {
        best = static_cast<int>(i);
        continue;
      }
      const Entry& b = r.leaderboard[static_cast<size_t>(best)];
      const double eo = objective_of(e), bo = objective_of(b);
      const double es = by_span ? e.makespan_ms : e.span_ms, bs = by_span ? b.makespan_ms : b.span_ms;
      const bool better = !nearly_equal(eo, bo) ? eo < bo
                          : !nearly_equal(es, bs) ? es < bs
                                                  : frontier_memory(e, rq.memory_rule) < frontier_memory(b, rq.memory_rule);
      if (better) best = static_cast<int>(i);
    }
    if (best < 0) break;  // nothing fits this cap: the frontier ends
    ParetoPoint p;
    p.cap = rq.budget ? *rq.budget : kNoCap;
    p.entry = r.leaderboard[static_cast<size_t>(best)];
    p.schedule = std::move(r.schedules[static_cast<size_t>(best)]);
    p.memory = frontier_memory(p.entry, rq.memory_rule);
    p.objective = objective_of(p.entry);
    points.push_back(std::move(p));
    // Memory is a sum of whole bytes: half a byte below excludes this peak and nothing lower.
    const double next = points.back().memory - 0.5;
    if (next <= 0) break;
    rq.budget = next;
    if (out.searches == max_searches) out.truncated = true;
  }
  // Ascending memory; keep a point only when it beats every point that needs less memory.
  std::reverse(points.begin(), points.end());
  double best_so_far = kNoCap;
  for (ParetoPoint& p : points) {
    if (best_so_far < kNoCap && (p.objective > best_so_far || nearly_equal(p.objective, best_so_far))) continue;
    best_so_far = p.objective;
    out.frontier.push_back(std::move(p));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace ppsched::search
