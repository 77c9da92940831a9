// v-half and v-min: the V-shape schedules of Qi, Wan, Amar and Lin, "Pipeline Parallelism with
// Controllable Memory" (NeurIPS'24, arXiv 2405.15362), whose activation memory is about 1/2
// (V-Half) and 1/3 (V-Min) of 1F1B's. Per-rank compute order identical to the authors' own
// generator: sail-sg/zero-bubble-pipeline-parallelism, megatron/core/pipeline_parallel/
// zerobubble/scheduler/zbv_greedy.py (PipelineGraph.create_schedule with mem_config "half" or
// "min", what runtime.py runs for --zero-bubble-v-schedule-mem-setup half|min); its outputs over
// P 2..8, M 1..4P are tests/data/controllable_memory/ and tests/test_controllable_memory.cpp
// requires identity. What follows restates the reference's rules in our words (facts, not code).
//
// Placement: V, as ZB-V. Rank r holds chunk 0 = stage r and chunk 1 = stage 2P-1-r. Six kinds of
// work per rank, indexed as the reference does: 0 F (chunk-0 forward), 1 f (chunk-1 forward),
// 2 B (chunk-1 input backward, the first backward a micro-batch meets), 3 b (chunk-0 input
// backward), 4 and 5 the weight passes of B and of b (one merged kind 4 while reordering).
//
// Time is counted in unit slots (every pass costs 1, transfers 0). The construction:
//
//  1. Building block ("stable pattern"). Each kind k of rank r gets an offset x_k in a
//     repeating period of 6 slots; micro m of kind k sits at slot x_k + 6m. The offsets are
//       v-min:  F r,   f 2P-r-1,  B 2P+d+r,     b 4P+d-r-1   with d = 2 if P % 3 == 0 else 0
//       v-half: F 2r,  f 3P-r-2,  B 3P+d+2r-1,  b 6P+d-r-2   with d = 3 if P % 2 == 0 else 0
//     (F, b) and (f, B) are a micro's two chunk passes on the way down and up; the distance from
//     a micro's F to its b is its lifespan on the rank, which is what sets peak memory.
//  2. Place weight passes ("put_w"): walk the slots 0..last; a slot holding a pass consumes it
//     (a B or b adds one pending W); a free slot takes one pending W, if any. Pending W's left
//     at the end go to the slots after the last one. Merged: one W kind, FIFO over B's and b's.
//     Split (the last step): two FIFOs, B's W preferred in a free slot; leftovers of B's W first.
//  3. Memory of a rank ("mem_of_stage"): walk the slots; F and f add 1, W subtracts 1, B and b
//     0; without placed W's, a free slot releases one pending W instead. The peak over slots.
//  4. Squeeze ("eager_execution_time" with unit costs, no latency): each pass starts as soon as
//     its rank has finished the pass before it in slot order and its inputs are there: F after
//     F of rank r-1, f after f of rank r+1 (on the last rank after its own F), B after B of
//     rank r-1 and its own f, b after b of rank r+1 and its own B, and every kind after its own
//     previous micro. Passes are visited in the global order (slot, rank, kind).
//  5. Reorder (twice): cap = the largest rank peak of step 3 before it starts. Visit the passes
//     in global (slot, rank, kind) order. Phase 0 lasts until rank 0's first b, phase 1 until
//     the last micro's F on any rank (that F included), phase 2 to the end. In phase 1 nothing
//     moves; in phase 0 passes move only in the first reorder (the one with W's placed); in
//     phase 2 always. A pass that may move takes the first free slot from "one after its latest
//     input" (inputs as in step 4; a merged W's input is the m-th backward of the rank in slot
//     order) up to its current slot under which the rank's peak stays within the cap; else it
//     stays. A slot is free when no pass visited before sits there.
//  Then: W's placed (merged), reorder 1 (moves W's too), squeeze; W's dropped, reorder 2 (W's
//  implicit in the memory count), W's placed (merged), squeeze; W's dropped, W's placed split;
//  the per-rank order is the slot order of that last placement (the reference then squeezes
//  once more with the caller's costs, which changes times but not the order).
//
// The reference accepts every P, M >= 1 (all of P 1..8, M 1..4P run).
// With F = I = W = 1 its bubble rate ((longest rank span - 6M) / longest rank span, what
// create_schedule prints) is reproduced by `ppsched simulate` (tests).
#include <algorithm>
#include <array>
#include <climits>
#include <functional>
#include <queue>
#include <string>
#include <vector>

