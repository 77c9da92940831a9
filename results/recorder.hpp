// The one way a RunRecord is filled: the DES (sim/engine.cpp) and the executor's measured run
// (exec/measured_trace.cpp) both hand what happened to a RunRecorder, which numbers the flows,
// totals the links, and derives what both would otherwise compute twice: each rank's idle
// time and bubble (one definition, below), and for a measured run each rank's busy time and end.
//
// Bubble: a rank's idle time over the run's makespan, idle = makespan - busy, busy = the time
// its compute stream was occupied (a composite OVERLAP_* step counts once, for as long as it
// ran: overlapped work is busy time, not idle time).
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "results/run_record.hpp"

namespace ppsched {

class RunRecorder {
 public:
  // keep_trace false: only the totals (slices, flows and memory samples are dropped), for the
  // searches that evaluate many schedules and read the makespan alone.
  RunRecorder(RunProvenance provenance, int ranks, bool keep_trace = true);

  // Returns the slice's index (what flows refer to); -1 when the trace is not kept.
  int32_t slice(const TimedSlice& s);
  void reserve_slices(size_t n);
  const TimedSlice& slice_at(int32_t index) const { return record_.slices[static_cast<size_t>(index)]; }
  // A message from one slice to another; NaN times: not known (see MessageFlow).
  void flow(int32_t send_slice, int32_t recv_slice, double leave_ms, double arrive_ms);
  void memory(const MemorySample& m);
  // Payload bytes that crossed src -> dst, in `messages` messages.
  void link(int src, int dst, double bytes, int messages = 1);
  // The interpreter's own summary of a rank (the DES knows busy time, memory, DP time);
  // ranks without one get theirs from their slices in finish().
  void rank(const RankSummary& summary);
  void critical_path(std::vector<CriticalStep> path) { record_.critical_path = std::move(path); }
  // Everything else the interpreter knows as a whole (completed, check, steps, events, dp).
  RunRecord& header() { return record_; }

  // The record: makespan (the interpreter's, or the last slice end when negative), ranks in
  // order with idle time and bubble, links sorted by (src, dst).
  RunRecord finish(double makespan_ms = -1);

 private:
  RunRecord record_;
  int ranks_;
  bool keep_trace_;
  std::vector<bool> summarized_;
  std::map<std::pair<int, int>, LinkVolume> links_;
};

}  // namespace ppsched
