// The engine's slice store: collection, the critical path and the trace's slices
// (sim/engine_slices.hpp).
#include "sim/engine_slices.hpp"

namespace ppsched::des {

void SliceStore::compact(std::vector<int32_t>& renumber) {
  int32_t kept = 0;
  for (int32_t& n : renumber)
    if (n == kKept) n = kept++;
  for (size_t k = 0; k < slices_.size(); ++k) {
    const int32_t to = renumber[k];
    if (to < 0) continue;
    Span sl = slices_[k];
    if (sl.cause >= 0) sl.cause = renumber[static_cast<size_t>(sl.cause)];
    slices_[static_cast<size_t>(to)] = sl;
  }
  slices_.shrink(static_cast<size_t>(kept));
  if (last_slice_ >= 0) last_slice_ = renumber[static_cast<size_t>(last_slice_)];
  collect_at_ = std::max(small_run_, slices_.size() + slices_.size() / 2);
}

std::vector<CriticalStep> SliceStore::critical_path() const {
  const int32_t last = last_slice_;
  // Counted first and held at its size: it is built while everything else is still held.
  size_t steps = 0;
  for (int32_t k = last; k >= 0 && steps <= slices_.size(); k = slices_[static_cast<size_t>(k)].cause) {
    ++steps;
    if (slices_[static_cast<size_t>(k)].cause >= k) break;
  }
  std::vector<CriticalStep> path;
  path.reserve(steps);
  for (int32_t k = last; k >= 0 && path.size() <= slices_.size(); k = slices_[static_cast<size_t>(k)].cause) {
    const Span& sl = slices_[static_cast<size_t>(k)];
    path.push_back({sl.rank, sl.step_index, sl.lane, sl.start_ms, sl.end_ms, sl.meta, -1});
    if (sl.cause >= k) break;  // causes always point to earlier slices
  }
  std::reverse(path.begin(), path.end());
  // A slice can begin before its cause ends (a send posted before its payload is ready);
  // on the path it counts from when its cause let it go.
  for (size_t k = 1; k < path.size(); ++k) path[k].start_ms = std::max(path[k].start_ms, path[k - 1].end_ms);
  return path;
}

void SliceStore::record(RunRecorder& rec) const {
  rec.reserve_slices(slices_.size());
  for (size_t k = 0; k < slices_.size(); ++k) {
    const Span& sp = slices_[k];
    TimedSlice sl;
    sl.rank = sp.rank;
    sl.step_index = sp.step_index;
    sl.sub = -1;  // a slice is a whole step's (a batch's sub-steps share it)
    sl.lane = sp.lane;
    sl.start_ms = sp.start_ms;
    sl.end_ms = sp.end_ms;
    sl.bytes = bytes_[k];
    sl.meta = sp.meta;
    rec.slice(sl);
  }
}

}  // namespace ppsched::des
