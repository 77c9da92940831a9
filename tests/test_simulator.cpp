#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "checkers/checks.hpp"
#include "schedule/comm_insertion.hpp"
#include "schedule/errors.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/generators/generator.hpp"
#include "sim/engine.hpp"
#include "sim/tower_on_stage0.hpp"

using namespace ppsched;

namespace {

// Uniform costs, free communication: F, B (= I + W) per stage, nothing else costs anything.
CostModel uniform(double F, double B, double latency = 0.0) {
  CostModel c;
  c.source = "test";
  c.fwd = StageValue::scalar(F);
  c.bwd = StageValue::scalar(B);
  c.bwd_input = StageValue::scalar(B / 2);
  c.bwd_weight = StageValue::scalar(B / 2);
  c.links.intra_node.latency_ms = latency;
  c.links.inter_node.latency_ms = latency;
  c.meta_bytes = 0;
  return c;
}

Schedule gen(const char* family, int P, int M, int V = 1) {
  GenerateOptions g;
  g.pp = P;
  g.micro = M;
  g.vpp = V;
  return generate(family, g);
}

RunRecord run(const Schedule& s, const CostModel& c) {
  SimOptions o;
  o.record_trace = true;
  return simulate(s, c, o);
}

std::string data(const std::string& rel) {
  const char* d = std::getenv("PPSCHED_TEST_DATA");
  return std::string(d ? d : "tests/data") + "/" + rel;
}

}  // namespace

namespace {
// x mod n for any int x (std::abs(INT_MIN) is undefined).
int mod(int x, int n) { return static_cast<int>(static_cast<unsigned>(x) % static_cast<unsigned>(n)); }
}  // namespace

TEST_CASE("GPipe and 1F1B take (M + P - 1)(F + B) with uniform costs and free communication", "[simulator]") {
  for (const char* fam : {"gpipe", "1f1b"})
    for (int P = 1; P <= 6; ++P)
      for (int M = P; M <= 3 * P; M += std::max(1, P / 2)) {
        INFO(fam << " P=" << P << " M=" << M);
        RunRecord r = run(gen(fam, P, M), uniform(1.0, 2.0));
        REQUIRE(r.completed);
        CHECK(r.makespan_ms == Approx((M + P - 1) * 3.0));
      }
}

TEST_CASE("a posted receive's buffer is live from its post: under overlap_p2p no rank's memory drops below what it holds for the step, and none is left live at the end", "[simulator]") {
  // Before, a posted receive's buffer was never delivered, while its consumer freed it: the live
  // bytes went below zero and the breakdown showed negative buffers (-32 MiB on PyTorch's
  // Interleaved1F1B at PP 2).
  for (const char* name : {"Interleaved1F1B_pp2_m4", "Interleaved1F1B_pp4_m8", "ZBVZeroBubble_pp2_m4", "DualPipeV_pp2_m4",
                           "InterleavedZeroBubble_pp3_m6"}) {
    const Schedule s = read_schedule_file(data(std::string("schedules/pytorch_comms/") + name + ".csv"));
    SimOptions o;
    o.record_trace = true;
    o.check.overlap_p2p = true;
    o.check.backend = P2PBackend::Gloo;
    const RunRecord r = simulate(s, CostModel{}, o);
    INFO(name);
    REQUIRE(r.completed);
    for (const RankSummary& rk : r.ranks) {
      INFO("rank " << rk.rank);
      const int64_t resident = rk.memory.weights_bytes + rk.memory.grads_bytes + rk.memory.optimizer_bytes;
      CHECK(rk.memory.at_peak_buffers_bytes >= 0);
      CHECK(rk.peak_memory_bytes == resident + rk.memory.at_peak_activations_bytes + rk.memory.at_peak_buffers_bytes +
                                        rk.memory.at_peak_gathered_bytes + rk.memory.at_peak_workspace_bytes);
      int64_t lowest = INT64_MAX, last = -1;
      for (const MemorySample& m : r.memory)
        if (m.rank == rk.rank) {
          lowest = std::min(lowest, m.bytes);
          last = m.bytes;
        }
      CHECK(lowest >= resident);
      CHECK(last == resident);
    }
  }
}

TEST_CASE("per-micro compute times are priced per micro-batch", "[simulator]") {
  // One rank, GPipe: the makespan is the sum of every step's time.
  CostModel c = uniform(1.0, 2.0);
  c.fwd.rows = {{1.0, 2.0, 3.0, 4.0}};
  RunRecord r = run(gen("gpipe", 1, 4), c);
  REQUIRE(r.completed);
  CHECK(r.makespan_ms == Approx(1 + 2 + 3 + 4 + 4 * 2.0));
  // Equal per-micro rows price like the scalar (the engine's per-(stage, op) table).
  CostModel rows = uniform(1.0, 2.0), scalar = uniform(1.0, 2.0);
  rows.fwd.rows = {{1.0, 1.0, 1.0, 1.0, 1.0, 1.0}, {1.0, 1.0, 1.0, 1.0, 1.0, 1.0}};
  rows.activation_bytes.rows = {{1e9, 1e9, 1e9, 1e9, 1e9, 1e9}, {1e9, 1e9, 1e9, 1e9, 1e9, 1e9}};
  scalar.activation_bytes = StageValue::scalar(1e9);
  for (CostModel* m : {&rows, &scalar}) {
    m->links.intra_node.bandwidth_GBps = 100.0;
    m->links.inter_node.bandwidth_GBps = 100.0;
  }
  const Schedule s = gen("1f1b", 2, 6);
  RunRecord a = run(s, rows), b = run(s, scalar);
  REQUIRE(a.completed);
  REQUIRE(b.completed);
  CHECK(a.makespan_ms == Approx(b.makespan_ms));
  CHECK(a.makespan_ms > (6 + 2 - 1) * 3.0);  // the 10 ms activation transfers are on the path
}

TEST_CASE("1F1B's bubble fraction is (P - 1) / (M + P - 1) on every rank", "[simulator]") {
  for (int P = 2; P <= 6; ++P)
    for (int M = P; M <= 3 * P; ++M) {
      RunRecord r = run(gen("1f1b", P, M), uniform(1.5, 2.5));
      for (const auto& rank : r.ranks) {
        INFO("P=" << P << " M=" << M << " rank " << rank.rank);
        CHECK(rank.bubble_fraction == Approx(double(P - 1) / (M + P - 1)));
      }
    }
}