#include "schedule/comm_insertion.hpp"
#include "schedule/errors.hpp"
#include "schedule/generators/generator.hpp"

namespace ppsched {
namespace {

enum : int { kF = 0, kFf = 1, kB = 2, kBb = 3, kW = 4, kWb = 5 };

// Slots of every pass of one rank: slots[kind][micro].
using RankSlots = std::vector<std::vector<int>>;
using Grid = std::vector<RankSlots>;  // per rank

[[noreturn]] void reference_fails(const char* family, int P, int M, const std::string& what) {
  // The reference raises here too (an assertion or an index out of range); refuse rather than
  // emit an order that is not the reference's.
  refuse(family, "the reference generator (zbv_greedy.py) fails for --pp " + std::to_string(P) + " --micro " +
                     std::to_string(M) + " (" + what + ")");
}

struct Builder {
  const char* family;
  int P, M;

  Grid stable_pattern(bool half) const {
    Grid g(static_cast<size_t>(P));
    for (int r = 0; r < P; ++r) {
      std::array<int, 4> x{};
      if (half) {
        const int d = P % 2 == 0 ? 3 : 0;
        x = {2 * r, 3 * P - r - 2, 3 * P + d + 2 * r - 1, 6 * P + d - r - 2};
      } else {
        const int d = P % 3 == 0 ? 2 : 0;
        x = {r, 2 * P - r - 1, 2 * P + d + r, 4 * P + d - r - 1};
      }
      RankSlots& rs = g[static_cast<size_t>(r)];
      rs.assign(4, {});
      for (int k = 0; k < 4; ++k)
        for (int m = 0; m < M; ++m) rs[static_cast<size_t>(k)].push_back(x[static_cast<size_t>(k)] + 6 * m);
    }
    return g;
  }

  // The last slot of a kind (its last micro), the reference's notion of a rank's bound.
  static int bound_of(const RankSlots& rs, size_t kinds) {
    int b = INT_MIN;
    for (size_t k = 0; k < kinds; ++k) b = std::max(b, rs[k].back());
    return b;
  }

  // Kind whose next pass comes first (lowest kind on a tie); -1 when all are used up.
  static int next_kind(const RankSlots& rs, const std::vector<size_t>& at, size_t kinds, int& slot) {
    int best = -1;
    slot = INT_MAX;
    for (size_t k = 0; k < kinds; ++k)
      if (at[k] < rs[k].size() && rs[k][at[k]] < slot) {
        slot = rs[k][at[k]];
        best = static_cast<int>(k);
      }
    return best;
  }

  // Step 2: W's into the free slots (merged: one kind 4; split: kinds 4 and 5).
  RankSlots place_weights(RankSlots rs, bool split) const {
    rs.resize(4);
    const int bound = bound_of(rs, 4);
    rs.emplace_back();
    if (split) rs.emplace_back();
    std::array<int, 2> pending{0, 0};
    std::vector<size_t> at(4, 0);
    int i = 0;
    for (; i <= bound; ++i) {
      int slot = 0;
      const int k = next_kind(rs, at, 4, slot);
      if (k < 0) reference_fails(family, P, M, "no pass left before the last slot");
      if (slot == i) {
        ++at[static_cast<size_t>(k)];
        if (k == kB || k == kBb) ++pending[split ? static_cast<size_t>(k - kB) : 0];
        continue;
      }
      for (size_t w = 0; w < 2; ++w)
        if (pending[w] > 0) {
          rs[4 + w].push_back(i);
          --pending[w];
          break;
        }
    }
    --i;  // the reference's loop variable ends at the bound
    for (size_t w = 0; w < 2; ++w)
      while (pending[w] > 0) {
        rs[4 + w].push_back(++i);
        --pending[w];
      }
    return rs;
  }

  // Step 3: the peak of live chunk activations over the rank's slots.
  int peak_memory(const RankSlots& rs) const {
    static constexpr std::array<int, 5> delta = {1, 1, 0, 0, -1};
    const size_t kinds = rs.size();
    const bool has_w = kinds > 4;
    const int bound = bound_of(rs, kinds);
    std::vector<size_t> at(kinds, 0);
    int pending = 0, cur = 0, peak = 0;
    for (int i = 0; i <= bound; ++i) {
      int slot = 0;
      const int k = next_kind(rs, at, kinds, slot);
      if (k < 0) reference_fails(family, P, M, "no pass left before the last slot");
      if (slot == i) {
        ++at[static_cast<size_t>(k)];
        cur += delta[static_cast<size_t>(k)];
        if (k == kB || k == kBb) ++pending;
      } else if (!has_w && pending > 0) {
        --cur;
        --pending;
      }
      peak = std::max(peak, cur);
    }
    return peak;
  }

