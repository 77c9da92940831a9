#include "sim/engine_streams.hpp"

#include <algorithm>
#include <limits>

namespace ppsched::des {

StreamTimeline run_streams(const std::vector<std::vector<TimedPhase>>& chains_in, double contention) {
  StreamTimeline t;
  // Each chain's phases split: the chain proper, and the phases beside it (PhaseItem::beside:
  // delayed weight gradients), each after the chain phase listed before it; a chain's last
  // phase when it is beside (the weight gradients of the backward's last layer) after every
  // chain phase of the step (Megatron runs them after the step's P2P hook).
  const size_t n_chains = chains_in.size();
  std::vector<std::vector<TimedPhase>> chains(n_chains);
  struct Beside {
    size_t chain;
    TimedPhase phase;
    long after;  // the chain phases of `chain` placed before it may start; -1: every chain's
  };
  std::vector<Beside> beside;
  for (size_t k = 0; k < n_chains; ++k)
    for (size_t i = 0; i < chains_in[k].size(); ++i) {
      const TimedPhase& ph = chains_in[k][i];
      if (!ph.item.beside) {
        chains[k].push_back(ph);
        continue;
      }
      const bool last = i + 1 == chains_in[k].size();
      beside.push_back({k, ph, last ? -1 : static_cast<long>(chains[k].size())});
    }
  const size_t n = n_chains;
  std::vector<size_t> next(n, 0);
  std::vector<double> ready(n, 0.0);
  std::vector<std::vector<double>> ends(n);  // per chain: each placed chain phase's end
  size_t next_beside = 0;
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
    // The next phase beside the chains (in listing order), once what it follows has ended; at a
    // tie with a chain's compute phase it goes first (it is listed first on the compute stream).
    bool side = false;
    if (next_beside < beside.size()) {
      const Beside& b = beside[next_beside];
      bool can = true;
      double after = 0;
      if (b.after < 0) {
        for (size_t k = 0; k < n; ++k) can = can && next[k] >= chains[k].size();
        for (size_t k = 0; k < n; ++k) after = std::max(after, ready[k]);
      } else {
        const auto& e = ends[b.chain];
        can = static_cast<long>(e.size()) >= b.after;
        if (can && b.after > 0) after = e[static_cast<size_t>(b.after - 1)];
      }
      if (can) {
        const double start = std::max(after, compute_free);
        if (pick < 0 || start < best || (start == best && !best_comm)) {
          side = true;
          pick = static_cast<int>(b.chain);
          best = start;
          best_comm = false;
        }
      }
    }
    if (pick < 0) break;
    const size_t k = static_cast<size_t>(pick);
    const TimedPhase& p = side ? beside[next_beside++].phase : chains[k][next[k]++];
    ++t.phases;
    const double start = best;
    if (best_comm) {
      const double end = start + p.ms;
      t.comm.push_back({start, end, pick, p.item});
      t.a2a_ms += p.ms;
      comm_free = end;
      ready[k] = end;
      ends[k].push_back(end);
      // A compute phase already placed that runs beside it is slowed by what they overlap.
      if (compute_free > start) {
        const double extra = contention * (std::min(end, compute_free) - start);
        compute_free += extra;
        t.compute_ms += extra;
        t.slowdown_ms += extra;
        if (compute_owner >= 0) {
          const size_t o = static_cast<size_t>(compute_owner);
          ready[o] = std::max(ready[o], compute_free);
          if (!ends[o].empty()) ends[o].back() = ready[o];
        }
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
      if (side) {
        compute_owner = -1;  // nothing in a chain waits for it
      } else {
        compute_owner = pick;
        ready[k] = end;
        ends[k].push_back(end);
      }
    }
    t.span_ms = std::max(t.span_ms, std::max(ready[k], compute_free));
  }
  t.a2a_exposed_ms = std::clamp(t.span_ms - t.compute_ms, 0.0, t.a2a_ms);
  return t;
}

}  // namespace ppsched::des