TEST_CASE("interleaving over V stages per rank divides 1F1B's bubble by V", "[simulator]") {
  // The same model cut into P*V stages: each stage costs F/V and B/V.
  for (int P : {2, 4})
    for (int V : {2, 3, 4})
      for (int M : {P, 2 * P, 4 * P}) {
        const double F = 1.0, B = 2.0;
        RunRecord flat = run(gen("1f1b", P, M), uniform(F, B));
        RunRecord inter = run(gen("interleaved-1f1b", P, M, V), uniform(F / V, B / V));
        REQUIRE(inter.completed);
        const double work = M * (F + B);
        INFO("P=" << P << " V=" << V << " M=" << M << " makespan " << inter.makespan_ms);
        CHECK(flat.makespan_ms - work == Approx((P - 1) * (F + B)));
        CHECK(inter.makespan_ms - work == Approx((P - 1) * (F + B) / V));
      }
}

TEST_CASE("ZB-H1's bubble is a third of 1F1B's when F = I = W", "[simulator]") {
  for (int P = 2; P <= 8; ++P)
    for (int M = P; M <= 3 * P; M += P) {
      RunRecord one = run(gen("1f1b", P, M), uniform(1.0, 2.0));
      RunRecord zb = run(gen("zb-h1", P, M), uniform(1.0, 2.0));
      REQUIRE(zb.completed);
      for (int r = 0; r < P; ++r) {
        INFO("P=" << P << " M=" << M << " rank " << r);
        CHECK(zb.ranks[static_cast<size_t>(r)].idle_ms == Approx(one.ranks[static_cast<size_t>(r)].idle_ms / 3));
      }
    }
}

TEST_CASE("1F1B keeps min(P - r, M) activations live on rank r in simulated time", "[simulator]") {
  for (int P = 1; P <= 5; ++P)
    for (int M = 1; M <= 2 * P; ++M) {
      CostModel c = uniform(1.0, 2.0);
      c.kept_activation_bytes = StageValue::scalar(1000);  // the memory model comes from the costs
      c.activation_bytes = StageValue::scalar(0);          // no receive buffers
      c.gradient_bytes = StageValue::scalar(0);
      RunRecord r = simulate(gen("1f1b", P, M), c);
      for (int rank = 0; rank < P; ++rank) {
        INFO("P=" << P << " M=" << M << " rank " << rank);
        CHECK(r.ranks[static_cast<size_t>(rank)].peak_memory_bytes == 1000 * std::min(P - rank, M));
      }
    }
}

