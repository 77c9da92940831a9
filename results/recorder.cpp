#include "results/recorder.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ppsched {

RunRecorder::RunRecorder(RunProvenance provenance, int ranks, bool keep_trace)
    : ranks_(std::max(0, ranks)), keep_trace_(keep_trace), summarized_(static_cast<size_t>(std::max(0, ranks)), false) {
  record_.provenance = std::move(provenance);
  record_.ranks.resize(static_cast<size_t>(ranks_));
  for (int r = 0; r < ranks_; ++r) record_.ranks[static_cast<size_t>(r)].rank = r;
}

int32_t RunRecorder::slice(const TimedSlice& s) {
  if (s.rank < 0 || s.rank >= ranks_)
    throw std::logic_error("RunRecorder: a slice of rank " + std::to_string(s.rank) + " in a run of " +
                           std::to_string(ranks_) + " ranks");
  if (!keep_trace_) return -1;
  record_.slices.push_back(s);
  return static_cast<int32_t>(record_.slices.size() - 1);
}

void RunRecorder::reserve_slices(size_t n) {
  if (keep_trace_) record_.slices.reserve(n);
}

void RunRecorder::flow(int32_t send_slice, int32_t recv_slice, double leave_ms, double arrive_ms) {
  if (!keep_trace_ || send_slice < 0 || recv_slice < 0) return;
  MessageFlow f;
  f.id = static_cast<int32_t>(record_.flows.size());
  f.send_slice = send_slice;
  f.recv_slice = recv_slice;
  f.leave_ms = leave_ms;
  f.arrive_ms = arrive_ms;
  record_.flows.push_back(f);
}

void RunRecorder::memory(const MemorySample& m) {
  if (keep_trace_) record_.memory.push_back(m);
}

void RunRecorder::link(int src, int dst, double bytes, int messages) {
  LinkVolume& l = links_[{src, dst}];
  l.src = src;
  l.dst = dst;
  l.bytes += bytes;
  l.messages += messages;
}

void RunRecorder::rank(const RankSummary& summary) {
  if (summary.rank < 0 || summary.rank >= ranks_)
    throw std::logic_error("RunRecorder: a summary of rank " + std::to_string(summary.rank));
  record_.ranks[static_cast<size_t>(summary.rank)] = summary;
  summarized_[static_cast<size_t>(summary.rank)] = true;
}

RunRecord RunRecorder::finish(double makespan_ms) {
  RunRecord& r = record_;
  // What a rank without the interpreter's summary did: its compute slices, its last slice.
  for (const TimedSlice& sl : r.slices) {
    if (summarized_[static_cast<size_t>(sl.rank)]) continue;
    RankSummary& rs = r.ranks[static_cast<size_t>(sl.rank)];
    if (sl.lane == Lane::Compute) rs.busy_ms += sl.end_ms - sl.start_ms;
    rs.end_ms = std::max(rs.end_ms, sl.end_ms);
  }
  if (makespan_ms < 0) {
    makespan_ms = 0;
    for (const TimedSlice& sl : r.slices) makespan_ms = std::max(makespan_ms, sl.end_ms);
  }
  r.makespan_ms = makespan_ms;
  r.dp_collective_ms = r.dp_exposed_ms = r.a2a_ms = r.a2a_exposed_ms = 0;
  for (RankSummary& rs : r.ranks) {
    rs.idle_ms = std::max(0.0, makespan_ms - rs.busy_ms);
    rs.bubble_fraction = makespan_ms > 0 ? rs.idle_ms / makespan_ms : 0.0;
    r.dp_collective_ms += rs.dp_collective_ms;
    r.dp_exposed_ms += rs.dp_exposed_ms;
    r.a2a_ms += rs.a2a_ms;
    r.a2a_exposed_ms += rs.a2a_exposed_ms;
  }
  r.links.clear();
  for (const auto& [key, l] : links_) r.links.push_back(l);  // the map's order: (src, dst)
  if (r.provenance.ranks == 0) r.provenance.ranks = ranks_;
  return std::move(record_);
}

}  // namespace ppsched
