// Generator tests: gpipe, 1f1b, interleaved-1f1b, looped-bfs, mpipe-transpose.
//
// Literal orders come from the reference (/work/shared/reference/hyper_parallel.md §2.1-2.5);
// where it elides a part with "…" only the shown prefix / fragment / suffix is compared.
// The sweeps run every family through the independent oracles of checkers/oracles (via tests/support/structure.hpp).
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "checkers/checks.hpp"
#include "schedule/comm_insertion.hpp"
#include "schedule/errors.hpp"
#include "schedule/generators/generator.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "tests/support/expect_error.hpp"
#include "tests/support/structure.hpp"

using namespace ppsched;
using namespace ppsched::testing;

namespace {

GenerateOptions opts(int pp, int vpp, int micro) {
  GenerateOptions o;
  o.pp = pp;
  o.vpp = vpp;
  o.micro = micro;
  return o;
}

// The three oracles, first problem only.
std::string problems(const Schedule& s) {
  std::string e = check_compute_coverage(s);
  if (e.empty()) e = check_send_recv_placement(s);
  if (e.empty()) e = rendezvous_replay(s);
  return e;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
bool contains(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }

// A reference list with its "." bubbles removed.
std::string without_idle(const std::string& s) {
  std::istringstream in(s);
  std::string tok, out;
  while (in >> tok)
    if (tok != ".") out += (out.empty() ? "" : " ") + tok;
  return out;
}

// The compute steps of a program in order, composites flattened into their sub-steps.
std::string compute_projection(const Program& p) {
  std::string out;
  for (const auto& slot : p) {
    if (!slot) continue;
    std::vector<Step> leaves = is_composite(slot->op) ? std::vector<Step>(slot->sub_steps()) : std::vector<Step>{*slot};
    for (const Step& st : leaves)
      if (is_body_compute(st.op)) out += (out.empty() ? "" : " ") + short_label(st);
  }
  return out;
}

// Forwards a rank runs before its first backward: the peak number of live activations.
int forwards_before_first_backward(const Program& p) {
  int n = 0;
  for (const auto& slot : p) {
    if (!slot) continue;
    std::vector<Step> leaves = is_composite(slot->op) ? std::vector<Step>(slot->sub_steps()) : std::vector<Step>{*slot};
    for (const Step& st : leaves) {
      if (st.op == Op::FWD) ++n;
      if (st.op == Op::BWD || st.op == Op::BWD_INPUT) return n;
    }
  }
  return n;
}

// The reference's P=4, V=1, M=8 interleaved lists (§2.3), dots = bubbles.
const char* const kInterleavedP4V1M8[4] = {
    "F0s0 FS0s0 F1s0 FS1s0 F2s0 FS2s0 F3s0 FS3s0 F4s0 FS4s0 F5s0 FS5s0 . . . BR0s0 F6s0 FS6s0 B0s0 "
    "BR1s0 F7s0 FS7s0 B1s0 BR2s0 . B2s0 BR3s0 . B3s0 BR4s0 . B4s0 BR5s0 . B5s0 BR6s0 . B6s0 BR7s0 . "
    "B7s0",
    ". FR0s1 F0s1 FR1s1 FS0s1 F1s1 FR2s1 FS1s1 F2s1 FR3s1 FS2s1 F3s1 FR4s1 FS3s1 . FR5s1 . BR0s1 F4s1 "
    "FS4s1 B0s1 BR1s1 BS0s1 F5s1 FR6s1 FS5s1 B1s1 BR2s1 BS1s1 F6s1 FR7s1 FS6s1 B2s1 BR3s1 BS2s1 F7s1 "
    "FS7s1 B3s1 BR4s1 BS3s1 . B4s1 BR5s1 BS4s1 . B5s1 BR6s1 BS5s1 . B6s1 BR7s1 BS6s1 . B7s1 BS7s1",
    ". . FR0s2 F0s2 FS0s2 FR1s2 F1s2 FS1s2 FR2s2 . FR3s2 BR0s2 F2s2 FS2s2 B0s2 BS0s2 BR1s2 F3s2 FS3s2 "
    "FR4s2 B1s2 BS1s2 BR2s2 F4s2 FS4s2 FR5s2 B2s2 BS2s2 BR3s2 F5s2 FS5s2 FR6s2 B3s2 BS3s2 BR4s2 F6s2 "
    "FS6s2 FR7s2 B4s2 BS4s2 BR5s2 F7s2 FS7s2 B5s2 BS5s2 BR6s2 . B6s2 BS6s2 BR7s2 . B7s2 BS7s2",
    (". . . FR0s3 F0s3 FR1s3 B0s3 BS0s3 F1s3 FR2s3 B1s3 BS1s3 F2s3 FR3s3 B2s3 BS2s3 F3s3 FR4s3 B3s3 "
     "BS3s3 F4s3 FR5s3 B4s3 BS4s3 F5s3 FR6s3 B5s3 BS5s3 F6s3 FR7s3 B6s3 BS6s3 F7s3 B7s3 BS7s3"),
};

}  // namespace

// ---- gpipe (§2.1) --------------------------------------------------------------------------

TEST_CASE("gpipe P4 M8 matches the reference: all [FR] F [FS], then all [BR] B [BS]", "[generators][gpipe]") {
  Schedule s = generate("gpipe", opts(4, 1, 8));
  CHECK((s.name == "gpipe" && s.ranks == 4 && s.stages == 4 && s.micro_batches == 8));
  CHECK(s.placement == Placement::loop(4, 4));
  // r0 "F0s0 FS0s0 … F7s0 FS7s0 BR0s0 B0s0 … BR7s0 B7s0", the elided parts by the pattern.
  CHECK(joined(s.programs[0]) == "F0s0 FS0s0 F1s0 FS1s0 F2s0 FS2s0 F3s0 FS3s0 F4s0 FS4s0 F5s0 FS5s0 F6s0 FS6s0 F7s0 FS7s0 "
              "BR0s0 B0s0 BR1s0 B1s0 BR2s0 B2s0 BR3s0 B3s0 BR4s0 B4s0 BR5s0 B5s0 BR6s0 B6s0 BR7s0 B7s0");
  const std::string r1 = joined(s.programs[1]);
  CHECK(starts_with(r1, "FR0s1 F0s1 FS0s1 FR1s1"));
  CHECK(contains(r1, "FS7s1 BR0s1 B0s1 BS0s1 BR1s1"));
  const std::string r3 = joined(s.programs[3]);
  CHECK(starts_with(r3, "FR0s3 F0s3 FR1s3"));
  CHECK(contains(r3, "FR7s3 F7s3 B0s3 BS0s3"));
  CHECK(ends_with(r3, "B7s3 BS7s3"));
  CHECK(problems(s) == "");
}

// ---- 1f1b (§2.2) ---------------------------------------------------------------------------

TEST_CASE("1f1b P4 M8 reproduces the reference lists with the rank-parity warmup sends", "[generators][1f1b]") {
  Schedule s = generate("1f1b", opts(4, 1, 8));
  CHECK(s.name == "1f1b");
  CHECK(joined(s.programs[0]) ==
        "F0s0 FS0s0 F1s0 FS1s0 F2s0 FS2s0 F3s0 BR0s0 FS3s0 B0s0 F4s0 BR1s0 FS4s0 B1s0 F5s0 BR2s0 FS5s0 "
        "B2s0 F6s0 BR3s0 FS6s0 B3s0 F7s0 BR4s0 FS7s0 B4s0 BR5s0 B5s0 BR6s0 B6s0 BR7s0 B7s0");
  const std::string r1 = joined(s.programs[1]);
  CHECK(starts_with(r1, "FR0s1 F0s1 FR1s1 FS0s1 F1s1 FR2s1 FS1s1 F2s1 BR0s1 FS2s1 B0s1 BS0s1 FR3s1 F3s1 "
                        "BR1s1 FS3s1 B1s1 BS1s1 FR4s1 F4s1"));
  CHECK(ends_with(r1, "BR5s1 FS7s1 B5s1 BS5s1 BR6s1 B6s1 BS6s1 BR7s1 B7s1 BS7s1"));
  const std::string r2 = joined(s.programs[2]);
  CHECK(starts_with(r2, "FR0s2 F0s2 FS0s2 FR1s2 F1s2 BR0s2 FS1s2 B0s2 BS0s2 FR2s2 F2s2 BR1s2 FS2s2 B1s2 "
                        "BS1s2"));
  CHECK(ends_with(r2, "FR7s2 F7s2 BR6s2 FS7s2 B6s2 BS6s2 BR7s2 B7s2 BS7s2"));
  const std::string r3 = joined(s.programs[3]);
  CHECK(starts_with(r3, "FR0s3 F0s3 B0s3 BS0s3 FR1s3 F1s3 B1s3 BS1s3"));
  CHECK(ends_with(r3, "FR7s3 F7s3 B7s3 BS7s3"));
  CHECK(problems(s) == "");
}

TEST_CASE("1f1b with fewer micros than ranks sends the last forward right after the warmup",
          "[generators][1f1b]") {
  // P=4, M=2: ranks 0 and 1 have P-r > M, so the extra FS(f-1) follows the warmup.
  Schedule s = generate("1f1b", opts(4, 1, 2));
  CHECK(joined(s.programs[0]) == "F0s0 FS0s0 F1s0 FS1s0 BR0s0 B0s0 BR1s0 B1s0");
  CHECK(joined(s.programs[1]) == "FR0s1 F0s1 FR1s1 FS0s1 F1s1 FS1s1 BR0s1 B0s1 BS0s1 BR1s1 B1s1 BS1s1");
  CHECK(joined(s.programs[2]) == "FR0s2 F0s2 FS0s2 FR1s2 F1s2 BR0s2 FS1s2 B0s2 BS0s2 BR1s2 B1s2 BS1s2");
  CHECK(joined(s.programs[3]) == "FR0s3 F0s3 B0s3 BS0s3 FR1s3 F1s3 B1s3 BS1s3");
  CHECK(problems(s) == "");
}

// ---- interleaved-1f1b (§2.3) -------------------------------------------------------------------

TEST_CASE("interleaved P4 V1 M8 reproduces the reference lists with their bubbles", "[generators][interleaved]") {
  Schedule s = generate("interleaved-1f1b", opts(4, 1, 8));
  CHECK(s.name == "interleaved-1f1b");
  CHECK(s.placement == Placement::loop(4, 4));
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(joined(s.programs[static_cast<size_t>(r)]) == kInterleavedP4V1M8[r]);
  }
}