  // Visits every pass of the grid in the reference's global order (slot, rank, kind) and calls
  // visit(rank, kind, micro, slot) for each. A visit may move the pass it is given (never one
  // not yet visited), so a heap of each (rank, kind)'s next pass gives the same order.
  template <class Visit>
  void in_global_order(const Grid& g, size_t kinds, Visit visit) const {
    using Head = std::array<int, 3>;  // slot, rank, kind
    std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads;
    std::vector<std::vector<size_t>> at(g.size(), std::vector<size_t>(kinds, 0));
    for (size_t r = 0; r < g.size(); ++r)
      for (size_t k = 0; k < kinds; ++k)
        if (!g[r][k].empty()) heads.push({g[r][k][0], static_cast<int>(r), static_cast<int>(k)});
    while (!heads.empty()) {
      const auto [slot, rank, kind] = heads.top();
      heads.pop();
      const size_t r = static_cast<size_t>(rank), k = static_cast<size_t>(kind);
      const int micro = static_cast<int>(at[r][k]++);
      visit(rank, kind, micro, slot);
      if (at[r][k] < g[r][k].size()) heads.push({g[r][k][at[r][k]], rank, kind});
    }
  }

  // Step 4: unit-cost as-soon-as-possible start slots of the grid's per-rank slot order.
  Grid squeeze(const Grid& g) const {
    const size_t kinds = g[0].size();
    constexpr int kUnset = INT_MIN;
    Grid end(g.size());
    for (size_t r = 0; r < g.size(); ++r) {
      end[r].resize(kinds);
      for (size_t k = 0; k < kinds; ++k) end[r][k].assign(g[r][k].size(), kUnset);
    }
    std::vector<int> last_end(g.size(), kUnset);
    auto need = [&](int r, int k, int m) {
      const int e = end[static_cast<size_t>(r)][static_cast<size_t>(k)][static_cast<size_t>(m)];
      if (e == kUnset) reference_fails(family, P, M, "an input visited after its consumer");
      return e;
    };
    in_global_order(g, kinds, [&](int r, int k, int m, int) {
      int t = 0;
      if ((k == kF || k == kB) && r > 0) t = std::max(t, need(r - 1, k, m));
      if ((k == kFf || k == kBb) && r + 1 < P) t = std::max(t, need(r + 1, k, m));
      if (k > 0 && k < 4) t = std::max(t, need(r, k - 1, m));
      if (m > 0) t = std::max(t, need(r, k, m - 1));
      if (last_end[static_cast<size_t>(r)] != kUnset) t = std::max(t, last_end[static_cast<size_t>(r)]);
      end[static_cast<size_t>(r)][static_cast<size_t>(k)][static_cast<size_t>(m)] = t + 1;
      last_end[static_cast<size_t>(r)] = t + 1;
    });
    for (auto& rs : end)
      for (auto& v : rs)
        for (int& x : v) x -= 1;  // start = end - cost
    return end;
  }

