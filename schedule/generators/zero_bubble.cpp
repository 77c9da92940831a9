// Zero-bubble families: zb-h1 (ZB-H1), zbv (the published ZB-V) and zbv-greedy (our own
// memory-capped list scheduler on the same V placement).
//
// Both come from Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR'24; reference
// pytorch_and_peers.md §5). The idea: split a stage's backward into BWD_INPUT (I, the input
// gradient, which the previous stage waits for) and BWD_WEIGHT (W, the weight gradient,
// which nobody waits for), and move the W passes into what would otherwise be bubbles.
//
// Each generator only decides the compute order of every rank; insert_p2p (Auto alignment)
// then places every step at the earliest column its inputs allow and adds the FWD/BWD sends
// and receives, deadlock-free by construction. With Auto alignment a column is one unit of
// time when F = I = W = 1, so the resulting grid is the unit-cost timeline of the order.
#include <algorithm>
#include <array>
#include <climits>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedule/comm_insertion.hpp"
#include "schedule/generators/generator.hpp"

namespace ppsched {
namespace {

Schedule empty_schedule(const char* name, int ranks, int stages, int micro, Placement placement) {
  Schedule s;
  s.name = name;
  s.ranks = ranks;
  s.stages = stages;
  s.micro_batches = micro;
  s.placement = std::move(placement);
  s.programs.assign(static_cast<size_t>(ranks), Program{});
  return s;
}

// ---------------------------------------------------------------------------------------
// zbv-greedy: a list scheduler on ZB-V's placement (not the published ZB-V; see zbv below).
//
// Rank r holds chunk 0 = stage r and chunk 1 = stage 2P-1-r (V placement), so a micro-batch
// goes down the ranks on chunk 0 and back up on chunk 1; its backward runs the reverse way.
// The ZB authors build ZB-V with a greedy list scheduler (zbv.py, try_v_schedule; reference
// §5); this one follows the same idea with our own, simpler policy:
//
//   * time advances in unit steps (F = I = W = 1); at every step each idle rank looks at the
//     work whose inputs finished by now and takes the first ready item in its priority list:
//     the four kinds I-chunk1, I-chunk0, F-chunk1, F-chunk0 in some order, then W (oldest
//     pending first). So W never delays an I or an F: it only fills what would be a bubble,
//     or frees memory when the cap below blocks every forward.
//   * memory cap: a rank may hold at most 2P live micro-batch-chunks (FWD done, W not yet;
//     the paper's cap, equal to 1F1B's peak activation memory since a chunk is half a
//     stage). A chunk-0 forward admits a new micro-batch and is taken only if the cap leaves
//     room for it AND for its later chunk-1 forward (live + admitted-not-yet-on-chunk-1 + 2
//     <= 2P). The chunk-1 forward of an admitted micro-batch is then always allowed, and
//     the peak never exceeds the cap. The reservation keeps every admitted micro-batch able
//     to finish, which is what keeps the greedy from stalling (a step without progress
//     throws; the tests sweep P <= 12, M <= 40).
//   * within a chunk, forwards and input backwards run in micro-batch order (0, 1, ...), and
//     W's in the order of their I's.
//
// As zbv.py does with its fill variants, the scheduler runs once for each of the 24 orders of
// the four kinds and keeps the shortest makespan (the first such order on a tie; the first
// order tried is I1, I0, F1, F0: backwards first, the later chunk first). The emitted order
// per rank is the timeline's order; insert_p2p recomputes the columns and can only make
// them earlier. Every step waits only for steps that finished strictly earlier in the
// simulation, so the order has no dependency cycle.
// ---------------------------------------------------------------------------------------

enum Kind : int { kI1 = 0, kI0 = 1, kF1 = 2, kF0 = 3 };

struct ZbvResult {
  int makespan = INT_MAX;
  std::vector<std::vector<Step>> order;  // per rank
};

ZbvResult simulate_zbv(int P, int M, const std::array<int, 4>& priority) {
  const int S = 2 * P;
  const int cap = 2 * P;
  constexpr int kNotYet = INT_MAX;
  auto key = [M](int stage, int micro) {
    return static_cast<size_t>(stage) * static_cast<size_t>(M) + static_cast<size_t>(micro);
  };
  std::vector<int> f_end(static_cast<size_t>(S) * static_cast<size_t>(M), kNotYet);  // time F finished
  std::vector<int> i_end(f_end.size(), kNotYet);                                   // time I finished

  struct RankState {
    std::array<int, 2> next_f{0, 0};  // next micro to forward, per chunk
    std::array<int, 2> next_i{0, 0};  // next micro to run the input backward of, per chunk
    std::deque<std::array<int, 2>> pending_w;  // (stage, micro) whose I ran, W not yet
    int live = 0;      // FWD done, W not done (micro-batch-chunks)
    int admitted = 0;  // chunk-0 FWD done, chunk-1 FWD not yet
  };
  std::vector<RankState> ranks(static_cast<size_t>(P));

  ZbvResult out;
  out.order.assign(static_cast<size_t>(P), {});
  long remaining = 6L * P * M;  // F, I, W for 2 chunks x M micros on each rank
  int t = 0;
  while (remaining > 0) {
    bool any = false;
    for (int r = 0; r < P; ++r) {
      RankState& st = ranks[static_cast<size_t>(r)];
      const std::array<int, 2> stage = {r, S - 1 - r};
      // Whether work of `kind` can start at time t; sets `micro`.
      auto ready = [&](int kind, int& micro) {
        const int c = (kind == kI1 || kind == kF1) ? 1 : 0;
        const int s = stage[static_cast<size_t>(c)];
        if (kind == kF0 || kind == kF1) {
          micro = st.next_f[static_cast<size_t>(c)];
          if (micro >= M) return false;
          if (s > 0 && f_end[key(s - 1, micro)] > t) return false;
          if (c == 0 && st.live + st.admitted + 2 > cap) return false;
          return true;
        }
        micro = st.next_i[static_cast<size_t>(c)];
        if (micro >= M || micro >= st.next_f[static_cast<size_t>(c)]) return false;
        if (f_end[key(s, micro)] > t) return false;
        return s + 1 >= S || i_end[key(s + 1, micro)] <= t;
      };
      int pick = -1, micro = -1;
      for (int kind : priority) {
        if (ready(kind, micro)) {
          pick = kind;
          break;
        }
      }
      auto& order = out.order[static_cast<size_t>(r)];
      if (pick < 0) {
        if (st.pending_w.empty()) continue;  // idle this step
        auto [s, m] = st.pending_w.front();
        st.pending_w.pop_front();
        order.push_back(make_step(Op::BWD_WEIGHT, m, s));
        --st.live;
      } else {
        const int c = (pick == kI1 || pick == kF1) ? 1 : 0;
        const int s = stage[static_cast<size_t>(c)];
        if (pick == kF0 || pick == kF1) {
          order.push_back(make_step(Op::FWD, micro, s));
          f_end[key(s, micro)] = t + 1;
          ++st.next_f[static_cast<size_t>(c)];
          ++st.live;
          st.admitted += c == 0 ? 1 : -1;
        } else {
          order.push_back(make_step(Op::BWD_INPUT, micro, s));
          i_end[key(s, micro)] = t + 1;
          ++st.next_i[static_cast<size_t>(c)];
          st.pending_w.push_back({s, micro});
        }
      }
      --remaining;
      any = true;
    }
    // With unit costs everything started before t has finished by t, so a step in which no
    // rank can start anything would repeat forever. The reservation rule rules this out.
    if (!any) throw std::logic_error("zbv-greedy: scheduler made no progress (bug)");
    ++t;
  }
  out.makespan = t;
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// ZB-H1, the paper's handcrafted schedule (reference §5: "1F1B with delayed W; same peak
// memory as 1F1B, bubble about 1/3 of 1F1B").
//
// Rank r:
//   warmup:   w = min(P - r, M) forwards F0 .. F(w-1), as in 1F1B;
//   steady:   for each micro k in order: I_k; then, if more than r W's are pending, the
//             oldest pending W; then the next forward if any is left;
//   cooldown: the same loop once the forwards are used up (I_k, then a W if more than r are
//             pending), and finally the r pending W's.
//
// Why r: an I is on the critical path of every rank above it (ranks r-1 .. 0 wait for
// it), a W is on nobody's. With unit costs rank r idles P-1 slots before its first I (r
// before its first F, P-1-r waiting for the first gradient); for the bubble to stay at that,
// the gradients must then reach every rank back to back. Rank r running its first r steady
// rounds as 1F1I (period 2) puts its I's ahead of the pace its upper neighbour needs, and
// the r W's it owes run in its cooldown, after its last I, where nobody waits on it. Rank 0
// has no rank above, so it runs each W right after its I; the last rank delays the most
// (P-1), as in the paper's ZB-H1 figure. (Running every W right after its I instead
// leaves rank r another P-1-r idle slots in the cooldown, waiting for gradients.) With F = I = W = 1
// every rank idles exactly P-1 slots when M >= P (makespan 3M + P - 1), a third of 1F1B's
// 3(P-1) when its backward costs I + W = 2.
//
// Memory: live micro-batches (FWD done, W not done) grow from w = P-r by one per W-less
// steady round, so the peak is (P - r) + r = P on every rank: 1F1B's peak over ranks (rank
// 0 holds P in both), never more; with M < P it is at most M.
// ---------------------------------------------------------------------------------------
Schedule generate_zb_h1(const GenerateOptions& o) {
  if (o.vpp != 1)
    refuse("zb-h1", "needs one stage per rank (--vpp 1), got --vpp " + std::to_string(o.vpp) +
                        "; use zbv for a split-backward schedule with two stages per rank");
  const int P = o.pp, M = o.micro;
  Schedule s = empty_schedule("zb-h1", P, P, M, Placement::loop(P, P));
  for (int r = 0; r < P; ++r) {
    Program& prog = s.programs[static_cast<size_t>(r)];
    const int warmup = std::min(P - r, M);
    int next_f = 0;
    for (; next_f < warmup; ++next_f) prog.push_back(make_step(Op::FWD, next_f, r));
    std::deque<int> pending;  // micros whose I ran and whose W did not
    for (int k = 0; k < M; ++k) {
      prog.push_back(make_step(Op::BWD_INPUT, k, r));
      pending.push_back(k);
      if (static_cast<int>(pending.size()) > r) {
        prog.push_back(make_step(Op::BWD_WEIGHT, pending.front(), r));
        pending.pop_front();
      }
      if (next_f < M) prog.push_back(make_step(Op::FWD, next_f++, r));
    }
    for (int m : pending) prog.push_back(make_step(Op::BWD_WEIGHT, m, r));
  }
  return insert_p2p(std::move(s), Alignment::Auto);
}

namespace {

void refuse_unless_two_stages_per_rank(const char* family, const GenerateOptions& o) {
  if (o.vpp != 2)
    refuse(family, "needs exactly two stages per rank (--vpp 2, V placement: stage r and stage 2P-1-r "
                   "on rank r), got --vpp " + std::to_string(o.vpp));
}

}  // namespace

// ---------------------------------------------------------------------------------------
// ZB-V, the handcrafted schedule of Qi et al. (ICLR'24, section 6), in the order PyTorch's
// ScheduleZBVZeroBubble emits it (reference pytorch_and_peers.md §1.2; PyTorch's
// torch/distributed/pipelining/schedules.py, _calculate_single_rank_operations).
//
// Rank r holds chunk 0 = stage r and chunk 1 = stage 2P-1-r. The reference builds the order
// for N = max(2P-1, M) micro-batches (enough to fill the V) and then drops every action of a
// micro-batch >= M; dropping whole micro-batches keeps the order valid. Its counters give
// these phases (F0/I0/W0 = forward, input and weight backward on chunk 0; k = micro):
//
//   warm-up   F0(0 .. 2(P-r)-2); then r pairs F1(j) F0(2(P-r)-1+j); then P-r triples
//             F1(r+j) I1(j) W1(j): the first gradient comes back on rank r's own chunk 1;
//   steady    N-P rounds i: F0(2P-r-1+i) while chunk-0 forwards are left, I0(i) W0(i),
//             F1(P+i), I1(P-r+i) W1(P-r+i): every W right after its I;
//   cool-down r pairs I0(N-P+j) I1(N-r+j); P-r pairs I0(N-P+r+j) W0(N-P+j); then the r
//             remaining chunk-1 W's, then the r remaining chunk-0 W's.
//
// With F = I = W = 1 this is the zero-bubble V: rank r idles r slots before its first step
// and the steady state is bubble-free; rank r's peak is 2P live micro-batch-chunks (2P-1
// chunk-0 forwards in flight plus one chunk-1 forward), half a stage each: 1F1B's peak.
// PyTorch accepts every M >= 1 here (no check on the micro-batch count), and so does zbv.
// ---------------------------------------------------------------------------------------
Schedule generate_zbv(const GenerateOptions& o) {
  refuse_unless_two_stages_per_rank("zbv", o);
  const int P = o.pp, M = o.micro;
  const int N = std::max(2 * P - 1, M);
  Schedule s = empty_schedule("zbv", P, 2 * P, M, Placement::v(P, 2 * P));
  for (int r = 0; r < P; ++r) {
    Program& prog = s.programs[static_cast<size_t>(r)];
    const int chunk0 = r, chunk1 = 2 * P - 1 - r;
    auto emit = [&](Op op, int micro, int stage) {
      if (micro < M) prog.push_back(make_step(op, micro, stage));
    };
    auto backward = [&](int micro, int stage) {  // I then W of the same micro-batch and stage
      emit(Op::BWD_INPUT, micro, stage);
      emit(Op::BWD_WEIGHT, micro, stage);
    };
    // warm-up
    for (int k = 0; k < 2 * (P - r) - 1; ++k) emit(Op::FWD, k, chunk0);
    for (int j = 0; j < r; ++j) {
      emit(Op::FWD, j, chunk1);
      emit(Op::FWD, 2 * (P - r) - 1 + j, chunk0);
    }
    for (int j = 0; j < P - r; ++j) {
      emit(Op::FWD, r + j, chunk1);
      backward(j, chunk1);
    }
    // steady
    for (int i = 0; i < N - P; ++i) {
      if (2 * P - r - 1 + i < N) emit(Op::FWD, 2 * P - r - 1 + i, chunk0);
      backward(i, chunk0);
      emit(Op::FWD, P + i, chunk1);
      backward(P - r + i, chunk1);
    }
    // cool-down
    for (int j = 0; j < r; ++j) {
      emit(Op::BWD_INPUT, N - P + j, chunk0);
      emit(Op::BWD_INPUT, N - r + j, chunk1);
    }
    for (int j = 0; j < P - r; ++j) {
      emit(Op::BWD_INPUT, N - P + r + j, chunk0);
      emit(Op::BWD_WEIGHT, N - P + j, chunk0);
    }
    for (int j = 0; j < r; ++j) emit(Op::BWD_WEIGHT, N - r + j, chunk1);
    for (int j = 0; j < r; ++j) emit(Op::BWD_WEIGHT, N - r + j, chunk0);
  }
  return insert_p2p(std::move(s), Alignment::Auto);
}

// zbv-greedy: ZB-V's placement, built by the greedy list scheduler above.
Schedule generate_zbv_greedy(const GenerateOptions& o) {
  refuse_unless_two_stages_per_rank("zbv-greedy", o);
  const int P = o.pp, M = o.micro;
  std::array<int, 4> priority = {kI1, kI0, kF1, kF0};  // sorted: next_permutation visits all 24
  ZbvResult best;
  do {
    ZbvResult candidate = simulate_zbv(P, M, priority);
    if (candidate.makespan < best.makespan) best = std::move(candidate);
  } while (std::next_permutation(priority.begin(), priority.end()));

  Schedule s = empty_schedule("zbv-greedy", P, 2 * P, M, Placement::v(P, 2 * P));
  for (int r = 0; r < P; ++r) {
    Program& prog = s.programs[static_cast<size_t>(r)];
    for (Step& st : best.order[static_cast<size_t>(r)]) prog.push_back(std::move(st));
  }
  return insert_p2p(std::move(s), Alignment::Auto);
}

}  // namespace ppsched
