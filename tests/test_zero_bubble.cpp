// Tests for the zero-bubble families (zb-h1, zbv, zbv-greedy) and DualPipeV.
//
// Timing note: the generators hand their compute order to insert_p2p with Auto alignment,
// which puts every compute unit at the earliest column its inputs allow (an OVERLAP
// composite spans two columns). With F = I = W = 1 a column is one unit of time, so the
// number of columns of a rank is the unit-cost makespan and the idle slots are its bubble.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "schedule/comm_insertion.hpp"
#include "schedule/errors.hpp"
#include "schedule/formats/action_notation.hpp"
#include "schedule/generators/generator.hpp"
#include "tests/support/structure.hpp"

using namespace ppsched;
using namespace ppsched::testing;

namespace {

Schedule gen(const char* name, int pp, int vpp, int micro) {
  GenerateOptions o;
  o.pp = pp;
  o.vpp = vpp;
  o.micro = micro;
  return generate(name, o);
}

// The oracles every generated schedule must pass; "" when all hold.
std::string structural_problems(const Schedule& s) {
  std::string e = check_compute_coverage(s);
  if (e.empty()) e = check_send_recv_placement(s);
  if (e.empty()) e = rendezvous_replay(s);
  return e;
}

// The compute steps of a rank, composites flattened into their sub-steps.
std::vector<Step> compute_leaves(const Program& p) {
  std::vector<Step> out;
  for (const auto& slot : p) {
    if (!slot || is_p2p(slot->op)) continue;
    if (is_composite(slot->op)) {
      out.insert(out.end(), slot->sub_steps().begin(), slot->sub_steps().end());
    } else {
      out.push_back(*slot);
    }
  }
  return out;
}

// Peak number of live micro-batch(-chunk)s on a rank: FWD done, weight gradient not yet
// (a BWD or a BWD_WEIGHT ends it).
int peak_live(const Program& p) {
  int live = 0, peak = 0;
  for (const Step& st : compute_leaves(p)) {
    if (st.op == Op::FWD) peak = std::max(peak, ++live);
    if (st.op == Op::BWD || st.op == Op::BWD_WEIGHT) --live;
  }
  return peak;
}

struct Timeline {
  int columns = 0;  // unit-cost makespan of the rank
  int busy = 0;     // compute units
};
Timeline timeline(const Program& p) {
  Timeline t;
  for (const auto& slot : p) {
    if (!slot) {
      ++t.columns;
    } else if (is_composite(slot->op)) {
      t.columns += static_cast<int>(slot->sub_steps().size());
      t.busy += static_cast<int>(slot->sub_steps().size());
    } else if (!is_p2p(slot->op)) {
      ++t.columns;
      ++t.busy;
    }
  }
  return t;
}

int makespan(const Schedule& s) {
  int m = 0;
  for (const auto& p : s.programs) m = std::max(m, timeline(p).columns);
  return m;
}

// The time grid of a rank without its P2P steps: compute steps and idle columns (".").
std::string unit_grid(const Program& p) {
  Program kept;
  for (const auto& slot : p)
    if (!slot || !is_p2p(slot->op)) kept.push_back(slot);
  return joined(kept);
}

std::string compute_order(const Schedule& s, int rank) {
  return joined(strip_p2p(s).programs[static_cast<size_t>(rank)], false);
}

int count_op(const Program& p, Op op) {
  int n = 0;
  for (const auto& slot : p)
    if (slot && slot->op == op) ++n;
  return n;
}

}  // namespace

// ------------------------------------------------------------------------------ zb-h1 ---

TEST_CASE("zb-h1 covers every micro-batch once and its P2P replays without deadlock, P 1..8, M 1..3P",
          "[zero_bubble][zb-h1]") {
  for (int P = 1; P <= 8; ++P) {
    for (int M = 1; M <= 3 * P; ++M) {
      INFO("P=" << P << " M=" << M);
      Schedule s = gen("zb-h1", P, 1, M);
      CHECK(s.name == "zb-h1");
      CHECK(s.ranks == P);
      CHECK(s.stages == P);
      CHECK(s.micro_batches == M);
      CHECK(s.placement == Placement::loop(P, P));
      CHECK(structural_problems(s) == "");
      for (const auto& p : s.programs) CHECK(count_op(p, Op::BWD) == 0);  // every backward is split
    }
  }
}

