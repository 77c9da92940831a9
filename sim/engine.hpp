// The discrete-event simulator: replays the per-rank programs in simulated time, with the
// same lowering (lowering/comm_model.hpp) and the same verdicts as `ppsched check`.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "lowering/diagnostics.hpp"
#include "lowering/options.hpp"
#include "schedule/schedule.hpp"
#include "results/run_record.hpp"
#include "sim/cost_model.hpp"

namespace ppsched {

struct SimOptions {
  CheckOptions check;       // comm semantics (eager/rendezvous, overlap_p2p, batched MPipe recv)
  bool record_trace = true; // keep slices, flows and memory samples
  // false: the timed run alone, for a search screening candidates: RunRecord::checked is false
  // and `check` holds nothing, so a candidate the search keeps must be verified on its own.
  bool run_checks = true;
  // true: the makespan and whether the run completes, nothing else (a search's screening run):
  // no checks and no trace whatever the two flags above say, and no memory accounting, critical
  // path or link totals (the RunRecord's `checked` is false, its path and links are empty and
  // its ranks' summaries left at zero).
  bool timing_only = false;
  // TEST-ONLY: without a trace, the messages and slices below which a run keeps every message
  // state and slice (0: the engine's own, 2^16), so that a small run frees states and drops
  // slices many times over.
  size_t testing_small_run = 0;
};

// The run as a RunRecord (results/run_record.hpp), filled through a RunRecorder like a measured run.
// Throws InputError when options.check.dp cannot describe a job of s.ranks pipeline ranks.
RunRecord simulate(const Schedule& s, const CostModel& costs, const SimOptions& options = {});

}  // namespace ppsched
