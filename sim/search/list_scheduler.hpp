// A general per-rank list scheduler over F / B or F / I / W (one or several stages per rank,
// loop or V placement). It simulates the ranks in time order; whenever a rank is free it picks
// the next task by tunable priorities, never letting a forward take the rank over its memory cap
// (bytes from the cost model, or ZB's activation units) and deferring weight passes by policy.
// Each stage runs each task kind in micro order, as every built-in family and ZB do.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sim/search/problem.hpp"

namespace ppsched::search {

enum class WPolicy : uint8_t {
  Immediate,  // W right after its I (the split backward run back to back)
  Fill,       // W whenever no F or B is ready (and always when memory needs it)
  FitFill,    // W only when it ends before the next known F/B arrival (+ slack), or memory needs it
  Late,       // W only when memory needs it or the rank has no F/B left
};

struct ListParams {
  // Forwards in flight (run, backward not yet) on rank r: at most scale * (P - r) + extra, plus
  // (V - 1) * P with several stages per rank; at least 1.
  int inflight_scale = 1;
  int inflight_extra = 0;
  bool forward_first = false;   // F before B when both are ready (fills the pipe deeper)
  bool deep_forward = true;     // several stages per rank: the ready F of the highest stage first
  bool deep_backward = false;   // ... and the ready B of the highest stage first
  // Forwards beyond 1F1B's P - r in flight only when they end before the next backward can
  // arrive (its earliest time from what has run), plus f_slack forwards of overshoot (ZB's
  // warm-up rule, schedule_search.md §3 step 1).
  bool forward_fit = false;
  double f_slack = 0;
  // Several stages per rank: a forward on the rank's first stage admits a micro only if the cap
  // also leaves room for its forwards on the rank's later stages (reserved until they run), so
  // an admitted micro can always go on (ZB-V's rule, schedule/generators/zero_bubble.cpp).
  bool reserve = false;
  // The lighter form: a forward on the rank's first stage admits a micro only if the cap leaves
  // room for it and for one more forward of a later local stage, so that the oldest admitted
  // micro can always go on (the controllable-memory schedules run at their cap this way).
  bool reserve_one = false;
  WPolicy w_policy = WPolicy::Fill;
  double w_slack = 0;           // FitFill: a W may overshoot the next arrival by this many W's
  // FitFill: a W that would overshoot the next arrival still runs when the wait is longer than
  // the rank's idle allowance, the most idle any rank has accumulated minus its own (ZB's
  // rule, schedule_search.md §3 step 2c): idle is spread over the ranks instead of piling up.
  bool w_balance = false;
  std::string describe() const;
};

// nullopt when the priorities lead nowhere (every rank waiting: the memory cap is too small for
// them).
std::optional<Order> list_schedule(const Problem& p, const ListParams& params);

// The parameter space `ppsched tune` sweeps for a problem, in a fixed order.
std::vector<ListParams> list_parameter_space(const Problem& p);

}  // namespace ppsched::search