TEST_CASE("zb-h1 holds at most P live micro-batches per rank, and 1F1B's min(P, M) on rank 0",
          "[zero_bubble][zb-h1]") {
  for (int P = 1; P <= 8; ++P) {
    for (int M = 1; M <= 3 * P; ++M) {
      INFO("P=" << P << " M=" << M);
      Schedule s = gen("zb-h1", P, 1, M);
      for (int r = 0; r < P; ++r) CHECK(peak_live(s.programs[static_cast<size_t>(r)]) <= std::min(P, M));
      CHECK(peak_live(s.programs[0]) == std::min(P, M));
    }
  }
}

TEST_CASE("zb-h1 idles P-1 unit slots per rank when M >= P, a third of 1F1B's 3(P-1)",
          "[zero_bubble][zb-h1]") {
  for (int P = 1; P <= 8; ++P) {
    for (int M = P; M <= 3 * P; ++M) {
      INFO("P=" << P << " M=" << M);
      Schedule s = gen("zb-h1", P, 1, M);
      CHECK(makespan(s) == 3 * M + P - 1);
      for (const auto& p : s.programs) CHECK(timeline(p).busy == 3 * M);
    }
  }
}

TEST_CASE("zb-h1 rank r runs its first W right after its (r+1)-th I: rank 0 at once, the last rank "
          "delays the most", "[zero_bubble][zb-h1]") {
  for (int P = 1; P <= 8; ++P) {
    for (int M = 1; M <= 3 * P; ++M) {
      Schedule s = gen("zb-h1", P, 1, M);
      for (int r = 0; r < P; ++r) {
        INFO("P=" << P << " M=" << M << " rank " << r);
        auto steps = compute_leaves(s.programs[static_cast<size_t>(r)]);
        auto is_w = [](const Step& st) { return st.op == Op::BWD_WEIGHT; };
        auto is_i = [](const Step& st) { return st.op == Op::BWD_INPUT; };
        auto first_w = std::find_if(steps.begin(), steps.end(), is_w);
        REQUIRE(first_w != steps.end());
        CHECK(first_w->micro == 0);
        const auto inputs_before = std::count_if(steps.begin(), first_w, is_i);
        CHECK(inputs_before == std::min(r + 1, M));
        CHECK(std::prev(first_w)->op == Op::BWD_INPUT);
      }
    }
  }
}

TEST_CASE("zb-h1 P=4 M=8 emits the paper's ZB-H1 pattern on the first and the last rank",
          "[zero_bubble][zb-h1]") {
  Schedule s = gen("zb-h1", 4, 1, 8);
  // Rank 0: 1F1B warmup, then every W right after its I.
  CHECK(compute_order(s, 0) ==
        "F0s0 F1s0 F2s0 F3s0 Bi0s0 Bw0s0 F4s0 Bi1s0 Bw1s0 F5s0 Bi2s0 Bw2s0 F6s0 Bi3s0 Bw3s0 F7s0 "
        "Bi4s0 Bw4s0 Bi5s0 Bw5s0 Bi6s0 Bw6s0 Bi7s0 Bw7s0");
  // Rank 3: 1F1I until 3 W's are pending, then 1F1I1W, and the 3 owed W's fill the cooldown.
  CHECK(compute_order(s, 3) ==
        "F0s3 Bi0s3 F1s3 Bi1s3 F2s3 Bi2s3 F3s3 Bi3s3 Bw0s3 F4s3 Bi4s3 Bw1s3 F5s3 Bi5s3 Bw2s3 F6s3 "
        "Bi6s3 Bw3s3 F7s3 Bi7s3 Bw4s3 Bw5s3 Bw6s3 Bw7s3");
  // The unit-cost grid: rank 0 idles P-1 = 3 slots waiting for its first I, rank 3 only
  // before its first F; neither idles afterwards.
  CHECK(unit_grid(s.programs[0]).rfind("F0s0 F1s0 F2s0 F3s0 . . . Bi0s0 Bw0s0 F4s0", 0) == 0);
  CHECK(unit_grid(s.programs[3]).rfind(". . . F0s3 Bi0s3 F1s3 Bi1s3", 0) == 0);
  for (const auto& p : s.programs) CHECK(timeline(p).columns - timeline(p).busy == 3);
}