TEST_CASE("a latency c adds exactly c per transfer on the critical path", "[simulator]") {
  for (const char* fam : {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1"})
    for (int P : {2, 3, 4})
      for (int M : {P, 2 * P}) {
        Schedule s = gen(fam, P, M, std::string(fam) == "interleaved-1f1b" ? 2 : 1);
        const double c = 0.25;
        RunRecord free = run(s, uniform(1.0, 2.0));
        RunRecord slow = run(s, uniform(1.0, 2.0, c));
        int transfers = 0;
        for (const auto& cp : slow.critical_path) transfers += cp.lane == Lane::Send || cp.lane == Lane::Recv;
        INFO(fam << " P=" << P << " M=" << M << " transfers on the critical path " << transfers);
        CHECK(transfers > 0);
        CHECK(slow.makespan_ms == Approx(free.makespan_ms + transfers * c));
      }
}

TEST_CASE("compute_blocks_host (a CPU run): nothing is posted while the rank computes, and posting later only delays",
          "[simulator]") {
  struct Fam {
    const char* name;
    int V;
  };
  // Whether some communication slice of a rank starts strictly inside one of its computes.
  auto posts_inside_a_compute = [](const RunRecord& r) {
    for (const TimedSlice& x : r.slices) {
      if (x.lane == Lane::Compute) continue;
      for (const TimedSlice& c : r.slices)
        if (c.rank == x.rank && c.lane == Lane::Compute && c.start_ms < x.start_ms - 1e-9 &&
            x.start_ms < c.end_ms - 1e-9)
          return true;
    }
    return false;
  };
  int differs = 0, aheads = 0;
  for (const Fam f : {Fam{"gpipe", 1}, Fam{"1f1b", 1}, Fam{"interleaved-1f1b", 2}, Fam{"zb-h1", 1}, Fam{"zbv", 2},
                      Fam{"dualpipev", 2}})
    for (int P : {2, 4}) {
      const Schedule s = gen(f.name, P, 2 * P, f.V);
      CostModel gpu = uniform(1.0, 2.0, 0.05);
      gpu.protocol.eager_threshold_bytes = -1;  // every payload rendezvous, as on Gloo
      CostModel cpu = gpu;
      cpu.protocol.compute_blocks_host = true;
      const RunRecord a = run(s, gpu), b = run(s, cpu);
      INFO(f.name << " P=" << P);
      REQUIRE(a.completed);
      REQUIRE(b.completed);
      CHECK(b.makespan_ms >= a.makespan_ms - 1e-9);
      differs += b.makespan_ms > a.makespan_ms + 1e-9;
      CHECK_FALSE(posts_inside_a_compute(b));
      // Without the flag the host runs ahead of its compute stream: posts fall inside a compute.
      aheads += posts_inside_a_compute(a);
    }
  // The measured zbv cell of the calibration (PP=2, M=8) is where it matters most; here too.
  CHECK(differs > 0);
  CHECK(aheads > 0);
}

TEST_CASE("background_progress false (Gloo, a core per rank): a receiver takes a payload in only while it waits",
          "[simulator]") {
  struct Fam {
    const char* name;
    int V;
  };
  constexpr double eps = 1e-9;
  int delayed = 0, slower = 0;
  for (const bool overlap : {false, true})
    for (const Fam f : {Fam{"gpipe", 1}, Fam{"1f1b", 1}, Fam{"interleaved-1f1b", 2}, Fam{"zb-h1", 1},
                        Fam{"zbv", 2}, Fam{"dualpipev", 2}})
      for (int P : {2, 4}) {
        const Schedule s = gen(f.name, P, 2 * P, f.V);
        CostModel cpu = uniform(1.0, 2.0, 0.05);
        cpu.protocol.eager_threshold_bytes = -1;  // every payload rendezvous, as on Gloo
        cpu.protocol.compute_blocks_host = true;
        CostModel gloo = cpu;
        gloo.protocol.background_progress = false;
        SimOptions o;
        o.record_trace = true;
        o.check.overlap_p2p = overlap;
        const RunRecord a = simulate(s, cpu, o), b = simulate(s, gloo, o);
        // deferred_start_ms: a transfer that waited for its receiver starts that much later still.
        CostModel late = gloo;
        late.protocol.deferred_start_ms = 0.25;
        const RunRecord d = simulate(s, late, o);
        REQUIRE(d.completed);
        CHECK(d.makespan_ms >= b.makespan_ms - eps);
        INFO(f.name << " P=" << P << (overlap ? " --overlap-p2p" : " blocking"));
        REQUIRE(a.completed);
        REQUIRE(b.completed);
        CHECK(b.makespan_ms >= a.makespan_ms - eps);
        REQUIRE(b.flows.size() == a.flows.size());
        // Whether rank computes at t; whether one of its slices (of any lane) ends at t.
        const auto computes_at = [&](int rank, double t) {
          for (const TimedSlice& c : b.slices)
            if (c.rank == rank && c.lane == Lane::Compute && c.start_ms < t - eps && t < c.end_ms - eps) return true;
          return false;
        };
        const auto ends_at = [&](int rank, double t) {
          for (const TimedSlice& c : b.slices)
            if (c.rank == rank && std::abs(c.end_ms - t) < eps) return true;
          return false;
        };
        for (const MessageFlow& fl : b.flows) {
          const TimedSlice& snd = b.slices[static_cast<size_t>(fl.send_slice)];
          const TimedSlice& rcv = b.slices[static_cast<size_t>(fl.recv_slice)];
          const double posted = std::max(snd.start_ms, rcv.start_ms);
          INFO("flow " << fl.id << " r" << snd.rank << " -> r" << rcv.rank << " posted " << posted << " leaves "
                       << fl.leave_ms);
          CHECK(fl.leave_ms >= posted - eps);
          CHECK_FALSE(computes_at(rcv.rank, fl.leave_ms));  // never while the receiver computes
          if (fl.leave_ms > posted + eps) {
            ++delayed;
            CHECK(ends_at(rcv.rank, fl.leave_ms));  // held back until the receiver went to wait
          }
        }
        for (const MessageFlow& fl : d.flows) {
          const TimedSlice& snd = d.slices[static_cast<size_t>(fl.send_slice)];
          const TimedSlice& rcv = d.slices[static_cast<size_t>(fl.recv_slice)];
          const double posted = std::max(snd.start_ms, rcv.start_ms);
          if (fl.leave_ms <= posted + eps) continue;
          INFO("deferred flow " << fl.id << " leaves " << fl.leave_ms);
          bool waited = false;  // the receiver went to wait 0.25 ms before it left
          for (const TimedSlice& c : d.slices)
            waited = waited || (c.rank == rcv.rank && std::abs(c.end_ms + 0.25 - fl.leave_ms) < eps);
          CHECK(waited);
        }
        // A blocking receive waits off the compute: rendezvous runs do not change.
        if (!overlap) CHECK(b.makespan_ms == Approx(a.makespan_ms));
        if (!overlap) CHECK(d.makespan_ms == Approx(a.makespan_ms));
        slower += b.makespan_ms > a.makespan_ms + eps;
      }
  // Receives posted early (--overlap-p2p) are where it matters.
  CHECK(delayed > 0);
  CHECK(slower > 0);
}

TEST_CASE("send_handoff_ms (Gloo): a blocking send returns that long after its transfer starts (at most at the "
          "arrival), the receive a transfer time after", "[simulator]") {
  constexpr double lat = 0.05, eps = 1e-9;
  int faster = 0;
  for (const char* fam : {"gpipe", "1f1b", "zb-h1", "dualpipev"})
    for (int P : {2, 4}) {
      const Schedule s = gen(fam, P, 2 * P, std::string(fam) == "dualpipev" ? 2 : 1);
      CostModel nccl = uniform(1.0, 2.0, lat);
      nccl.protocol.eager_threshold_bytes = -1;
      nccl.activation_bytes = nccl.gradient_bytes = StageValue::scalar(1e6);
      nccl.links.intra_node.bandwidth_GBps = nccl.links.inter_node.bandwidth_GBps = 1.0;  // 1 ms per payload
      CostModel gloo = nccl;
      gloo.protocol.send_handoff_ms = 0.25;
      const RunRecord a = run(s, nccl), b = run(s, gloo);
      INFO(fam << " P=" << P);
      REQUIRE(a.completed);
      REQUIRE(b.completed);
      CHECK(b.makespan_ms <= a.makespan_ms + eps);
      faster += b.makespan_ms < a.makespan_ms - eps;
      int payloads = 0;
      for (const MessageFlow& f : b.flows) {
        const TimedSlice& snd = b.slices[static_cast<size_t>(f.send_slice)];
        const TimedSlice& rcv = b.slices[static_cast<size_t>(f.recv_slice)];
        if (rcv.meta) continue;
        ++payloads;
        INFO("flow " << f.id);
        CHECK(snd.end_ms == Approx(f.leave_ms + 0.25));
        CHECK(rcv.end_ms == Approx(f.leave_ms + lat + 1.0));
        CHECK(f.arrive_ms == Approx(rcv.end_ms));
      }
      CHECK(payloads > 0);
      // A hand-off longer than the transfer ends with the arrival: a send never outlasts it.
      gloo.protocol.send_handoff_ms = 5.0;
      const RunRecord c = run(s, gloo);
      REQUIRE(c.completed);
      CHECK(c.makespan_ms == Approx(a.makespan_ms));
      for (const MessageFlow& f : c.flows)
        if (!c.slices[static_cast<size_t>(f.recv_slice)].meta)
          CHECK(c.slices[static_cast<size_t>(f.send_slice)].end_ms == Approx(f.arrive_ms));
    }
  CHECK(faster > 0);
}

TEST_CASE("the critical path runs from the first step to the last without gaps", "[simulator]") {
  RunRecord r = run(gen("1f1b", 4, 8), uniform(1.0, 2.0, 0.1));
  REQUIRE(!r.critical_path.empty());
  CHECK(r.critical_path.front().start_ms == Approx(0.0));
  CHECK(r.critical_path.back().end_ms == Approx(r.makespan_ms));
  for (size_t k = 1; k < r.critical_path.size(); ++k) {
    INFO("k=" << k);
    CHECK(r.critical_path[k].start_ms == Approx(r.critical_path[k - 1].end_ms).margin(1e-9));
  }
}

TEST_CASE("MPipe Transpose shortens the warm-up of the same interleaved body", "[simulator]") {
  // Interleaved: stage 0 runs the tower (T ms) for every micro-batch inside its FWD/BWD.
  // MPipe: owners run the tower in parallel in the prefix; rank 0 recomputes it in TB.
  const int P = 4, M = 8, V = 2;
  const double F = 1.0, B = 2.0, T = 1.5;
  CostModel plain = uniform(F, B);
  plain.fwd.rows = {std::vector<double>(1, F + T)};
  for (int st = 1; st < P * V; ++st) plain.fwd.rows.push_back({F});
  plain.bwd.rows = {std::vector<double>(1, B + 2 * T)};
  for (int st = 1; st < P * V; ++st) plain.bwd.rows.push_back({B});
  CostModel mpipe = uniform(F, B);
  mpipe.tower_fwd = StageValue::scalar(T);
  mpipe.tower_bwd = StageValue::scalar(3 * T);  // recompute + backward on rank 0
  GenerateOptions g;
  g.pp = P;
  g.vpp = V;
  g.micro = M;
  g.tower = Tower::Frozen;  // no tower backward on rank 0: the pure warm-up gain
  RunRecord a = run(gen("interleaved-1f1b", P, M, V), plain);
  CostModel frozen_plain = plain;
  frozen_plain.bwd.rows[0] = {B};
  RunRecord a_frozen = run(gen("interleaved-1f1b", P, M, V), frozen_plain);
  RunRecord b = run(generate("mpipe-transpose", g), mpipe);
  REQUIRE(b.completed);
  INFO("interleaved " << a_frozen.makespan_ms << " ms, mpipe " << b.makespan_ms << " ms");
  // The tower forwards leave rank 0's stage-0 FWDs: only the prefix remains, M/P of them per
  // rank and in parallel. Measured here: 66.5 ms -> 60 ms (P=4, V=2, M=8, T=1.5 ms).
  CHECK(b.makespan_ms < a_frozen.makespan_ms);
  CHECK(a_frozen.makespan_ms - b.makespan_ms >= 4 * T - 1e-9);
  (void)a;
}

TEST_CASE("a deadlock stops the simulation with the wait-for cycle", "[simulator]") {
  Schedule s = read_schedule_file(data("bad/both_send_first.json"));
  CostModel c = uniform(1.0, 2.0);
  c.protocol.eager_threshold_bytes = -1;  // every payload rendezvous
  RunRecord r = run(s, c);
  CHECK(!r.completed);
  REQUIRE(!r.check.ok());
  CHECK(r.check.violations[0].kind == ViolationKind::Deadlock);
  CHECK(r.check.violations[0].ranks == std::vector<int>{0, 1});
  CHECK(!r.slices.empty());  // the trace up to the stop
}

TEST_CASE("without the checks (a search's screening run) the timed run is the same, and says it was not checked",
          "[simulator]") {
  const Schedule s = gen("zbv", 4, 8, 2);
  const CostModel c = default_cost_model(s.stages);
  SimOptions checked, screened;
  checked.record_trace = screened.record_trace = false;
  screened.run_checks = false;
  const RunRecord a = simulate(s, c, checked), b = simulate(s, c, screened);
  CHECK(a.checked);
  CHECK_FALSE(b.checked);
  CHECK(b.check.violations.empty());
  CHECK(a.completed == b.completed);
  CHECK(a.makespan_ms == b.makespan_ms);
  // A deadlock stops it as before, with nothing to explain it (and no engine-bug throw).
  Schedule bad = read_schedule_file(data("bad/both_send_first.json"));
  CostModel rendezvous = uniform(1.0, 2.0);
  rendezvous.protocol.eager_threshold_bytes = -1;
  const RunRecord d = simulate(bad, rendezvous, screened);
  CHECK_FALSE(d.completed);
  CHECK_FALSE(d.checked);
}

TEST_CASE("a timing-only run (a search's screen) has the full run's makespan and completion, and nothing else",
          "[simulator]") {
  for (const auto& [family, vpp] : {std::pair<const char*, int>{"zbv", 2}, {"interleaved-1f1b", 2}, {"dualpipev", 2}, {"zb-h1", 1}}) {
    const Schedule s = gen(family, 4, 8, vpp);
    const CostModel c = default_cost_model(s.stages);
    for (CommMode mode : {CommMode::Eager, CommMode::Rendezvous}) {
      SimOptions full, timing;
      full.check.comm = timing.check.comm = mode;
      full.check.memory = timing.check.memory = c.memory_model(s.stages);
      timing.timing_only = true;  // whatever record_trace and run_checks say (both true here)
      const RunRecord a = simulate(s, c, full), b = simulate(s, c, timing);
      INFO(family << (mode == CommMode::Eager ? " eager" : " rendezvous"));
      CHECK(a.completed == b.completed);
      CHECK(a.makespan_ms == b.makespan_ms);
      CHECK_FALSE(b.checked);
      CHECK(b.slices.empty());
      CHECK(b.critical_path.empty());
      CHECK(b.links.empty());
      for (const RankSummary& rk : b.ranks) CHECK(rk.peak_memory_bytes == 0);  // not accounted
    }
  }
}

TEST_CASE("the simulation reports the checks' verdicts on a run that stops, without replaying again", "[simulator]") {
  // A second receive nobody sends: the timed run stops, the matching pass explains why, and
  // the stuck set is not reported again as a deadlock (as `ppsched check` reports it).
  Schedule s = read_schedule_file(data("bad/duplicated_recv.json"));
  RunRecord r = run(s, uniform(1.0, 2.0));
  CHECK(!r.completed);
  CHECK(!r.check.completes);
  const CheckReport alone = verify(s);
  REQUIRE(r.check.violations.size() == alone.violations.size());
  for (size_t k = 0; k < alone.violations.size(); ++k) {
    CHECK(r.check.violations[k].kind == alone.violations[k].kind);
    CHECK(r.check.violations[k].message == alone.violations[k].message);
  }
}

TEST_CASE("the simulation is deterministic", "[simulator]") {
  rc::prop("same inputs, same timeline", [](int pick, int P, int M, double f) {
    const char* fams[] = {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev", "mpipe-transpose", "looped-bfs"};
    const char* fam = fams[static_cast<size_t>(mod(pick, 8))];
    GenerateOptions g;
    g.pp = 1 + mod(P, 5);
    g.vpp = std::string(fam) == "zbv" || std::string(fam) == "dualpipev" || std::string(fam) == "looped-bfs" ? 2 : 1;
    g.micro = std::max(2 * g.pp, 1 + mod(M, 12));
    Schedule s = generate(fam, g);
    CostModel c = uniform(0.5 + std::fmod(std::abs(f), 3.0), 1.0, 0.01);
    RunRecord a = run(s, c), b = run(s, c);
    RC_ASSERT(a.makespan_ms == b.makespan_ms);
    RC_ASSERT(a.slices.size() == b.slices.size());
    for (size_t k = 0; k < a.slices.size(); ++k) {
      RC_ASSERT(a.slices[k].start_ms == b.slices[k].start_ms);
      RC_ASSERT(a.slices[k].end_ms == b.slices[k].end_ms);
    }
    RC_ASSERT(a.completed);
  });
}

namespace {
// The first field in which two runs of one schedule differ ("" when none): completion, makespan,
// events, each rank's busy and end time and peak memory, the whole critical path, the links.
std::string first_difference(const RunRecord& a, const RunRecord& b) {
  if (a.completed != b.completed) return "completed";
  if (a.makespan_ms != b.makespan_ms) return "makespan";
  if (a.events != b.events) return "events";
  if (a.ranks.size() != b.ranks.size()) return "ranks";
  for (size_t r = 0; r < a.ranks.size(); ++r)
    if (a.ranks[r].busy_ms != b.ranks[r].busy_ms || a.ranks[r].end_ms != b.ranks[r].end_ms ||
        a.ranks[r].peak_memory_bytes != b.ranks[r].peak_memory_bytes)
      return "rank " + std::to_string(r);
  if (a.critical_path.size() != b.critical_path.size()) return "critical path length";
  for (size_t k = 0; k < a.critical_path.size(); ++k) {
    const CriticalStep &x = a.critical_path[k], &y = b.critical_path[k];
    if (x.rank != y.rank || x.step_index != y.step_index || x.start_ms != y.start_ms || x.end_ms != y.end_ms)
      return "critical path step " + std::to_string(k);
  }
  if (a.links.size() != b.links.size()) return "links";
  for (size_t k = 0; k < a.links.size(); ++k)
    if (a.links[k].bytes != b.links[k].bytes || a.links[k].messages != b.links[k].messages)
      return "link " + std::to_string(k);
  return "";
}
}  // namespace

TEST_CASE("a run without a trace frees message states and drops slices as it goes, and times everything as the "
          "traced run, which keeps them all",
          "[simulator]") {
  // Unless it records a trace, the engine keeps a message's state only while something may read
  // it (MessageStates in sim/engine.cpp) and a slice only while the critical path may run through
  // it (Engine::collect_slices): both must give the same run, in every runtime
  // mode that changes when a state is read (overlap_p2p's later waits, MPipe's batched
  // receives, batches, eager sends that complete before their receive is posted, receivers
  // that take payloads in only while they wait, a CPU host).
  rc::prop("same makespan, ranks, critical path and links", [](int pick, int P, int M, unsigned modes, double f, double eager) {
    const char* fams[] = {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev", "mpipe-transpose",
                          "looped-bfs", "dualpipe", "chimera", "interleaved-zb"};
    const std::string fam = fams[static_cast<size_t>(mod(pick, 11))];
    GenerateOptions g;
    g.pp = 2 * (1 + mod(P, 3));
    g.vpp = fam == "zbv" || fam == "dualpipev" || fam == "looped-bfs" || fam == "mpipe-transpose" || fam == "interleaved-zb" ? 2 : 1;
    g.micro = 2 * g.pp * (1 + mod(M, 2));
    Schedule s = generate(fam, g);
    if (modes & 1u) s = coalesce_p2p(s);
    SimOptions traced;
    traced.record_trace = true;
    traced.check.overlap_p2p = (modes & 2u) != 0;
    traced.check.mpipe_batched_recv = (modes & 4u) != 0;
    traced.check.dyn_shape = (modes & 8u) != 0;
    if (modes & 16u) traced.check.comm = CommMode::Eager;
    SimOptions plain = traced;
    plain.record_trace = false;
    plain.testing_small_run = 1 + static_cast<size_t>(mod(pick / 11, 64));  // frees and drops many times
    CostModel c = uniform(0.5 + std::fmod(std::abs(f), 3.0), 1.0, 0.01);
    c.meta_bytes = 64;
    c.protocol.eager_threshold_bytes = std::fmod(std::abs(eager), 2.0) < 1.0 ? 0.0 : 1e12;
    c.protocol.background_progress = (modes & 32u) == 0;
    c.protocol.compute_blocks_host = (modes & 64u) != 0;
    if (modes & 128u) c.protocol.send_handoff_ms = 0.05;
    const RunRecord a = simulate(s, c, traced), b = simulate(s, c, plain);
    const std::string diff = first_difference(a, b);
    RC_ASSERT(diff == "");
  });
}

TEST_CASE("past 2^16 messages and slices (the engine's own limits) the untraced run still times everything as "
          "the traced one",
          "[simulator]") {
  const Schedule s = gen("interleaved-1f1b", 16, 1024, 2);  // ~200k steps, over 2^16 messages
  SimOptions traced, plain;
  traced.record_trace = true;
  plain.record_trace = false;
  const CostModel c = uniform(1.0, 2.0, 0.01);
  const RunRecord a = simulate(s, c, traced), b = simulate(s, c, plain);
  REQUIRE(a.slices.size() > (size_t{1} << 17));  // the untraced run dropped slices at least once
  CHECK(first_difference(a, b) == "");
}

TEST_CASE("a multi-tensor transfer releases and delivers its buffers once", "[simulator]") {
  // MPipe feature transfers carry one message (with its meta) per tensor. The simulator used
  // to apply the step's consumes once per tensor message, so memory drifted below what the
  // caches hold; every rank must end where it started (all caches empty) and never go below.
  GenerateOptions g;
  g.pp = 2;
  g.vpp = 2;
  g.micro = 4;
  Schedule s = generate("mpipe-transpose", g);
  int changed = 0;
  for (auto& prog : s.programs)
    for (auto& slot : prog)
      if (slot && (slot->op == Op::MPIPE_FWD_SEND || slot->op == Op::MPIPE_FWD_RECV)) {
        slot->edit_tensors() = {TensorDesc{{4, 8}, "float32"}, TensorDesc{{4}, "int64"}};
        ++changed;
      }
  REQUIRE(changed > 0);
  CostModel c = uniform(1.0, 2.0);
  c.features_bytes = 1 << 20;  // the cache the owners' MPIPE_FWD_SEND releases
  c.kept_activation_bytes = StageValue::scalar(1 << 22);
  RunRecord r = run(s, c);
  REQUIRE(r.completed);
  REQUIRE(r.check.ok());
  std::vector<int64_t> last(static_cast<size_t>(s.ranks), 0);
  for (const auto& m : r.memory) {
    CHECK(m.bytes >= 0);
    last[static_cast<size_t>(m.rank)] = m.bytes;
  }
  for (int rank = 0; rank < s.ranks; ++rank) CHECK(last[static_cast<size_t>(rank)] == 0);
}

// ---- one network for every schedule: the MPipe tower on stage 0 -------------------------------

TEST_CASE("with the MPipe tower on stage 0, stage 0's steps also pay the tower's forward and backward",
          "[simulator][tower]") {
  CostModel c = uniform(1.0, 2.0);
  c.tower_fwd = StageValue::scalar(0.5);
  c.tower_grad_bwd = StageValue::scalar(1.0);
  c.tower_bwd = StageValue::scalar(99.0);  // the stage-0 recompute of MPipe: never used here
  // One stage: each micro costs (F + tower F) + (B + tower backward) = 1.5 + 3.
  CHECK(run(gen("gpipe", 1, 3), with_tower_on_stage0(c, 1, Tower::Trainable)).makespan_ms == Approx(3 * 4.5));
  // Two stages, one micro: F0s0 1.5 -> F0s1 1 -> B0s1 2 -> B0s0 3.
  CHECK(run(gen("1f1b", 2, 1), with_tower_on_stage0(c, 2, Tower::Trainable)).makespan_ms == Approx(7.5));
  CHECK(run(gen("1f1b", 2, 1), c).makespan_ms == Approx(6.0));
  // Split backward: the tower's backward goes half with BWD_INPUT, half with BWD_WEIGHT.
  const CostModel split = with_tower_on_stage0(c, 1, Tower::Trainable);
  CHECK(split.bwd_input.at(0, 0) == Approx(1.5));
  CHECK(split.bwd_weight.at(0, 0) == Approx(1.5));
  CHECK(run(gen("zb-h1", 1, 1), split).makespan_ms == Approx(4.5));
  // Only stage 0 changes.
  const CostModel four = with_tower_on_stage0(c, 4, Tower::Trainable);
  for (int s = 1; s < 4; ++s) {
    CHECK(four.fwd.at(s, 0) == 1.0);
    CHECK(four.bwd.at(s, 0) == 2.0);
  }
  // A frozen tower runs forward only; no tower leaves the model as it was.
  const CostModel frozen = with_tower_on_stage0(c, 2, Tower::Frozen);
  CHECK(frozen.fwd.at(0, 0) == Approx(1.5));
  CHECK(frozen.bwd.at(0, 0) == Approx(2.0));
  CHECK(run(gen("1f1b", 2, 1), with_tower_on_stage0(c, 2, Tower::None)).makespan_ms == Approx(6.0));
}

TEST_CASE("the network tower of a comparison is the most any compared MPipe layer runs", "[simulator][tower]") {
  GenerateOptions g;
  g.pp = 2;
  g.micro = 4;
  const Schedule plain = generate("1f1b", g);
  g.tower = Tower::Frozen;
  const Schedule frozen = generate("mpipe-transpose", g);
  g.tower = Tower::Trainable;
  const Schedule trainable = generate("mpipe-transpose", g);
  CHECK(network_tower({&plain}) == Tower::None);
  CHECK(network_tower({&plain, &frozen}) == Tower::Frozen);
  CHECK(network_tower({&frozen, &plain, &trainable}) == Tower::Trainable);
}

TEST_CASE("on one network (default costs, P=4 V=2 M=8) owner-backward MPipe beats interleaved 1F1B with the tower on stage 0",
          "[simulator][tower]") {
  GenerateOptions g;
  g.pp = 4;
  g.vpp = 2;
  g.micro = 8;
  const Schedule interleaved = generate("interleaved-1f1b", g);
  g.tower = Tower::Trainable;
  g.owner_backward = true;
  const Schedule mpipe = generate("mpipe-transpose", g);
  const CostModel c = default_cost_model(8);
  const RunRecord body_only = run(interleaved, c);
  const RunRecord same_workload = run(interleaved, with_tower_on_stage0(c, 8, Tower::Trainable));
  const RunRecord m = run(mpipe, c);
  REQUIRE(body_only.completed);
  REQUIRE(same_workload.completed);
  REQUIRE(m.completed);
  // The tower costs the baseline time (its stage 0 is the slowest stage) ...
  CHECK(same_workload.makespan_ms > body_only.makespan_ms);
  // ... and on the same network MPipe's round-robin tower wins.
  CHECK(m.makespan_ms < same_workload.makespan_ms);
  WARN("interleaved-1f1b " << body_only.makespan_ms << " ms body only, " << same_workload.makespan_ms
                           << " ms with the tower on stage 0; mpipe-transpose --owner-backward " << m.makespan_ms << " ms");
}

// ---- pipeline x data parallel ---------------------------------------------------------------

namespace {

// 1 GB of parameters per stage; NVLink-like inside a node, InfiniBand-like between nodes.
CostModel dp_costs(int ranks_per_node) {
  CostModel c = uniform(1.0, 2.0);
  c.links.intra_node = Link{0.005, 400.0};
  c.links.inter_node = Link{0.010, 50.0};
  c.links.ranks_per_node = ranks_per_node;
  c.param_bytes = StageValue::scalar(1e9);
  return c;
}

RunRecord run_dp(const Schedule& s, const CostModel& c, int degree, bool fsdp, MeshOrder order = MeshOrder::DpPp) {
  SimOptions o;
  o.record_trace = true;
  o.check.memory = c.memory_model(s.stages);  // the checks count with the same bytes, as the CLI's
  o.check.dp.degree = degree;
  o.check.dp.fsdp = fsdp;
  o.check.dp.mesh_order = order;
  return simulate(s, c, o);
}

// The duration of rank r's slices of the steps whose table row is a DP collective of `kind`.
std::vector<double> dp_slices(const Schedule& s, const RunRecord& r, CollectiveKind kind) {
  std::vector<double> out;
  for (const auto& sl : r.slices) {
    const auto& slot = s.programs[static_cast<size_t>(sl.rank)][static_cast<size_t>(sl.step_index)];
    if (slot && info(slot->op).collective == CollectiveScope::DataParallel && info(slot->op).collective_kind == kind)
      out.push_back(sl.end_ms - sl.start_ms);
  }
  return out;
}

}  // namespace

TEST_CASE("PP=4 x DP=8 across nodes: REDUCE_GRAD is a ring all-reduce of the stage's gradients", "[simulator][dp]") {
  // Mesh ("dp", "pp"), 8 ranks per node: pipeline rank r's DP group {r, r+4, ..., r+28} spans
  // four nodes, so the ring runs at the inter-node link: 2(n-1)/n B/bw + 2(n-1) lat
  // = 2 * 7/8 * 1e9 B / 50 GB/s + 14 * 0.01 ms = 35 + 0.14 ms.
  const double all_reduce = 2.0 * 7 / 8 * 1e9 / 50e9 * 1e3 + 14 * 0.010;
  const Schedule s = add_fsdp_steps(gen("1f1b", 4, 8));
  const CostModel c = dp_costs(8);
  const RunRecord one = run_dp(s, c, 1, false);
  const RunRecord dp = run_dp(s, c, 8, false);
  REQUIRE(dp.completed);
  CHECK(dp.check.ok());
  CHECK(dp.dp_degree == 8);
  // Each rank's last step is its stage's REDUCE_GRAD; rank 0 finishes last, so the job takes
  // exactly one all-reduce longer.
  CHECK(dp.makespan_ms == Approx(one.makespan_ms + all_reduce));
  for (const auto& rank : dp.ranks) {
    INFO("rank " << rank.rank);
    CHECK(rank.dp_ring_inter_node);
    CHECK(rank.dp_collective_ms == Approx(all_reduce));
  }
  CHECK(dp.dp_collective_ms == Approx(4 * all_reduce));
  const auto reduce = dp_slices(s, dp, CollectiveKind::ReduceScatter);
  REQUIRE(reduce.size() == 4);
  for (double d : reduce) CHECK(d == Approx(all_reduce));
  // Without sharding UNSHARD and RESHARD move nothing.
  for (double d : dp_slices(s, dp, CollectiveKind::AllGather)) CHECK(d == 0.0);
  for (double d : dp_slices(s, dp, CollectiveKind::Release)) CHECK(d == 0.0);
}

TEST_CASE("PP=4 x DP=8 with --fsdp: UNSHARD all-gathers and REDUCE_GRAD reduce-scatters over the DP ring",
          "[simulator][dp]") {
  // Each is (n-1)/n B/bw + (n-1) lat = 7/8 * 1e9 / 50 GB/s + 7 * 0.01 ms = 17.5 + 0.07 ms.
  const double half = 7.0 / 8 * 1e9 / 50e9 * 1e3 + 7 * 0.010;
  const Schedule s = add_fsdp_steps(gen("1f1b", 4, 8));
  const CostModel c = dp_costs(8);
  const RunRecord one = run_dp(s, c, 1, true);
  const RunRecord dp = run_dp(s, c, 8, true);
  REQUIRE(dp.completed);
  for (double d : dp_slices(s, dp, CollectiveKind::AllGather)) CHECK(d == Approx(half));
  for (double d : dp_slices(s, dp, CollectiveKind::ReduceScatter)) CHECK(d == Approx(half));
  for (double d : dp_slices(s, dp, CollectiveKind::Release)) CHECK(d == 0.0);
  // Rank 0's all-gather delays the whole pipeline (the other ranks' gathers overlap their wait
  // for the first activation), and its reduce-scatter ends the job.
  CHECK(dp.makespan_ms == Approx(one.makespan_ms + 2 * half));
  for (const auto& rank : dp.ranks) CHECK(rank.dp_collective_ms == Approx(2 * half));
}

TEST_CASE("DP=1 prices a schedule exactly as a run without data parallelism", "[simulator][dp]") {
  for (const char* fam : {"1f1b", "interleaved-1f1b"}) {
    const Schedule s = add_fsdp_steps(gen(fam, 4, 8, std::string(fam) == "1f1b" ? 1 : 2));
    CostModel c = dp_costs(2);
    c.fsdp = StageValue::scalar(0.25);  // compute.FSDP: the fixed overhead of every FSDP_* step
    SimOptions plain;
    const RunRecord base = simulate(s, c, plain);
    for (MeshOrder order : {MeshOrder::DpPp, MeshOrder::PpDp})
      for (bool fsdp : {false, true}) {
        INFO(fam << " fsdp " << fsdp << " mesh " << (order == MeshOrder::PpDp ? "pp,dp" : "dp,pp"));
        const RunRecord r = run_dp(s, c, 1, fsdp, order);
        CHECK(r.makespan_ms == base.makespan_ms);
        CHECK(r.dp_collective_ms == 0.0);
        REQUIRE(r.slices.size() == base.slices.size());
        for (size_t k = 0; k < r.slices.size(); ++k) {
          CHECK(r.slices[k].start_ms == base.slices[k].start_ms);
          CHECK(r.slices[k].end_ms == base.slices[k].end_ms);
        }
        // The FSDP steps cost their fixed overhead and nothing more.
        for (double d : dp_slices(s, r, CollectiveKind::ReduceScatter)) CHECK(d == Approx(0.25));
      }
  }
}

TEST_CASE("the mesh order decides whether a DP ring stays inside a node", "[simulator][dp]") {
  const Schedule s = add_fsdp_steps(gen("1f1b", 4, 8));
  const CostModel c = dp_costs(8);
  // ("pp", "dp"): pipeline rank r's DP group is {8r, ..., 8r + 7}, one node: the intra-node
  // link, 2 * 7/8 * 1e9 / 400 GB/s + 14 * 0.005 ms.
  const double intra = 2.0 * 7 / 8 * 1e9 / 400e9 * 1e3 + 14 * 0.005;
  const RunRecord pp_dp = run_dp(s, c, 8, false, MeshOrder::PpDp);
  for (const auto& rank : pp_dp.ranks) {
    CHECK_FALSE(rank.dp_ring_inter_node);
    CHECK(rank.dp_collective_ms == Approx(intra));
  }
  // ... and then the pipeline's neighbours (global ranks 0, 8, 16, 24) sit on different nodes:
  // every transfer runs at the inter-node link, as if every link were inter-node. Under
  // ("dp", "pp") they are global ranks 0..3, one node, as without data parallelism.
  const Schedule body = gen("1f1b", 4, 8);
  CostModel all_inter = c;
  all_inter.links.intra_node = c.links.inter_node;
  CHECK(run_dp(body, c, 8, false, MeshOrder::PpDp).makespan_ms == run_dp(body, all_inter, 1, false).makespan_ms);
  CHECK(run_dp(body, c, 8, false, MeshOrder::DpPp).makespan_ms == run_dp(body, c, 1, false).makespan_ms);
  CHECK(run_dp(body, c, 1, false).makespan_ms < run_dp(body, all_inter, 1, false).makespan_ms);
  // Under ("dp", "pp") a node of 32 ranks holds every DP group.
  const RunRecord big_node = run_dp(s, dp_costs(32), 8, false, MeshOrder::DpPp);
  for (const auto& rank : big_node.ranks) {
    CHECK_FALSE(rank.dp_ring_inter_node);
    CHECK(rank.dp_collective_ms == Approx(intra));
  }
}

TEST_CASE("a data-parallel world over the rank limit is refused, not simulated", "[simulator][dp]") {
  SimOptions o;
  o.check.dp.degree = 1 << 19;
  CHECK_THROWS_AS(simulate(gen("1f1b", 4, 4), uniform(1, 2), o), InputError);
  o.check.dp.degree = 0;
  CHECK_THROWS_AS(simulate(gen("1f1b", 4, 4), uniform(1, 2), o), InputError);
}

TEST_CASE("with --fsdp the gathered parameters are live from UNSHARD to RESHARD, in the simulation and the checks alike",
          "[simulator][dp]") {
  for (const char* fam : {"1f1b", "interleaved-1f1b"}) {
    INFO(fam);
    const Schedule s = add_fsdp_steps(gen(fam, 4, 8, std::string(fam) == "1f1b" ? 1 : 2));
    CostModel c = dp_costs(8);
    c.kept_activation_bytes = StageValue::scalar(1 << 20);
    c.param_bytes = StageValue::scalar(8e6);
    const RunRecord ddp = run_dp(s, c, 8, false);
    const RunRecord fsdp = run_dp(s, c, 8, true);
    for (int r = 0; r < 4; ++r) {
      INFO("rank " << r);
      const auto& plain = ddp.ranks[static_cast<size_t>(r)];
      const auto& sharded = fsdp.ranks[static_cast<size_t>(r)];
      // At most the window of stages is gathered; at DDP's peak at least the stage computing.
      CHECK(sharded.peak_memory_bytes >= plain.peak_memory_bytes + 7'000'000);
      CHECK(sharded.peak_memory_bytes <= plain.peak_memory_bytes + 3 * 7'000'000);
      // The checks count the same bytes (their walk, and the explaining one).
      CHECK(fsdp.check.stats.peak_memory_bytes[static_cast<size_t>(r)] == sharded.peak_memory_bytes);
      CheckOptions exact;
      exact.dp = DataParallelOptions{8, MeshOrder::DpPp, true};
      exact.memory = c.memory_model(s.stages);
      exact.testing_exact_cache_walk = true;
      CHECK(verify(s, exact).stats.peak_memory_bytes[static_cast<size_t>(r)] == sharded.peak_memory_bytes);
    }
    // 1F1B holds one stage per rank: exactly its 7/8 of the 8 MB, on every rank.
    if (std::string(fam) == "1f1b")
      for (int r = 0; r < 4; ++r)
        CHECK(fsdp.ranks[static_cast<size_t>(r)].peak_memory_bytes ==
              ddp.ranks[static_cast<size_t>(r)].peak_memory_bytes + 7'000'000);
    // Everything is released at the end: the last memory sample of each rank is back to 0.
    std::vector<int64_t> last(4, -1);
    for (const auto& m : fsdp.memory) last[static_cast<size_t>(m.rank)] = m.bytes;
    for (int64_t b : last) CHECK(b == 0);
  }
}

TEST_CASE("body data steps are priced as bytes.data on the forward's link, and DATA_LOAD as data_load", "[simulator]") {
  // 1F1B P=4 M=8: every cross-rank forward carries one data message beside its activation.
  GenerateOptions g;
  g.pp = 4;
  g.micro = 8;
  const Schedule plain = generate("1f1b", g);
  g.data_steps = true;
  const Schedule data = generate("1f1b", g);
  CostModel c = uniform(1.0, 2.0);
  c.data_bytes = 1 << 20;
  c.activation_bytes = StageValue::scalar(0);
  c.links.intra_node.bandwidth_GBps = 1.0;  // 1 MiB of data: ~1.05 ms per message
  const RunRecord a = run(plain, c), b = run(data, c);
  REQUIRE(a.completed);
  REQUIRE(b.completed);
  for (const LinkVolume& l : b.links) {
    INFO(l.src << "->" << l.dst);
    if (l.dst == l.src + 1) CHECK(l.bytes >= 8.0 * (1 << 20));  // one data message per micro-batch
  }
  double plain_bytes = 0, data_bytes = 0;
  for (const LinkVolume& l : a.links) plain_bytes += l.bytes;
  for (const LinkVolume& l : b.links) data_bytes += l.bytes;
  CHECK(data_bytes - plain_bytes == Approx(3 * 8 * double(1 << 20)));  // 3 forward links x 8 micro-batches
  CHECK(b.makespan_ms > a.makespan_ms + 3 * 1.0);  // the data rides the forward chain's critical path
  // A DATA_LOAD costs data_load; only stage 0's does anything, but every one is priced.
  c.data_bytes = 0;
  c.data_load = StageValue::scalar(0.5);
  CHECK(run(data, c).makespan_ms > run(plain, c).makespan_ms);
}

// ---- replicated stages ------------------------------------------------------------------------

TEST_CASE("a replicated stage's gradient sync is priced as an all-reduce of the stage's gradient bytes over the "
          "ranks holding its copies", "[simulator][replicas]") {
  CostModel c = uniform(1.0, 2.0, /*latency=*/0.01);
  c.links.intra_node.bandwidth_GBps = 100.0;
  c.links.inter_node.bandwidth_GBps = 100.0;
  // 4 model stages of different sizes; the copies of model stage j cost what stage j costs.
  c.param_bytes.rows = {{1e9}, {2e9}, {3e9}, {4e9}};
  c.param_bytes.given = true;
  const Schedule s = gen("chimera", 4, 8);
  const CostModel per_copy = c.per_copies(2);
  REQUIRE(per_copy.param_bytes.rows.size() == 8);
  CHECK(per_copy.param_bytes.at(7, 0) == 4e9);
  const RunRecord r = run(s, per_copy);
  REQUIRE(r.completed);
  int syncs = 0;
  for (const auto& sl : r.slices) {
    if (sl.lane != Lane::Collective) continue;
    const Step& st = *s.programs[static_cast<size_t>(sl.rank)][static_cast<size_t>(sl.step_index)];
    REQUIRE(st.op == Op::REPLICA_GRAD_SYNC);
    const double B = 1e9 * (s.model_stage_of(st.stage) + 1);
    // ring all-reduce over n = 2 ranks: 2(n-1)/n * B/bw + 2(n-1) * latency
    CHECK(sl.bytes == B);
    CHECK(sl.end_ms - sl.start_ms == Approx(B / 100e9 * 1e3 + 2 * 0.01).epsilon(1e-9));
    ++syncs;
  }
  CHECK(syncs == 8);  // two copies on each of the 4 ranks
}

TEST_CASE("Chimera's two pipelines fill each other's bubbles: with F = B and free communication each rank idles "
          "P - 2 slots where 1F1B's idle 2(P - 1) (Li & Hoefler, SC'21, Table 2)", "[simulator][replicas]") {
  CostModel c = uniform(1.0, 1.0);
  for (int P : {4, 8}) {
    INFO("P=" << P);
    const RunRecord chim = run(gen("chimera", P, P), c.per_copies(2));
    REQUIRE(chim.completed);
    const RunRecord one = run(gen("1f1b", P, P), c);
    // per rank 2P slots of work (P micro-batches, F and B each)
    CHECK(chim.makespan_ms == Approx(2 * P + P - 2));
    CHECK(one.makespan_ms == Approx(2 * P + 2 * (P - 1)));
  }
}
