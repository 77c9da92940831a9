#include "sim/engine_streams.hpp"

#include <algorithm>
#include <limits>

namespace ppsched::des {

StreamTimeline run_streams(const std::vector<std::vector<TimedPhase>>& chains, double contention) {
  StreamTimeline t;
  const size_t n = chains.size();
  std::vector<size_t> next(n, 0);
  std::vector<double> ready(n, 0.0);
  double compute_free = 0, comm_free = 0;
  int compute_owner = -1;  // the chain of the compute phase that ends at compute_free
  // The all-to-alls placed so far (their spans, in placement order: ascending on their stream).
  const auto overlap_with_comm = [&](double a, double b) {
    double o = 0;
    for (const CommSpan& c : t.comm) o += std::max(0.0, std::min(b, c.end_ms) - std::max(a, c.start_ms));
    return o;
  };
  for (;;) {
    int pick = -1;
    double best = std::numeric_limits<double>::infinity();
    bool best_comm = false;
    for (size_t k = 0; k < n; ++k) {
      if (next[k] >= chains[k].size()) continue;
      const bool comm = chains[k][next[k]].item.phase.stream == Stream::Comm;
      const double start = std::max(ready[k], comm ? comm_free : compute_free);
      if (start < best || (start == best && comm && !best_comm)) {
        pick = static_cast<int>(k);
        best = start;
        best_comm = comm;
      }
    }
    if (pick < 0) break;
    const size_t k = static_cast<size_t>(pick);
    const TimedPhase& p = chains[k][next[k]++];
    ++t.phases;
    const double start = best;
    if (best_comm) {
      const double end = start + p.ms;
      t.comm.push_back({start, end, pick, p.item});
      t.a2a_ms += p.ms;
      comm_free = end;
      ready[k] = end;
      // A compute phase already placed that runs beside it is slowed by what they overlap.
      if (compute_free > start) {
        const double extra = contention * (std::min(end, compute_free) - start);
        compute_free += extra;
        t.compute_ms += extra;
        t.slowdown_ms += extra;
        if (compute_owner >= 0) ready[static_cast<size_t>(compute_owner)] = std::max(ready[static_cast<size_t>(compute_owner)], compute_free);
      }
    } else {
      // Its length beside the all-to-alls already placed (two rounds settle it closely enough).
      double end = start + p.ms;
      for (int round = 0; round < 2; ++round) end = start + p.ms + contention * overlap_with_comm(start, end);
      const double slower = std::max(0.0, end - start - p.ms);
      end = start + p.ms + slower;
      t.compute_ms += p.ms + slower;
      t.slowdown_ms += slower;
      compute_free = end;
      compute_owner = pick;
      ready[k] = end;
    }
    t.span_ms = std::max(t.span_ms, std::max(ready[k], compute_free));
  }
  t.a2a_exposed_ms = std::clamp(t.span_ms - t.compute_ms, 0.0, t.a2a_ms);
  return t;
}

}  // namespace ppsched::des