TEST_CASE("zb-h1 refuses more than one stage per rank", "[zero_bubble][zb-h1]") {
  CHECK_THROWS_WITH(gen("zb-h1", 4, 2, 8),
                    Catch::Contains("zb-h1: needs one stage per rank (--vpp 1), got --vpp 2"));
}

// -------------------------------------------------------------------------------- zbv ---

namespace {

// PyTorch's ScheduleZBVZeroBubble (torch/distributed/pipelining/schedules.py,
// _calculate_single_rank_operations), restated from its rules as an oracle: counters f0, f1
// (forwards), b0, b1 (input backwards), w0, w1 (weight backwards) per chunk, over
// n = max(2P-1, M) micro-batches, and at the end every action of a micro-batch >= M removed.
// The generator states the same schedule in closed form (phase by phase); this follows the
// reference's loops.
std::vector<std::string> pytorch_zbv_order(int P, int M) {
  std::vector<std::string> ranks;
  const int n = std::max(2 * P - 1, M);
  for (int r = 0; r < P; ++r) {
    const int s0 = r, s1 = 2 * P - 1 - r;
    std::vector<std::pair<std::string, int>> ops;  // (label, micro)
    auto act = [&](const char* kind, int micro, int stage) {
      ops.emplace_back(std::string(kind) + std::to_string(micro) + "s" + std::to_string(stage), micro);
    };
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    for (int k = 0; k < 2 * (P - r) - 1; ++k) act("F", f0++, s0);
    for (int k = 0; k < r; ++k) {
      act("F", f1++, s1);
      act("F", f0++, s0);
    }
    for (int k = 0; k < P - r; ++k) {
      act("F", f1++, s1);
      act("Bi", b1, s1);
      act("Bw", b1++, s1);
    }
    while (f1 < f0 || f0 < n) {
      if (f0 < n) act("F", f0++, s0);
      act("Bi", b0, s0);
      act("Bw", b0++, s0);
      act("F", f1++, s1);
      act("Bi", b1, s1);
      act("Bw", b1++, s1);
    }
    int w0 = b0, w1 = b1;
    for (int k = 0; k < r; ++k) {
      act("Bi", b0++, s0);
      act("Bi", b1++, s1);
    }
    for (int k = 0; k < P - r; ++k) {
      act("Bi", b0++, s0);
      act("Bw", w0++, s0);
    }
    while (w1 < b1) act("Bw", w1++, s1);
    while (w0 < b0) act("Bw", w0++, s0);
    REQUIRE(w0 == n);  // the reference asserts w == b == f per chunk
    REQUIRE(w1 == n);
    std::string line;
    for (const auto& [label, micro] : ops)
      if (micro < M) line += (line.empty() ? "" : " ") + label;
    ranks.push_back(line);
  }
  return ranks;
}

}  // namespace

TEST_CASE("zbv P=2 M=4 is PyTorch's ScheduleZBVZeroBubble order, derived by hand", "[zero_bubble][zbv]") {
  // n = max(2P-1, M) = 4. Rank 0 (stages 0 and 3): 2P-1 = 3 chunk-0 forwards, then P = 2
  // triples F1 I1 W1 on stage 3, then steady rounds [F0] I0 W0 F1 I1 W1 (the second without
  // F0: all 4 are out), then P = 2 pairs I0 W0. Rank 1 (stages 1 and 2): 1 chunk-0 forward,
  // one pair F1 F0, one triple F1 I1 W1, two steady rounds, then one pair I0 I1, one pair
  // I0 W0, and the remaining W of each chunk.
  Schedule s = gen("zbv", 2, 2, 4);
  CHECK(compute_order(s, 0) ==
        "F0s0 F1s0 F2s0 F0s3 Bi0s3 Bw0s3 F1s3 Bi1s3 Bw1s3 F3s0 Bi0s0 Bw0s0 F2s3 Bi2s3 Bw2s3 "
        "Bi1s0 Bw1s0 F3s3 Bi3s3 Bw3s3 Bi2s0 Bw2s0 Bi3s0 Bw3s0");
  CHECK(compute_order(s, 1) ==
        "F0s1 F0s2 F1s1 F1s2 Bi0s2 Bw0s2 F2s1 Bi0s1 Bw0s1 F2s2 Bi1s2 Bw1s2 F3s1 Bi1s1 Bw1s1 "
        "F3s2 Bi2s2 Bw2s2 Bi2s1 Bi3s2 Bi3s1 Bw2s1 Bw3s2 Bw3s1");
}