TEST_CASE("interleaved P4 V2 M8 rank 0 has the reference compute projection", "[generators][interleaved]") {
  Schedule s = generate("interleaved-1f1b", opts(4, 2, 8));
  CHECK(s.stages == 8);
  // F(0,0..3) F(4,0..3) F(0,4) F(0,5) F(0,6) B(4,0) F(0,7) B(4,1) F(4,4) B(4,2) F(4,5) B(4,3)
  // F(4,6) B(0,0) F(4,7) B(0,1) B(0,2) B(0,3) B(4,4..7) B(0,4..7), (stage, micro).
  CHECK(compute_projection(s.programs[0]) ==
        "F0s0 F1s0 F2s0 F3s0 F0s4 F1s4 F2s4 F3s4 F4s0 F5s0 F6s0 B0s4 F7s0 B1s4 F4s4 B2s4 F5s4 B3s4 "
        "F6s4 B0s0 F7s4 B1s0 B2s0 B3s0 B4s4 B5s4 B6s4 B7s4 B4s0 B5s0 B6s0 B7s0");
  CHECK(problems(s) == "");
}

TEST_CASE("interleaved peak live activations follow the classic and less_memory warmups", "[generators][interleaved]") {
  // §5: classic (V-1)*R0 + 2(P-1-i) + 1; less_memory (V-1)*R0 + (P-1-i) + 1.
  struct Case { int v, m; std::vector<int> classic, shallow; };
  for (const Case& c : {Case{1, 8, {7, 5, 3, 1}, {4, 3, 2, 1}}, Case{2, 8, {11, 9, 7, 5}, {8, 7, 6, 5}},
                        Case{4, 16, {19, 17, 15, 13}, {16, 15, 14, 13}}}) {
    GenerateOptions o = opts(4, c.v, c.m);
    Schedule classic = generate("interleaved-1f1b", o);
    o.less_memory = true;
    Schedule shallow = generate("interleaved-1f1b", o);
    for (int r = 0; r < 4; ++r) {
      INFO("V" << c.v << " M" << c.m << " rank " << r);
      CHECK(forwards_before_first_backward(classic.programs[static_cast<size_t>(r)]) == c.classic[static_cast<size_t>(r)]);
      CHECK(forwards_before_first_backward(shallow.programs[static_cast<size_t>(r)]) == c.shallow[static_cast<size_t>(r)]);
    }
  }
}

TEST_CASE("interleaved less_memory at V=1 has the 1F1B compute order", "[generators][interleaved]") {
  for (int P = 1; P <= 8; ++P)
    for (int M = 1; M <= 3 * P; ++M) {
      GenerateOptions o = opts(P, 1, M);
      Schedule plain = generate("1f1b", o);
      o.less_memory = true;
      Schedule shallow = generate("interleaved-1f1b", o);
      for (int r = 0; r < P; ++r) {
        INFO("P" << P << " M" << M << " rank " << r);
        CHECK(compute_projection(shallow.programs[static_cast<size_t>(r)]) ==
              compute_projection(plain.programs[static_cast<size_t>(r)]));
      }
    }
}

