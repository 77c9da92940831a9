// `ppsched tune --pareto`: the memory/makespan frontier of a pipeline shape, i.e. the best
// makespan (or span) for each memory cap, as the controllable-memory paper (Qi et al.,
// NeurIPS'24) and its v_auto_schedule.py report it for V-shape schedules.
//
// The epsilon-constraint method over tune(): search under the budget, take the best verified
// candidate, then search again with a cap just below that candidate's peak memory, until no
// candidate fits. Each step is an ordinary tune() (families, list scheduler, local search, DES),
// so every point is a verified schedule and the search is deterministic for a seed when no
// --seconds limit stops it. A point that a later, lower-memory point matches or beats is
// dominated and dropped, so the frontier is strictly decreasing in memory and strictly
// increasing in the objective.
#pragma once

#include <optional>
#include <vector>

#include "sim/search/tune.hpp"

namespace ppsched::search {

struct ParetoPoint {
  double cap = 0;        // the cap this point was searched under (bytes; kNoCap: none)
  double memory = 0;     // its peak memory, the highest rank's (bytes, by the request's rule)
  double objective = 0;  // DES makespan or span (ms), as the request's objective says
  Entry entry;
  Schedule schedule;
};

struct ParetoResult {
  std::vector<ParetoPoint> frontier;  // ascending memory (so descending objective)
  int searches = 0;                   // tune() runs
  long evaluations = 0;
  double seconds = 0;
  bool stopped_by_time = false;       // some tune() run was cut by --seconds
  bool truncated = false;             // stopped at max_searches with candidates still fitting
};

// The memory the frontier counts for an entry: ppsched's DES peak, or the rule's peak.
double frontier_memory(const Entry& e, MemoryRule rule);

// Runs tune() under request.budget (or the model's capacity; none: unbounded), then under ever
// lower caps; at most `max_searches` runs. The objective picks each cap's best: Makespan (the
// DES makespan, ties to the lower memory) or Span (the longest rank span, then makespan).
ParetoResult pareto(const TuneRequest& request, int max_searches);

}  // namespace ppsched::search