TEST_CASE("zbv's per-rank compute order equals PyTorch's ScheduleZBVZeroBubble for P 2..8, M 1..4P",
          "[zero_bubble][zbv]") {
  int identical = 0, cases = 0;
  for (int P = 2; P <= 8; ++P) {
    for (int M = 1; M <= 4 * P; ++M) {
      INFO("P=" << P << " M=" << M);
      const Schedule s = gen("zbv", P, 2, M);
      const std::vector<std::string> want = pytorch_zbv_order(P, M);
      bool same = true;
      for (int r = 0; r < P; ++r) {
        INFO("rank " << r);
        CHECK(compute_order(s, r) == want[static_cast<size_t>(r)]);
        same = same && compute_order(s, r) == want[static_cast<size_t>(r)];
      }
      ++cases;
      identical += same ? 1 : 0;
    }
  }
  CHECK(cases == 140);  // 4P cases for each P = 2..8: 4 * 35
  CHECK(identical == cases);
}

TEST_CASE("zbv covers every micro-batch once on V placement and replays without deadlock, P 1..8, M 1..4P",
          "[zero_bubble][zbv]") {
  for (int P = 1; P <= 8; ++P) {
    for (int M = 1; M <= 4 * P; ++M) {
      INFO("P=" << P << " M=" << M);
      Schedule s = gen("zbv", P, 2, M);
      CHECK(s.name == "zbv");
      CHECK(s.ranks == P);
      CHECK(s.stages == 2 * P);
      CHECK(s.placement == Placement::v(P, 2 * P));
      CHECK(structural_problems(s) == "");
      for (const auto& p : s.programs) CHECK(count_op(p, Op::BWD) == 0);
      // The published ZB-V's memory: at most 2P live micro-batch-chunks per rank.
      for (const auto& p : s.programs) CHECK(peak_live(p) <= 2 * P);
    }
  }
}

TEST_CASE("zbv refuses anything but two stages per rank", "[zero_bubble][zbv]") {
  for (int v : {1, 3}) {
    CHECK_THROWS_WITH(gen("zbv", 4, v, 8),
                      Catch::Contains("zbv: needs exactly two stages per rank (--vpp 2") &&
                          Catch::Contains("got --vpp " + std::to_string(v)));
  }
}

// ------------------------------------------------------------------------- zbv-greedy ---

TEST_CASE("zbv-greedy covers every micro-batch once on V placement and replays without deadlock, P 1..8, M 1..3P",
          "[zero_bubble][zbv-greedy]") {
  for (int P = 1; P <= 8; ++P) {
    for (int M = 1; M <= 3 * P; ++M) {
      INFO("P=" << P << " M=" << M);
      Schedule s = gen("zbv-greedy", P, 2, M);
      CHECK(s.name == "zbv-greedy");
      CHECK(s.ranks == P);
      CHECK(s.stages == 2 * P);
      CHECK(s.placement == Placement::v(P, 2 * P));
      CHECK(s.stages_of(0) == std::vector<int>{0, 2 * P - 1});
      CHECK(structural_problems(s) == "");
      for (const auto& p : s.programs) CHECK(count_op(p, Op::BWD) == 0);
    }
  }
}

TEST_CASE("zbv-greedy keeps at most 2P live micro-batch-chunks per rank", "[zero_bubble][zbv-greedy]") {
  for (int P = 1; P <= 8; ++P) {
    for (int M = 1; M <= 3 * P; ++M) {
      INFO("P=" << P << " M=" << M);
      Schedule s = gen("zbv-greedy", P, 2, M);
      for (const auto& p : s.programs) CHECK(peak_live(p) <= 2 * P);
    }
  }
}

TEST_CASE("zbv-greedy's unit-cost bubble stays within P slots of the P-1 start-up lower bound when M >= 2P",
          "[zero_bubble][zbv-greedy]") {
  // Lower bound: rank P-1 cannot start before time P-1 and has 6M units of work.
  for (int P = 1; P <= 8; ++P) {
    for (int M = 2 * P; M <= 3 * P; ++M) {
      INFO("P=" << P << " M=" << M);
      Schedule s = gen("zbv-greedy", P, 2, M);
      CHECK(makespan(s) >= 6 * M + P - 1);
      CHECK(makespan(s) <= 6 * M + P - 1 + P);
    }
  }
  // P=4 M=8 reaches the bound: no bubble beyond the unavoidable start-up.
  CHECK(makespan(gen("zbv-greedy", 4, 2, 8)) == 6 * 8 + 3);
}