TEST_CASE("interleaved less_memory warmup is never deeper than the classic one", "[generators][interleaved]") {
  for (int P = 1; P <= 8; ++P)
    for (int V = 1; V <= 4; ++V)
      for (int M = 1; M <= 3 * P; ++M) {
        GenerateOptions o = opts(P, V, M);
        Schedule classic = generate("interleaved-1f1b", o);
        o.less_memory = true;
        Schedule shallow = generate("interleaved-1f1b", o);
        for (int r = 0; r < P; ++r) {
          const int c = forwards_before_first_backward(classic.programs[static_cast<size_t>(r)]);
          const int l = forwards_before_first_backward(shallow.programs[static_cast<size_t>(r)]);
          INFO("P" << P << " V" << V << " M" << M << " rank " << r);
          CHECK(l <= c);
          // §5: strictly shallower on rank 0 when M >= P; at M == P the classic warmup is clipped
          // to V*M and the peak (warmup + the first steady F) ties.
          if (r == 0 && M > P && P > 1) CHECK(l < c);
        }
      }
}

TEST_CASE("interleaved short-micro layouts receive the wrap-around gradient before its backward (§7 item 1)",
          "[generators][interleaved]") {
  // With the old P-M padding, rank P-1 ran B(P-1) before its BR in these cases.
  for (auto [P, V, M] : {std::tuple{4, 2, 2}, std::tuple{4, 3, 2}, std::tuple{8, 2, 4}}) {
    Schedule s = generate("interleaved-1f1b", opts(P, V, M));
    const std::string last = joined(s.programs[static_cast<size_t>(P - 1)], false);
    const std::string br = "BR0s" + std::to_string(P - 1), b = "B0s" + std::to_string(P - 1);
    INFO("P" << P << " V" << V << " M" << M << ": " << last);
    REQUIRE(contains(last, " " + br + " "));
    CHECK(last.find(" " + br + " ") < last.find(" " + b + " "));
    CHECK(problems(s) == "");
  }
}

TEST_CASE("interleaved overlap_b_f matches the reference rank-3 fragments (P4 V2 M8)", "[generators][interleaved]") {
  GenerateOptions o = opts(4, 2, 8);
  o.overlap_b_f = true;
  Schedule s = generate("interleaved-1f1b", o);
  const std::string r3 = joined(s.programs[3]);
  CHECK(contains(r3, "FR0s7 FS3s3 F0s7 FR1s7 [B0s7|F1s7] BS0s7 FR2s7 [B1s7|F2s7] BS1s7 "));
  CHECK(contains(r3, " FR4s3 [B3s7|F4s3] BR0s3 BS3s7 FR5s3 FS4s3 [B0s3|F5s3] BR1s3 BS0s3 FR6s3 FS5s3 "));
  CHECK(problems(s) == "");
}

TEST_CASE("interleaved dxdw_split matches the reference rank-1 fragments (P4 V2 M8)", "[generators][interleaved]") {
  GenerateOptions o = opts(4, 2, 8);
  o.overlap_b_f = true;
  o.dxdw_split = true;
  Schedule s = generate("interleaved-1f1b", o);
  const std::string r1 = joined(s.programs[1]);
  CHECK(contains(r1, " F4s1 FS4s1 [Bi0s5|F5s1] BR1s5 BS0s5 FR6s1 FS5s1 Bw0s5 [Bi1s5|F6s1] "));
  CHECK(contains(r1, " [Bi3s5|F4s5] BR0s1 BS3s5 FR5s5 FS4s5 Bw3s5 "));
  CHECK(problems(s) == "");
}

TEST_CASE("overlap_b_f only regroups the plain steady pairs; dxdw_split keeps the P2P order, puts one Bw after "
          "each split pair's gap and keeps stage-0 pairs unified", "[generators][interleaved]") {
  for (int P = 1; P <= 6; ++P)
    for (int V = 1; V <= 3; ++V)
      for (int M = 1; M <= 3 * P; ++M) {
        GenerateOptions o = opts(P, V, M);
        Schedule plain = generate("interleaved-1f1b", o);
        o.overlap_b_f = true;
        Schedule over = generate("interleaved-1f1b", o);
        o.dxdw_split = true;
        Schedule split = generate("interleaved-1f1b", o);
        for (int r = 0; r < P; ++r) {
          INFO("P" << P << " V" << V << " M" << M << " rank " << r);
          CHECK(compute_projection(over.programs[static_cast<size_t>(r)]) ==
                compute_projection(plain.programs[static_cast<size_t>(r)]));
          const Program& a = over.programs[static_cast<size_t>(r)];
          const Program& b = split.programs[static_cast<size_t>(r)];
          Program p2p_a, p2p_b;
          for (const auto& x : a) if (x && is_p2p(x->op)) p2p_a.push_back(x);
          for (const auto& x : b) if (x && is_p2p(x->op)) p2p_b.push_back(x);
          CHECK(p2p_a == p2p_b);
          for (size_t k = 0; k < b.size(); ++k) {
            if (!b[k] || b[k]->op != Op::OVERLAP_B_F) continue;
            const Step& back = b[k]->sub_steps()[0];
            if (back.stage == 0) {
              CHECK(back.op == Op::BWD);
              continue;
            }
            CHECK(back.op == Op::BWD_INPUT);
            size_t j = k + 1;
            while (j < b.size() && b[j] && is_p2p(b[j]->op)) ++j;
            REQUIRE(j < b.size());
            CHECK(*b[j] == make_step(Op::BWD_WEIGHT, back.micro, back.stage));
          }
        }
        CHECK(problems(split) == "");
      }
}

// ---- looped-bfs ------------------------------------------------------------------------------

TEST_CASE("looped-bfs runs every forward of each local stage, then the backwards in reverse", "[generators][looped-bfs]") {
  Schedule s = generate("looped-bfs", opts(2, 2, 2));
  CHECK(s.name == "looped-bfs");
  CHECK(s.stages == 4);
  // Backwards: the later local stage first, and within a stage micro-batch M-1 first, as
  // PyTorch's ScheduleLoopedBFS (reversed stages, reversed micro-batches).
  CHECK(compute_projection(s.programs[0]) == "F0s0 F1s0 F0s2 F1s2 B1s2 B0s2 B1s0 B0s0");
  CHECK(compute_projection(s.programs[1]) == "F0s1 F1s1 F0s3 F1s3 B1s3 B0s3 B1s1 B0s1");
  CHECK(problems(s) == "");
}