  // Step 5.
  Grid reorder(Grid g, bool with_weights) const {
    if (with_weights)
      for (RankSlots& rs : g) rs = place_weights(std::move(rs), false);
    const size_t kinds = g[0].size();
    int cap = 0;
    for (const RankSlots& rs : g) cap = std::max(cap, peak_memory(rs));
    std::vector<std::vector<bool>> taken(g.size());
    for (size_t r = 0; r < g.size(); ++r) taken[r].assign(static_cast<size_t>(g[r].back().back()) + 1, false);
    auto take = [&](int r, int slot) {
      auto& t = taken[static_cast<size_t>(r)];
      if (slot < 0 || static_cast<size_t>(slot) >= t.size()) reference_fails(family, P, M, "a slot past the last backward");
      t[static_cast<size_t>(slot)] = true;
    };
    int phase = 0;
    // The reference picks each next pass from the current slots; only the pass being visited
    // moves, so in_global_order's heap of next passes (reading `g` live) keeps its order.
    in_global_order(g, kinds, [&](int r, int k, int m, int slot) {
      if (k == kBb && r == 0 && phase == 0) phase = 1;
      if (phase == 1) {
        if (k == kF && m == M - 1) phase = 2;
        take(r, slot);
        return;
      }
      if (phase == 0 && !with_weights) {
        take(r, slot);
        return;
      }
      RankSlots& rs = g[static_cast<size_t>(r)];
      auto at = [&](int rank, int kind, int micro) {
        return g[static_cast<size_t>(rank)][static_cast<size_t>(kind)][static_cast<size_t>(micro)];
      };
      int earliest = -1;
      if ((k == kF || k == kB) && r > 0) earliest = std::max(earliest, at(r - 1, k, m));
      if ((k == kFf || k == kBb) && r + 1 < P) earliest = std::max(earliest, at(r + 1, k, m));
      if (k > 0 && k < 4) earliest = std::max(earliest, at(r, k - 1, m));
      if (k == kW) {  // a merged W waits for the m-th backward of the rank
        std::vector<int> backwards = rs[kB];
        backwards.insert(backwards.end(), rs[kBb].begin(), rs[kBb].end());
        std::sort(backwards.begin(), backwards.end());
        earliest = std::max(earliest, backwards[static_cast<size_t>(m)]);
      }
      if (m > 0) earliest = std::max(earliest, at(r, k, m - 1));
      ++earliest;
      if (earliest > slot) reference_fails(family, P, M, "a pass before its input");
      int& mine = rs[static_cast<size_t>(k)][static_cast<size_t>(m)];
      bool moved = false;
      const auto& t = taken[static_cast<size_t>(r)];
      for (int s = earliest; s < slot; ++s) {
        if (t[static_cast<size_t>(s)]) continue;
        mine = s;
        if (peak_memory(rs) <= cap) {
          moved = true;
          break;
        }
      }
      if (!moved) mine = slot;
      take(r, mine);
    });
    if (!with_weights)
      for (RankSlots& rs : g) rs = place_weights(std::move(rs), false);
    return squeeze(g);
  }

  static Grid drop_weights(Grid g) {
    for (RankSlots& rs : g) rs.resize(4);
    return g;
  }

  // The per-rank compute order.
  Schedule build(bool half) const {
    Grid g = reorder(stable_pattern(half), true);
    g = reorder(drop_weights(std::move(g)), false);
    g = drop_weights(std::move(g));
    for (RankSlots& rs : g) rs = place_weights(std::move(rs), true);

    Schedule s;
    s.name = family;
    s.ranks = P;
    s.stages = 2 * P;
    s.micro_batches = M;
    s.placement = Placement::v(P, 2 * P);
    s.programs.assign(static_cast<size_t>(P), Program{});
    for (int r = 0; r < P; ++r) {
      const RankSlots& rs = g[static_cast<size_t>(r)];
      struct Pass {
        int slot, kind, micro;
      };
      std::vector<Pass> passes;
      for (size_t k = 0; k < rs.size(); ++k)
        for (size_t m = 0; m < rs[k].size(); ++m) passes.push_back({rs[k][m], static_cast<int>(k), static_cast<int>(m)});
      std::sort(passes.begin(), passes.end(), [](const Pass& a, const Pass& b) {
        return a.slot != b.slot ? a.slot < b.slot : a.kind < b.kind;
      });
      const int chunk0 = r, chunk1 = 2 * P - 1 - r;
      static constexpr std::array<Op, 6> op = {Op::FWD, Op::FWD, Op::BWD_INPUT, Op::BWD_INPUT, Op::BWD_WEIGHT, Op::BWD_WEIGHT};
      static constexpr std::array<int, 6> on_chunk1 = {0, 1, 1, 0, 1, 0};
      Program& prog = s.programs[static_cast<size_t>(r)];
      for (const Pass& p : passes)
        prog.push_back(make_step(op[static_cast<size_t>(p.kind)], p.micro, on_chunk1[static_cast<size_t>(p.kind)] ? chunk1 : chunk0));
    }
    return insert_p2p(std::move(s), Alignment::Auto);
  }
};

Schedule generate(const char* family, const GenerateOptions& o, bool half) {
  if (o.vpp != 2)
    refuse(family, "needs exactly two stages per rank (--vpp 2, V placement: stage r and stage 2P-1-r on rank r), got --vpp " +
                       std::to_string(o.vpp));
  return Builder{family, o.pp, o.micro}.build(half);
}

}  // namespace

Schedule generate_v_half(const GenerateOptions& o) { return generate("v-half", o, true); }
Schedule generate_v_min(const GenerateOptions& o) { return generate("v-min", o, false); }

}  // namespace ppsched