TEST_CASE("zbv-greedy P=2 M=4 emits the greedy order pinned here", "[zero_bubble][zbv-greedy]") {
  Schedule s = gen("zbv-greedy", 2, 2, 4);
  // Rank 0 holds stages 0 and 3, rank 1 stages 1 and 2 (the turn). I's run as soon as their
  // gradient is there, W's fill the gaps, and a new micro-batch enters only when 2P = 4
  // micro-batch-chunks leave room for both of its chunks.
  CHECK(compute_order(s, 0) ==
        "F0s0 F1s0 F0s3 Bi0s3 F1s3 Bi1s3 Bi0s0 Bw0s3 Bi1s0 Bw1s3 F2s0 Bw0s0 Bw1s0 F2s3 Bi2s3 F3s0 "
        "Bw2s3 Bi2s0 Bw2s0 F3s3 Bi3s3 Bw3s3 Bi3s0 Bw3s0");
  CHECK(compute_order(s, 1) ==
        "F0s1 F0s2 F1s1 F1s2 Bi0s2 Bi0s1 Bi1s2 Bi1s1 Bw0s2 Bw0s1 Bw1s2 F2s1 F2s2 Bw1s1 Bi2s2 Bi2s1 "
        "F3s1 F3s2 Bw2s2 Bw2s1 Bi3s2 Bi3s1 Bw3s2 Bw3s1");
}

TEST_CASE("zbv-greedy refuses anything but two stages per rank", "[zero_bubble][zbv-greedy]") {
  for (int v : {1, 3}) {
    CHECK_THROWS_WITH(gen("zbv-greedy", 4, v, 8),
                      Catch::Contains("zbv-greedy: needs exactly two stages per rank (--vpp 2") &&
                          Catch::Contains("got --vpp " + std::to_string(v)));
  }
}

// -------------------------------------------------------------------------- dualpipev ---

TEST_CASE("dualpipev covers every micro-batch once on V placement and replays without deadlock, "
          "P 1..8, M 2P..3P", "[zero_bubble][dualpipev]") {
  for (int P = 1; P <= 8; ++P) {
    for (int M = 2 * P; M <= 3 * P; ++M) {
      INFO("P=" << P << " M=" << M);
      Schedule s = gen("dualpipev", P, 2, M);
      CHECK(s.name == "dualpipev");
      CHECK(s.ranks == P);
      CHECK(s.stages == 2 * P);
      CHECK(s.placement == Placement::v(P, 2 * P));
      CHECK(structural_problems(s) == "");
    }
  }
}

TEST_CASE("dualpipev overlaps F and B in its main loop: 2(M-2P+r+1) + (P-r-1) OVERLAP_F_B on rank r, "
          "one fewer on the last rank", "[zero_bubble][dualpipev]") {
  for (int P = 1; P <= 8; ++P) {
    for (int M = 2 * P; M <= 3 * P; ++M) {
      Schedule s = gen("dualpipev", P, 2, M);
      for (int r = 0; r < P; ++r) {
        INFO("P=" << P << " M=" << M << " rank " << r);
        const auto& p = s.programs[static_cast<size_t>(r)];
        const int expected = 2 * (M - 2 * P + r + 1) + (P - r - 1) - (r == P - 1 ? 1 : 0);
        CHECK(count_op(p, Op::OVERLAP_F_B) == expected);
        if (M > 2 * P) CHECK(count_op(p, Op::OVERLAP_F_B) >= 2);
        // Each overlap pairs a forward of one chunk with a full backward of the other.
        for (const auto& slot : p) {
          if (!slot || slot->op != Op::OVERLAP_F_B) continue;
          REQUIRE(slot->sub_steps().size() == 2);
          CHECK(slot->sub_steps()[0].op == Op::FWD);
          CHECK(slot->sub_steps()[1].op == Op::BWD);
          CHECK(slot->sub_steps()[0].stage != slot->sub_steps()[1].stage);
        }
        // Split backwards: phase 3 (P-r-1), phase 6 (r+1), phase 7 (P-r-1).
        CHECK(count_op(p, Op::BWD_INPUT) == 2 * P - r - 1);
      }
    }
  }
}