TEST_CASE("looped-bfs's per-rank compute order equals PyTorch's ScheduleLoopedBFS for P 2..8, V 1..3, M 1..4P",
          "[generators][looped-bfs]") {
  // The reference's rule, restated: rank r's stages are r, r+P, ..., r+(V-1)P; every forward
  // of each stage ascending (micro-batches ascending), then for each stage descending every
  // backward with the micro-batches descending.
  int cases = 0, identical = 0;
  for (int P = 2; P <= 8; ++P)
    for (int V = 1; V <= 3; ++V)
      for (int M = 1; M <= 4 * P; ++M) {
        INFO("P=" << P << " V=" << V << " M=" << M);
        const Schedule s = generate("looped-bfs", opts(P, V, M));
        bool same = true;
        for (int r = 0; r < P; ++r) {
          std::vector<int> stages;
          for (int st = r; st < P * V; st += P) stages.push_back(st);
          std::string want;
          auto add = [&](const std::string& a) { want += (want.empty() ? "" : " ") + a; };
          for (int st : stages)
            for (int m = 0; m < M; ++m) add("F" + std::to_string(m) + "s" + std::to_string(st));
          for (auto it = stages.rbegin(); it != stages.rend(); ++it)
            for (int m = M - 1; m >= 0; --m) add("B" + std::to_string(m) + "s" + std::to_string(*it));
          CHECK(compute_projection(s.programs[static_cast<size_t>(r)]) == want);
          same = same && compute_projection(s.programs[static_cast<size_t>(r)]) == want;
        }
        ++cases;
        identical += same ? 1 : 0;
      }
  CHECK(cases == 3 * 140);
  CHECK(identical == cases);
}

// ---- the sweep ------------------------------------------------------------------------------

TEST_CASE("every family passes coverage, send/recv placement and rendezvous over P 1..8, V 1..4, M 1..3P",
          "[generators][sweep]") {
  struct Variant { std::string family; GenerateOptions o; };
  std::vector<Variant> variants;
  auto add = [&](const std::string& f, auto&& tweak) {
    GenerateOptions o;
    tweak(o);
    variants.push_back({f, o});
  };
  add("gpipe", [](GenerateOptions&) {});
  add("1f1b", [](GenerateOptions&) {});
  add("looped-bfs", [](GenerateOptions&) {});
  add("interleaved-1f1b", [](GenerateOptions&) {});
  add("interleaved-1f1b", [](GenerateOptions& o) { o.less_memory = true; });
  add("interleaved-1f1b", [](GenerateOptions& o) { o.overlap_b_f = true; });
  add("interleaved-1f1b", [](GenerateOptions& o) { o.overlap_b_f = o.dxdw_split = true; });
  for (Overflow ov : {Overflow::Full, Overflow::Min})
    for (Tower t : {Tower::Trainable, Tower::Frozen, Tower::None})
      for (bool ob : {false, true})
        if (!ob || t == Tower::Trainable)
          add("mpipe-transpose", [&](GenerateOptions& o) {
            o.overflow = ov;
            o.tower = t;
            o.owner_backward = ob;
          });
  int count = 0;
  for (const Variant& v : variants) {
    const bool v1_only = v.family == "gpipe" || v.family == "1f1b";
    for (int P = 1; P <= 8; ++P)
      for (int V = 1; V <= (v1_only ? 1 : 4); ++V)
        for (int M = 1; M <= 3 * P; ++M) {
          GenerateOptions o = v.o;
          o.pp = P;
          o.vpp = V;
          o.micro = M;
          INFO(v.family << " P" << P << " V" << V << " M" << M << " less_memory=" << o.less_memory
                        << " overlap=" << o.overlap_b_f << " dxdw=" << o.dxdw_split << " overflow="
                        << to_string(o.overflow) << " tower=" << to_string(o.tower)
                        << " owner_backward=" << o.owner_backward);
          Schedule s;
          REQUIRE_NOTHROW(s = generate(v.family, o));
          ++count;
          const std::string e = problems(s);
          if (!e.empty()) CHECK(e == "");
          REQUIRE(s.ranks == P);
          REQUIRE(s.stages == P * V);
          REQUIRE(s.micro_batches == M);
        }
  }
  CHECK(count == 2 * 108 + 13 * 432);  // gpipe, 1f1b at V=1; 13 variants over V 1..4
}

TEST_CASE("interleaved-zb passes coverage, send/recv placement and rendezvous over P 1..8, V 1..4, M 1..3P where "
          "PyTorch accepts M, and refuses the rest",
          "[generators][sweep]") {
  int built = 0, refused = 0;
  for (int P = 1; P <= 8; ++P)
    for (int V = 1; V <= 4; ++V)
      for (int M = 1; M <= 3 * P; ++M) {
        INFO("interleaved-zb P" << P << " V" << V << " M" << M);
        if (M % std::max(1, M / P) != 0) {
          CHECK_THROWS_WITH(generate("interleaved-zb", opts(P, V, M)), Catch::Contains("is not a multiple of the"));
          ++refused;
          continue;
        }
        const Schedule s = generate("interleaved-zb", opts(P, V, M));
        const std::string e = problems(s);
        if (!e.empty()) CHECK(e == "");
        ++built;
      }
  CHECK(built + refused == 432);
  CHECK(refused > 0);
}

TEST_CASE("interleaved-1f1b and mpipe-transpose hold the oracles on random larger shapes", "[generators][sweep]") {
  rc::prop("random P, V, M", [] {
    const int P = *rc::gen::inRange(1, 13);
    const int V = *rc::gen::inRange(1, 6);
    const int M = *rc::gen::inRange(1, 4 * P + 1);
    GenerateOptions o = opts(P, V, M);
    const int variant = *rc::gen::inRange(0, 5);
    std::string family = "interleaved-1f1b";
    if (variant == 1) o.less_memory = true;
    if (variant == 2) o.overlap_b_f = true;
    if (variant == 3) o.overlap_b_f = o.dxdw_split = true;
    if (variant == 4) {
      family = "mpipe-transpose";
      o.overflow = *rc::gen::element(Overflow::Full, Overflow::Min);
      o.owner_backward = *rc::gen::arbitrary<bool>();
      o.tower = o.owner_backward ? Tower::Trainable : *rc::gen::element(Tower::Trainable, Tower::Frozen, Tower::None);
      o.less_memory = *rc::gen::arbitrary<bool>();
    }
    RC_ASSERT(problems(generate(family, o)) == "");
  });
}

// ---- mpipe-transpose (§2.5) ---------------------------------------------------------------------

