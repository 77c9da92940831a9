// Chrome Trace Event Format JSON (loads in Perfetto UI and chrome://tracing) for simulations
// and real runs: one process per rank, one thread per lane, X slices, flow arrows for P2P,
// memory counters, instant events at violations.
#pragma once

#include <string>
#include <vector>

#include "schedule/schedule.hpp"
#include "results/run_record.hpp"

namespace ppsched {

struct TraceOptions {
  // Per-rank variant for Holistic Trace Analysis: only this rank's events, with a top-level
  // "distributedInfo": {"rank": r}. -1 = one file with every rank.
  int only_rank = -1;
};

// {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}} (plus "distributedInfo"
// in the per-rank variant), written in this order: metadata (cat "__metadata": process_name
// "rank r (stages a, b)", process_sort_index, thread_name and thread_sort_index per thread
// used), X slices in r.slices order (name "F3 s1", cat = step kind, args {micro, stage,
// step_index, [sub], bytes, meta, op, [critical]}), flows (v1 "s" on the send slice, "f" with
// "bp":"e" on the receive slice, cat "p2p", name = payload kind, numeric id = index in
// r.flows + 1; the per-rank variant keeps only flows with both ends on its rank), memory
// counters ("C" named "memory", cat "memory", args {"bytes"}, per rank in time order,
// redundant samples folded), and instants ("i", cat "violation") at each violation's steps
// (scope thread) or, for a violation without steps, on its ranks (scope process). Same
// inputs, same bytes. otherData carries the record's provenance (label, source, transport,
// mode, mesh, cpu_binding, layers, notes), which traces/trace_reader.hpp reads back.
//
// A flow's start lies strictly inside its send slice, at the flow's leave_ms (else the
// slice's start) moved inside by at most 1 ns; its end strictly inside the receive slice, at
// arrive_ms (else the slice's end) likewise, or just after the receive's start when the
// payload arrived before the receive was posted. The start is never after the end (Perfetto
// drops an end it reads before the start); a flow whose slices allow no such pair (a receive
// that ended before its send began or as it began: disagreeing clocks, a zero-time transfer)
// is left out and counted in otherData.flows_left_out.
std::string chrome_trace_json(const Schedule& s, const RunRecord& r, const TraceOptions& options = {});

// Layout of the trace (shared with the SVG timeline and the tests):
//   pid = rank; tid = lane (0 compute, 1 send, 2 recv, 3 collective). Slices of one lane that
//   overlap in time (a batch's concurrent transfers, receives posted ahead under overlap_p2p)
//   go on extra threads tid = lane + kTraceLanes * k (k = 1, 2, ...), named "send #2", ..., so
//   no two slices of one (pid, tid) ever overlap and Perfetto never needs an overflow track.
//   ts/dur are whole nanoseconds written as fixed-point microseconds ("624013.178"), so a
//   slice's ts + dur equals the next one's ts exactly when they abut; a zero-length slice is
//   written 2 ns long, so that a flow end can lie strictly inside it.
inline constexpr int kTraceLanes = 5;
std::string_view lane_name(Lane lane);
// The phase a communication-stream slice ran (an MoE layer's all-to-all; StepTypeInfo::moe_phases
// of its step, or of its sub-step in a composite); nullptr for any other slice.
const Phase* slice_phase(const Step* step, const TimedSlice& sl);
// The (sub-)step a communication-stream slice's phase belongs to: its sub-step in a composite,
// else its step (nullptr: a sub-step index the composite does not have).
const Step* phase_step(const Step* step, const TimedSlice& sl);

// The step a slice shows: the sub-step for a sub-slice of a composite (slice.sub >= 0), else
// the step at slice.step_index. nullptr when the slice points outside the schedule or at an
// idle slot.
const Step* slice_step(const Schedule& s, const TimedSlice& slice);

// A slice's display name: "F3 s1", "FS3 s1", "TF2", "BCAST"; a composite joins its sub-steps'
// short labels ("B0s3|F4s1"); a shape/dtype meta message gets " meta" appended.
std::string slice_name(const Schedule& s, const TimedSlice& slice);

// Thread id of every slice of r.slices under the layout above (the trace's own assignment).
std::vector<int> trace_thread_ids(const RunRecord& r);

}  // namespace ppsched