TEST_CASE("dualpipev P=4 M=8 walks DeepSeek's eight phases on rank 0 and the last rank",
          "[zero_bubble][dualpipev]") {
  Schedule s = gen("dualpipev", 4, 2, 8);
  // Rank 0: nF0 x6 | nF0F1 x1 | nB1W1F1 x3 | nF0B1F1B0 x1 | nB1F1B0 x3 | nB1B0 x1 (chunk 0
  // split) | nWB0 x3 | nW x1.
  CHECK(compute_order(s, 0) ==
        "F0s0 F1s0 F2s0 F3s0 F4s0 F5s0 "
        "F6s0 F0s7 "
        "Bi0s7 Bw0s7 F1s7 Bi1s7 Bw1s7 F2s7 Bi2s7 Bw2s7 F3s7 "
        "[F7s0|B3s7] [F4s7|B0s0] "
        "B4s7 [F5s7|B1s0] B5s7 [F6s7|B2s0] B6s7 [F7s7|B3s0] "
        "B7s7 Bi4s0 "
        "Bw4s0 Bi5s0 Bw5s0 Bi6s0 Bw6s0 Bi7s0 "
        "Bw7s0");
  // Rank 3 (last): nF0F1 x4 | nF0B1F1B0 x4, the first pair not overlapped | nB1B0 x4, split
  // from i = 2 on (odd rank: chunk 1 switches first) | nW x4.
  CHECK(compute_order(s, 3) ==
        "F0s3 F0s4 F1s3 F1s4 F2s3 F2s4 F3s3 F3s4 "
        "F4s3 B0s4 [F4s4|B0s3] [F5s3|B1s4] [F5s4|B1s3] [F6s3|B2s4] [F6s4|B2s3] [F7s3|B3s4] [F7s4|B3s3] "
        "B4s4 B4s3 B5s4 B5s3 Bi6s4 Bi6s3 Bi7s4 Bi7s3 "
        "Bw6s4 Bw6s3 Bw7s4 Bw7s3");
}

namespace {

// PyTorch's ScheduleDualPipeV (torch/distributed/pipelining/schedules.py, pytorch 00722e6,
// _calculate_single_rank_operations), restated from its rules as an oracle, in PyTorch's action
// notation: per (stage, kind) micro-batch counters, a full backward (B) counting as one I and
// one W of its stage, a FIFO of pending Ws fed by each I; on rank r, chunk 0 = stage r, chunk 1
// = stage 2P-1-r; the eight steps with their lengths; an overlapped pair is
// (F of one chunk; B of the other)OVERLAP_F_B.
std::vector<std::string> pytorch_dualpipev_order(int P, int M) {
  std::vector<std::string> ranks;
  for (int r = 0; r < P; ++r) {
    const int s0 = r, s1 = 2 * P - 1 - r;
    std::map<std::pair<int, char>, int> count;  // (stage, 'F' | 'I' | 'W') -> next micro
    std::vector<std::pair<int, int>> weights;   // pending (stage, micro)
    std::vector<std::string> out;
    auto name = [](int stage, const char* kind, int micro) { return std::to_string(stage) + kind + std::to_string(micro); };
    auto backward_counts = [&](int stage) {
      ++count[{stage, 'I'}];
      ++count[{stage, 'W'}];
    };
    auto action = [&](int stage, char kind) {
      const int m = count[{stage, kind == 'B' ? 'I' : kind}];
      out.push_back(name(stage, kind == 'B' ? "B" : kind == 'I' ? "I" : "F", m));
      if (kind == 'B') {
        backward_counts(stage);
        return;
      }
      if (kind == 'I') weights.push_back({stage, m});
      ++count[{stage, kind}];
    };
    auto overlap = [&](int f_stage, int b_stage) {
      const int fm = count[{f_stage, 'F'}], bm = count[{b_stage, 'I'}];
      out.push_back("(" + name(f_stage, "F", fm) + ";" + name(b_stage, "B", bm) + ")OVERLAP_F_B");
      ++count[{f_stage, 'F'}];
      backward_counts(b_stage);
    };
    auto weight = [&] {
      if (weights.empty()) return;
      out.push_back(name(weights.front().first, "W", weights.front().second));
      ++count[{weights.front().first, 'W'}];
      weights.erase(weights.begin());
    };
    for (int k = 0; k < 2 * (P - r - 1); ++k) action(s0, 'F');
    for (int k = 0; k < r + 1; ++k) {
      action(s0, 'F');
      action(s1, 'F');
    }
    for (int k = 0; k < P - r - 1; ++k) {
      action(s1, 'I');
      weight();
      action(s1, 'F');
    }
    for (int i = 0; i < M - 2 * P + r + 1; ++i) {
      if (i == 0 && r == P - 1) {
        action(s0, 'F');
        action(s1, 'B');
      } else {
        overlap(s0, s1);
      }
      overlap(s1, s0);
    }
    for (int k = 0; k < P - r - 1; ++k) {
      action(s1, 'B');
      overlap(s1, s0);
    }
    bool zb = false;
    for (int i = 0; i < r + 1; ++i) {
      if (i == (r + 1) / 2 && r % 2 == 1) zb = true;
      action(s1, zb ? 'I' : 'B');
      if (i == (r + 1) / 2 && r % 2 == 0) zb = true;
      action(s0, zb ? 'I' : 'B');
    }
    for (int k = 0; k < P - r - 1; ++k) {
      weight();
      action(s0, zb ? 'I' : 'B');
    }
    for (int k = 0; k < r + 1; ++k) weight();
    std::string line;
    for (const auto& a : out) line += (line.empty() ? "" : ",") + a;
    ranks.push_back(line);
  }
  return ranks;
}

}  // namespace