namespace {

// Without the body data steps: the reference's literal lists (hyper_parallel.md §2.5) are the
// MPipe layer over the §2.3 body, written before hyper-parallel's add_send_recv emitted
// DATA_SEND/DATA_RECV; the real output, data steps included, is pinned by test_peer_orders.
GenerateOptions mpipe(int pp, int vpp, int micro, Overflow ov, Tower t, bool owner_backward = false) {
  GenerateOptions o = opts(pp, vpp, micro);
  o.overflow = ov;
  o.tower = t;
  o.owner_backward = owner_backward;
  o.data_steps = false;
  return o;
}

// The leading steps without a stage: the MPipe prefix.
std::string prefix_of(const Program& p) {
  std::string out;
  for (const auto& slot : p) {
    if (!slot || slot->stage >= 0) break;
    out += (out.empty() ? "" : " ") + short_label(*slot);
  }
  return out;
}

bool is_mpipe_layer_step(Op op) {
  return op == Op::DATA_LOAD || op == Op::DATA_SEND || op == Op::DATA_RECV ||
         op_name(op).substr(0, 6) == "MPIPE_";
}

int count_op(const Program& p, Op op) {
  return static_cast<int>(std::count_if(p.begin(), p.end(), [&](const Slot& s) { return s && s->op == op; }));
}

// The rank's body from the reference's §2.3 P4V1M8 list, bubbles removed.
std::string ref_body(int r) { return without_idle(kInterleavedP4V1M8[r]); }

}  // namespace

TEST_CASE("mpipe PP4 M4 min trainable has the literal reference prefixes", "[generators][mpipe]") {
  Schedule s = generate("mpipe-transpose", mpipe(4, 1, 4, Overflow::Min, Tower::Trainable));
  CHECK(s.name == "mpipe-transpose");
  REQUIRE(s.mpipe.has_value());
  CHECK(s.mpipe->overflow == Overflow::Min);
  CHECK(s.mpipe->tower == Tower::Trainable);
  CHECK_FALSE(s.mpipe->owner_backward);
  CHECK(s.mpipe->owners.empty());
  CHECK(prefix_of(s.programs[0]) == "BCAST DL0 TF0 DR1 DR2 DR3 MFR1 MFR2 MFR3 GR1 GR2 GR3");
  for (int k = 1; k < 4; ++k) {
    const std::string m = std::to_string(k);
    CHECK(prefix_of(s.programs[static_cast<size_t>(k)]) == "BCAST DL" + m + " TF" + m + " DS" + m + " MFS" + m + " GS" + m);
  }
  // Every prefix step has no stage, BCAST no micro.
  for (const auto& prog : s.programs)
    for (const auto& slot : prog)
      if (slot && is_mpipe_layer_step(slot->op)) CHECK(slot->stage == kNone);
  CHECK(s.programs[0][0]->micro == kNone);

  Schedule two = generate("mpipe-transpose", mpipe(4, 1, 2, Overflow::Min, Tower::Trainable));
  CHECK(prefix_of(two.programs[2]) == "BCAST");
  CHECK(prefix_of(two.programs[3]) == "BCAST");
  CHECK(problems(s) == "");
  CHECK(problems(two) == "");
}

TEST_CASE("mpipe P4 V1 M8 full trainable matches the reference", "[generators][mpipe]") {
  Schedule s = generate("mpipe-transpose", mpipe(4, 1, 8, Overflow::Full, Tower::Trainable));
  const std::string r0 = joined(s.programs[0]);
  CHECK(starts_with(r0, "BCAST DL0 TF0 DL4 TF4 DR1 DR2 DR3 DR5 DR6 DR7 MFR1 MFR2 MFR3 MFR5 MFR6 MFR7 GR1 GR2 GR3 "
                        "GR5 GR6 GR7 F0s0 FS0s0 "));
  CHECK(contains(r0, " F5s0 FS5s0 BR0s0 F6s0 FS6s0 B0s0 TB0 BR1s0 F7s0 FS7s0 B1s0 TB1 BR2s0 B2s0 TB2 "));
  CHECK(ends_with(r0, " BR7s0 B7s0 TB7"));
  CHECK(joined(s.programs[1]) == "BCAST DL1 TF1 DL5 TF5 DS1 DS5 MFS1 MFS5 GS1 GS5 " + ref_body(1));
  CHECK(joined(s.programs[2]) == "BCAST DL2 TF2 DL6 TF6 DS2 DS6 MFS2 MFS6 GS2 GS6 " + ref_body(2));
  CHECK(joined(s.programs[3]) == "BCAST DL3 TF3 DL7 TF7 DS3 DS7 MFS3 MFS7 GS3 GS7 " + ref_body(3));
  // No inline TF on rank 0 in "full"; TF balanced: two per rank.
  for (int r = 0; r < 4; ++r) CHECK(count_op(s.programs[static_cast<size_t>(r)], Op::MPIPE_TRANSPOSE_FWD) == 2);
  CHECK(prefix_of(s.programs[0]).find("TF4") != std::string::npos);
  CHECK(problems(s) == "");
}

TEST_CASE("mpipe P4 V1 M8 min trainable loads the overflow micros inline on rank 0", "[generators][mpipe]") {
  Schedule s = generate("mpipe-transpose", mpipe(4, 1, 8, Overflow::Min, Tower::Trainable));
  const std::string r0 = joined(s.programs[0]);
  CHECK(starts_with(r0, "BCAST DL0 TF0 DR1 DR2 DR3 MFR1 MFR2 MFR3 GR1 GR2 GR3 F0s0 FS0s0 "));
  CHECK(contains(r0, " F3s0 FS3s0 DL4 TF4 F4s0 FS4s0 DL5 TF5 F5s0 FS5s0 BR0s0 DL6 TF6 F6s0 FS6s0 B0s0 TB0 BR1s0 "
                     "DL7 TF7 F7s0 FS7s0 B1s0 TB1 "));
  CHECK(ends_with(r0, " B7s0 TB7"));
  for (int k = 1; k < 4; ++k) {
    const std::string m = std::to_string(k);
    CHECK(joined(s.programs[static_cast<size_t>(k)]) ==
          "BCAST DL" + m + " TF" + m + " DS" + m + " MFS" + m + " GS" + m + " " + ref_body(k));
  }
  // Rank 0 owns {0, 4, 5, 6, 7} in "min".
  std::set<int> owned0;
  for (int m = 0; m < 8; ++m) if (s.owner_of(m) == 0) owned0.insert(m);
  CHECK(owned0 == std::set<int>{0, 4, 5, 6, 7});
  CHECK(problems(s) == "");
}

TEST_CASE("mpipe P4 V1 M8 frozen and T=0 towers match the reference", "[generators][mpipe]") {
  Schedule frozen = generate("mpipe-transpose", mpipe(4, 1, 8, Overflow::Full, Tower::Frozen));
  CHECK(joined(frozen.programs[0]) == "DL0 TF0 DL4 TF4 DR1 DR2 DR3 DR5 DR6 DR7 MFR1 MFR2 MFR3 MFR5 MFR6 MFR7 " + ref_body(0));
  CHECK(joined(frozen.programs[1]) == "DL1 TF1 DL5 TF5 DS1 DS5 MFS1 MFS5 " + ref_body(1));
  // The real-constructor counts: rank 0 DL x2, TF x2, MFR x6; rank 1 MFS x2.
  CHECK(count_op(frozen.programs[0], Op::DATA_LOAD) == 2);
  CHECK(count_op(frozen.programs[0], Op::MPIPE_TRANSPOSE_FWD) == 2);
  CHECK(count_op(frozen.programs[0], Op::MPIPE_FWD_RECV) == 6);
  CHECK(count_op(frozen.programs[1], Op::MPIPE_FWD_SEND) == 2);
  CHECK(problems(frozen) == "");

  Schedule none = generate("mpipe-transpose", mpipe(4, 1, 8, Overflow::Full, Tower::None));
  CHECK(joined(none.programs[0]) == "DL0 DL4 DR1 DR2 DR3 DR5 DR6 DR7 " + ref_body(0));
  CHECK(joined(none.programs[1]) == "DL1 DL5 DS1 DS5 " + ref_body(1));
  CHECK(problems(none) == "");
}

TEST_CASE("mpipe P4 V1 M8 owner_backward ships gradients back in a suffix, then GREDUCE", "[generators][mpipe]") {
  Schedule s = generate("mpipe-transpose", mpipe(4, 1, 8, Overflow::Full, Tower::Trainable, true));
  CHECK(s.mpipe->owner_backward);
  CHECK(joined(s.programs[0]) == "BCAST DL0 TF0 DL4 TF4 DR1 DR2 DR3 DR5 DR6 DR7 MFR1 MFR2 MFR3 MFR5 MFR6 MFR7 " +
                                     ref_body(0) + " GRADS1 GRADS2 GRADS3 GRADS5 GRADS6 GRADS7 GREDUCE");
  for (int k = 1; k < 4; ++k) {
    const std::string a = std::to_string(k), b = std::to_string(k + 4);
    CHECK(joined(s.programs[static_cast<size_t>(k)]) == "BCAST DL" + a + " TF" + a + " DL" + b + " TF" + b + " DS" + a +
                                                            " DS" + b + " MFS" + a + " MFS" + b + " " + ref_body(k) +
                                                            " GRADR+B" + a + " GRADR+B" + b + " GREDUCE");
  }
  CHECK(problems(s) == "");
}

TEST_CASE("mpipe structural rules hold in every mode", "[generators][mpipe]") {
  for (Overflow ov : {Overflow::Full, Overflow::Min})
    for (Tower t : {Tower::Trainable, Tower::Frozen, Tower::None})
      for (bool ob : {false, true})
        for (bool lm : {false, true}) {
          if (ob && t != Tower::Trainable) continue;
          for (int P : {1, 2, 3, 4, 8})
            for (int V : {1, 2, 3})
              for (int M : {1, 2, 3, 4, 6, 8, 12, 16}) {
                GenerateOptions o = mpipe(P, V, M, ov, t, ob);
                o.less_memory = lm;
                const Schedule s = generate("mpipe-transpose", o);
                GenerateOptions plain = opts(P, V, M);
                plain.less_memory = lm;
                const Schedule body = generate("interleaved-1f1b", plain);
                const int NT = std::min(P, M);
                INFO(to_string(ov) << " " << to_string(t) << " owner_backward=" << ob << " less_memory=" << lm
                                   << " P" << P << " V" << V << " M" << M);
                std::map<Op, int> ops;
                for (int r = 0; r < P; ++r) {
                  const Program& prog = s.programs[static_cast<size_t>(r)];
                  INFO("rank " << r);
                  // Stripping the MPipe layer gives back the interleaved body without bubbles.
                  Program stripped;
                  for (const auto& slot : prog)
                    if (slot && !is_mpipe_layer_step(slot->op)) stripped.push_back(slot);
                  CHECK(joined(stripped) == joined(body.programs[static_cast<size_t>(r)], false));
                  CHECK(std::all_of(prog.begin(), prog.end(), [](const Slot& x) { return x.has_value(); }));
                  for (const auto& slot : prog) ops[slot->op]++;
                  CHECK(count_op(prog, Op::MPIPE_PARAM_BROADCAST) == (t == Tower::Trainable ? 1 : 0));
                  CHECK(count_op(prog, Op::MPIPE_GRAD_REDUCE) == (ob ? 1 : 0));
                  if (ob) CHECK(prog.back()->op == Op::MPIPE_GRAD_REDUCE);
                  if (t == Tower::None)
                    for (const auto& slot : prog) CHECK(op_name(slot->op).substr(0, 6) != "MPIPE_");
                  for (size_t k = 0; k < prog.size(); ++k) {
                    const Step& st = *prog[k];
                    // TB right after every stage-0 backward (trainable, stage-0-backward mode).
                    if (st.op == Op::BWD && st.stage == 0 && t == Tower::Trainable && !ob) {
                      REQUIRE(k + 1 < prog.size());
                      CHECK(*prog[k + 1] == make_step(Op::MPIPE_TRANSPOSE_BWD, st.micro, kNone));
                    }
                    // "min": DL, TF right before each overflow F(stage 0).
                    if (st.op == Op::FWD && st.stage == 0 && ov == Overflow::Min && st.micro >= NT) {
                      const size_t back = t == Tower::None ? 1 : 2;
                      REQUIRE(k >= back);
                      CHECK(*prog[k - back] == make_step(Op::DATA_LOAD, st.micro, kNone));
                      if (t != Tower::None) CHECK(*prog[k - 1] == make_step(Op::MPIPE_TRANSPOSE_FWD, st.micro, kNone));
                    }
                  }
                }
                // Balanced sends and receives.
                for (const auto& i : step_table())
                  if (i.kind == StepKind::P2PSend) CHECK(ops[i.op] == ops[i.partner]);
                CHECK(ops[Op::DATA_LOAD] == M);
                CHECK(ops[Op::MPIPE_TRANSPOSE_FWD] == (t == Tower::None ? 0 : M));
                CHECK(ops[Op::MPIPE_TRANSPOSE_BWD] == (t == Tower::Trainable && !ob ? M : 0));
                if (ob) CHECK(ops[Op::MPIPE_GRAPH_SEND] + ops[Op::MPIPE_GRAPH_RECV] == 0);
                CHECK(problems(s) == "");
              }
        }
}