TEST_CASE("dualpipev's per-rank compute order equals PyTorch's ScheduleDualPipeV for P 2..8, M 2P..4P",
          "[zero_bubble][dualpipev]") {
  int cases = 0, identical = 0;
  for (int P = 2; P <= 8; ++P)
    for (int M = 2 * P; M <= 4 * P; ++M) {
      INFO("P=" << P << " M=" << M);
      const Schedule s = gen("dualpipev", P, 2, M);
      const std::vector<std::string> want = pytorch_dualpipev_order(P, M);
      bool same = true;
      for (int r = 0; r < P; ++r) {
        std::string got;
        for (const auto& slot : s.programs[static_cast<size_t>(r)])
          if (slot && !is_p2p(slot->op)) got += (got.empty() ? "" : ",") + format_action(*slot);
        INFO("rank " << r);
        CHECK(got == want[static_cast<size_t>(r)]);
        same = same && got == want[static_cast<size_t>(r)];
      }
      ++cases;
      identical += same ? 1 : 0;
    }
  CHECK(cases == 7 + 2 * 35);  // 2P+1 values of M for each P = 2..8
  CHECK(identical == cases);
}

TEST_CASE("dualpipev refuses anything but two stages per rank, and fewer than 2P micro-batches",
          "[zero_bubble][dualpipev]") {
  CHECK_THROWS_WITH(gen("dualpipev", 4, 1, 8),
                    Catch::Contains("dualpipev: needs exactly two stages per rank (--vpp 2") &&
                        Catch::Contains("got --vpp 1"));
  CHECK_THROWS_WITH(gen("dualpipev", 4, 2, 7),
                    Catch::Contains("dualpipev: needs --micro >= 2 * --pp (8), got --micro 7"));
  CHECK_THROWS_AS(gen("dualpipev", 1, 2, 1), InputError);
  CHECK_NOTHROW(gen("dualpipev", 1, 2, 2));
}

// ------------------------------------------------------------------- random sizes ---

TEST_CASE("all four families pass the structural oracles at random sizes", "[zero_bubble][property]") {
  rc::prop("zb-h1, zbv, zbv-greedy and dualpipev are covered, ordered and deadlock-free", [] {
    const int P = *rc::gen::inRange(1, 13);
    const int M = *rc::gen::inRange(1, 41);
    RC_ASSERT(structural_problems(gen("zb-h1", P, 1, M)) == "");
    for (const char* v_family : {"zbv", "zbv-greedy"}) {
      const Schedule v = gen(v_family, P, 2, M);
      RC_ASSERT(structural_problems(v) == "");
      for (const auto& p : v.programs) RC_ASSERT(peak_live(p) <= 2 * P);
    }
    RC_ASSERT(structural_problems(gen("dualpipev", P, 2, 2 * P + M)) == "");
  });
}