TEST_CASE("mpipe full and min give the same programs when M <= NT", "[generators][mpipe]") {
  for (int P = 1; P <= 6; ++P)
    for (int M = 1; M <= P; ++M)
      for (Tower t : {Tower::Trainable, Tower::Frozen, Tower::None}) {
        const Schedule full = generate("mpipe-transpose", mpipe(P, 2, M, Overflow::Full, t));
        const Schedule min = generate("mpipe-transpose", mpipe(P, 2, M, Overflow::Min, t));
        INFO("P" << P << " M" << M << " " << to_string(t));
        CHECK(full.programs == min.programs);
      }
}

TEST_CASE("mpipe P4 M4 trainable counts match the reference constructor test", "[generators][mpipe]") {
  Schedule s = generate("mpipe-transpose", mpipe(4, 1, 4, Overflow::Full, Tower::Trainable));
  for (const auto& prog : s.programs) CHECK(count_op(prog, Op::MPIPE_PARAM_BROADCAST) == 1);
  CHECK(count_op(s.programs[1], Op::MPIPE_GRAPH_SEND) == 1);
  CHECK(count_op(s.programs[0], Op::MPIPE_GRAPH_RECV) == 3);
  CHECK(count_op(s.programs[0], Op::MPIPE_TRANSPOSE_BWD) == 4);
}

TEST_CASE("mpipe forces overlap_b_f off", "[generators][mpipe]") {
  GenerateOptions o = mpipe(4, 2, 8, Overflow::Full, Tower::Trainable);
  o.overlap_b_f = true;
  Schedule s = generate("mpipe-transpose", o);
  for (const auto& prog : s.programs)
    for (const auto& slot : prog) CHECK_FALSE(is_composite(slot->op));
  CHECK(problems(s) == "");
}

// ---- refusals ----------------------------------------------------------------------------------

TEST_CASE("invalid parameter combinations are refused with a clear message", "[generators][refuse]") {
  auto refused = [](const std::string& family, const GenerateOptions& o) -> std::string {
    try {
      generate(family, o);
    } catch (const InputError& e) {
      return e.message();
    }
    return "(not refused)";
  };
  CHECK(refused("gpipe", opts(4, 2, 8)) == "gpipe: needs --vpp 1 (one stage per rank; got --vpp 2)");
  CHECK_THAT(refused("1f1b", opts(4, 3, 8)), Catch::StartsWith("1f1b: needs --vpp 1") && Catch::Contains("got --vpp 3"));

  GenerateOptions dxdw = opts(4, 2, 8);
  dxdw.dxdw_split = true;
  CHECK_THAT(refused("interleaved-1f1b", dxdw),
             Catch::StartsWith("interleaved-1f1b: --dxdw-split needs --overlap-b-f"));
  CHECK_THAT(refused("mpipe-transpose", dxdw),
             Catch::StartsWith("mpipe-transpose: --dxdw-split needs --overlap-b-f, which MPipe Transpose forces off"));

  GenerateOptions both = opts(4, 2, 8);
  both.less_memory = both.overlap_b_f = true;
  CHECK_THAT(refused("interleaved-1f1b", both),
             Catch::StartsWith("interleaved-1f1b: --less-memory cannot be combined with --overlap-b-f"));

  CHECK(refused("mpipe-transpose", mpipe(4, 1, 8, Overflow::Full, Tower::Frozen, true)) ==
        "mpipe-transpose: --owner-backward needs a trainable tower (got --tower frozen): there is no tower "
        "gradient to ship back");
  CHECK_THAT(refused("mpipe-transpose", mpipe(4, 1, 8, Overflow::Min, Tower::None, true)),
             Catch::Contains("--owner-backward needs a trainable tower (got --tower none)"));
}

TEST_CASE("--group-size is refused where Megatron's interleaving has no groups, and G = P is the default order",
          "[generators][refuse][interleaved]") {
  auto refused = [](const std::string& family, const GenerateOptions& o) -> std::string {
    try {
      generate(family, o);
    } catch (const InputError& e) {
      return e.message();
    }
    return "(not refused)";
  };
  GenerateOptions g = opts(4, 2, 8);
  g.group_size = 4;
  CHECK_THAT(refused("mpipe-transpose", g), Catch::Contains("--group-size is Megatron-LM's "
                                                             "microbatch_group_size_per_vp_stage; it applies to "
                                                             "interleaved-1f1b, combined-1f1b"));
  GenerateOptions v1 = opts(4, 1, 8);
  v1.group_size = 4;
  CHECK_THAT(refused("interleaved-1f1b", v1), Catch::Contains("--group-size needs --vpp >= 2"));
  GenerateOptions lm = g;
  lm.less_memory = true;
  CHECK_THAT(refused("interleaved-1f1b", lm), Catch::Contains("which has no --less-memory"));
  GenerateOptions obf = g;
  obf.overlap_b_f = true;
  CHECK_THAT(refused("interleaved-1f1b", obf), Catch::Contains("which has no --overlap-b-f"));
  // G = P: PyTorch's (and hyper-parallel's) rounds of P micro-batches, where M is a multiple of P
  // (Megatron refuses G = P otherwise: the last group would hold fewer than P).
  for (int P = 2; P <= 6; ++P)
    for (int V = 2; V <= 3; ++V)
      for (int M = P; M <= 4 * P; M += P) {
        INFO("P=" << P << " V=" << V << " M=" << M);
        GenerateOptions a = opts(P, V, M), b = a;
        b.group_size = P;
        CHECK(generate("interleaved-1f1b", a).programs == generate("interleaved-1f1b", b).programs);
      }
}

TEST_CASE("every family with --data-steps verifies, data caches included, and --no-data-steps is the plain form",
          "[generators][data-steps]") {
  int checked = 0;
  for (const auto& g : generators()) {
    for (int P = 1; P <= 4; ++P)
      for (int V = g.vpp_min; V <= (g.vpp_max ? g.vpp_max : 2); ++V)
        for (int M = std::max(1, g.micro_per_rank_min * P); M <= 2 * P + 1; ++M) {
          GenerateOptions o = opts(P, V, M);
          o.data_steps = true;
          INFO(g.name << " P=" << P << " V=" << V << " M=" << M);
          Schedule s;
          try {
            s = generate(std::string(g.name), o);
          } catch (const InputError&) {
            continue;  // M the family does not accept (interleaved-zb)
          }
          CHECK(s.data_steps == (g.name != "mpipe-transpose" || P > 1));
          const CheckReport r = verify(s);
          CHECK(r.ok());
          GenerateOptions plain = o;
          plain.data_steps = false;
          const Schedule p = generate(std::string(g.name), plain);
          CHECK_FALSE(p.data_steps);
          CHECK(verify(p).ok());
          ++checked;
        }
  }
  CHECK(checked > 300);
}

// ---- FSDP steps (PyTorch's lowering) ----------------------------------------------------------

namespace {

// A program's stage compute and FSDP steps in order (P2P dropped), in grid notation.
std::string compute_and_fsdp(const Program& p) {
  std::string out;
  for (const auto& slot : p) {
    if (!slot) continue;
    const bool dp = info(slot->op).collective == CollectiveScope::DataParallel;
    std::vector<Step> leaves = is_composite(slot->op) ? std::vector<Step>(slot->sub_steps()) : std::vector<Step>{*slot};
    for (const Step& st : leaves)
      if (dp || is_body_compute(st.op)) out += (out.empty() ? "" : " ") + short_label(st);
  }
  return out;
}

std::string fsdp_labels(const std::vector<Step>& steps) {
  std::string out;
  for (const auto& st : steps) out += (out.empty() ? "" : " ") + short_label(st);
  return out;
}

}  // namespace

TEST_CASE("add_fsdp_steps keeps PyTorch's window of 3 gathered stages and reduces after the last backward",
          "[generators][fsdp]") {
  // looped-bfs P=1 V=4 M=1: F s0..s3, then B s3..s0. _add_unshard_reshard(max_active_stages=3)
  // by hand: before F s0 the next three stages are 0,1,2; before F s1 they are 1,2,3 (evict
  // 0, fetch 3); before B s2 they are 2,1,0 (evict 3, fetch 0); then 1,0 and 0; all resharded
  // at the end. _add_reduce_grad: REDUCE_GRAD of a stage right after its M-th (only) backward.
  const Schedule s = add_fsdp_steps(generate("looped-bfs", opts(1, 4, 1)));
  const auto U = [](int st) { return make_step(Op::FSDP_UNSHARD, kNone, st); };
  const auto R = [](int st) { return make_step(Op::FSDP_RESHARD, kNone, st); };
  const auto G = [](int st) { return make_step(Op::FSDP_REDUCE_GRAD, kNone, st); };
  const auto F = [](int st) { return make_step(Op::FWD, 0, st); };
  const auto B = [](int st) { return make_step(Op::BWD, 0, st); };
  const std::string want = fsdp_labels({U(0), U(1), U(2), F(0), R(0), U(3), F(1), F(2), F(3), B(3), G(3), R(3), U(0), B(2),
                                   G(2), R(2), B(1), G(1), R(1), B(0), G(0), R(0)});
  CHECK(compute_and_fsdp(s.programs[0]) == want);
}

TEST_CASE("add_fsdp_steps on 1f1b P=2 M=2 places the FSDP steps where PyTorch's lowered CSV has them",
          "[generators][fsdp]") {
  // tests/data/schedules/1f1b_2rank_comms.csv: PyTorch's Schedule1F1B lowered with comms.
  const char* d = std::getenv("PPSCHED_TEST_DATA");
  REQUIRE(d != nullptr);
  const Schedule torch = read_schedule_file(std::string(d) + "/schedules/1f1b_2rank_comms.csv");
  const Schedule ours = add_fsdp_steps(generate("1f1b", opts(2, 1, 2)));
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(compute_and_fsdp(ours.programs[static_cast<size_t>(r)]) == compute_and_fsdp(torch.programs[static_cast<size_t>(r)]));
  }
  // REDUCE_GRAD follows the last backward's hand-over send (PyTorch appends a send right after
  // its producer), so the reduction never delays the previous stage.
  const Program& r1 = ours.programs[1];
  for (size_t i = 0; i < r1.size(); ++i)
    if (r1[i] && r1[i]->op == Op::FSDP_REDUCE_GRAD) {
      REQUIRE(i >= 1);
      CHECK(r1[i - 1]->op == Op::BWD_SEND);
    }
}

TEST_CASE("every family with FSDP steps verifies, one REDUCE_GRAD per stage after its last backward",
          "[generators][fsdp]") {
  struct Shape {
    const char* family;
    int V;
    bool overlap = false;
  };
  for (const Shape& sh : {Shape{"gpipe", 1}, Shape{"1f1b", 1}, Shape{"interleaved-1f1b", 2}, Shape{"interleaved-1f1b", 3, true},
                          Shape{"looped-bfs", 3}, Shape{"zb-h1", 1}, Shape{"zbv", 2}, Shape{"dualpipev", 2},
                          Shape{"mpipe-transpose", 2}})
    for (int P : {1, 2, 4}) {
      GenerateOptions o = opts(P, sh.V, 2 * P * sh.V);
      o.overlap_b_f = o.dxdw_split = sh.overlap;
      INFO(sh.family << " P=" << P << " V=" << sh.V);
      const Schedule s = add_fsdp_steps(generate(sh.family, o));
      CHECK(problems(s) == "");
      CHECK(verify(s, CheckOptions{}).ok());
      for (int r = 0; r < P; ++r) {
        std::map<int, int> reduced, gathered;
        std::map<int, int> last_backward, reduce_at;  // position among the rank's slots
        const Program& prog = s.programs[static_cast<size_t>(r)];
        for (int i = 0; i < static_cast<int>(prog.size()); ++i) {
          if (!prog[static_cast<size_t>(i)]) continue;
          const Step& st = *prog[static_cast<size_t>(i)];
          if (st.op == Op::FSDP_REDUCE_GRAD) ++reduced[st.stage], reduce_at[st.stage] = i;
          if (st.op == Op::FSDP_UNSHARD) CHECK(++gathered[st.stage] == 1);
          if (st.op == Op::FSDP_RESHARD) CHECK(--gathered[st.stage] == 0);
          std::vector<Step> leaves = is_composite(st.op) ? std::vector<Step>(st.sub_steps()) : std::vector<Step>{st};
          for (const Step& leaf : leaves) {
            if (is_body_compute(leaf.op)) CHECK(gathered[leaf.stage] == 1);  // computes on gathered parameters
            if (leaf.op == Op::BWD || leaf.op == Op::BWD_WEIGHT) last_backward[leaf.stage] = i;
          }
        }
        for (int st : s.stages_of(r)) {
          INFO("stage " << st);
          CHECK(reduced[st] == 1);
          CHECK(gathered[st] == 0);
          CHECK(reduce_at[st] > last_backward[st]);
        }
      }
    }
  const InputError twice = ppsched::testing::expect_error([] { add_fsdp_steps(add_fsdp_steps(generate("1f1b", opts(2, 1, 2)))); });
  CHECK(twice.where().rank == 0);
  CHECK_THAT(twice.message(), Catch::Contains("already has FSDP steps"));
}
