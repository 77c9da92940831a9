// Calibration (sim/calibrate.cpp): a simulated trace calibrates back to the cost model that
// produced it, and a trace calibration cannot use is refused with a located error.
#include <catch2/catch.hpp>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "schedule/errors.hpp"
#include "schedule/comm_insertion.hpp"
#include "schedule/generators/generator.hpp"
#include "sim/calibrate.hpp"
#include "sim/calibrate_model.hpp"
#include "sim/workload_costs.hpp"
#include "sim/cost_model.hpp"
#include "sim/engine.hpp"
#include "traces/chrome_trace.hpp"
#include "tests/support/expect_error.hpp"

using namespace ppsched;
using nlohmann::json;

namespace {

constexpr double kMiB = 1024.0 * 1024;

// Per-stage times in whole microseconds and sizes in whole bytes: the trace keeps nanoseconds,
// so every input is representable in it. Every transfer is a rendezvous (eager threshold 0),
// the transfer model the fit assumes.
CostModel known_costs() {
  CostModel c;
  c.source = "known";
  c.fwd = StageValue{{{1.25}, {1.5}, {1.75}, {2.0}}, true};
  c.bwd = StageValue{{{2.5}, {3.125}, {3.5}, {4.25}}, true};
  c.bwd_input = StageValue{{{1.25}, {1.5}, {1.75}, {2.125}}, true};
  c.bwd_weight = StageValue{{{1.25}, {1.625}, {1.75}, {2.125}}, true};
  c.tower_fwd = StageValue::scalar(0.75);
  c.tower_bwd = StageValue::scalar(2.25);
  c.tower_grad_bwd = StageValue::scalar(1.5);
  c.data_load = StageValue::scalar(0.125);
  c.activation_bytes = StageValue{{{32 * kMiB}, {16 * kMiB}, {24 * kMiB}, {24 * kMiB}}, true};
  c.gradient_bytes = StageValue{{{8 * kMiB}, {12 * kMiB}, {20 * kMiB}, {20 * kMiB}}, true};
  c.data_bytes = 4096;
  c.features_bytes = 6 * kMiB;
  c.tower_input_bytes = 4096;
  c.feature_grad_bytes = 6 * kMiB;
  c.tower_param_bytes = 64 * kMiB;
  c.meta_bytes = 64;
  Link l;
  l.latency_ms = 0.05;
  l.bandwidth_GBps = 12.5;
  c.links.intra_node = c.links.inter_node = l;
  c.protocol.eager_threshold_bytes = 0;
  return c;
}

Calibration round_trip(const Schedule& s, const CostModel& c) {
  RunRecord r = simulate(s, c);
  REQUIRE(r.completed);
  REQUIRE(r.check.ok());
  CalibrateOptions o;
  o.eager_threshold_bytes = 0;
  return calibrate_trace(chrome_trace_json(s, r), "sim.trace.json", o);
}

using testing::expect_error;

std::string simulated_trace() {
  GenerateOptions g;
  g.pp = 2;
  g.micro = 4;
  Schedule s = generate("1f1b", g);
  return chrome_trace_json(s, simulate(s, known_costs()));
}

// Trace times are whole nanoseconds; a fitted value is within a few of them.
constexpr double kTimeTol = 1e-5;  // ms

}  // namespace

TEST_CASE("a simulated 1F1B trace calibrates back to its per-stage times, link latency and bandwidth") {
  GenerateOptions g;
  g.pp = 4;
  g.micro = 8;
  const Schedule s = generate("1f1b", g);
  const CostModel c = known_costs();
  const Calibration cal = round_trip(s, c);

  CHECK(cal.label == "simulated");
  CHECK(cal.stages == 4);
  CHECK(cal.ranks == 4);
  for (int st = 0; st < 4; ++st) {
    INFO("stage " << st);
    CHECK(cal.costs.fwd.at(st, 0) == Approx(c.fwd.at(st, 0)).margin(kTimeTol));
    CHECK(cal.costs.bwd.at(st, 0) == Approx(c.bwd.at(st, 0)).margin(kTimeTol));
    if (st < 3) {
      CHECK(cal.costs.activation_bytes.at(st, 0) == c.activation_bytes.at(st, 0));
      CHECK(cal.costs.gradient_bytes.at(st, 0) == c.gradient_bytes.at(st, 0));
    }
  }
  // Every FWD and BWD was a sample: M per stage.
  for (const auto& f : cal.compute) CHECK(f.samples == 8);
  // Metas (64 B) and three activation / gradient sizes: the fit separates latency from bandwidth.
  CHECK(cal.link.sizes >= 3);
  CHECK(cal.link.transfers > 0);
  CHECK(cal.link.latency_ms == Approx(0.05).margin(kTimeTol));
  REQUIRE(cal.link.bandwidth_GBps);
  CHECK(*cal.link.bandwidth_GBps == Approx(12.5).epsilon(1e-5));
  CHECK(cal.link.rms_residual_ms < kTimeTol);
  CHECK(cal.link.note.empty());

  // The fitted model predicts the run it came from.
  const CostModel back = read_cost_model(write_cost_model(cal.costs), "fitted.json");
  const RunRecord again = simulate(s, back);
  CHECK(again.makespan_ms == Approx(simulate(s, c).makespan_ms).margin(1e-4));
  CHECK(cal.measured_makespan_ms == Approx(simulate(s, c).makespan_ms).margin(kTimeTol));
}

TEST_CASE("a link faster than the cost file's 1e9 GB/s is fitted as infinite, not as a figure the reader refuses") {
  GenerateOptions g;
  g.pp = 2;
  g.micro = 4;
  const Schedule s = generate("1f1b", g);
  CostModel c = known_costs();
  // 32 MiB in 17 ns: the trace's whole nanoseconds still show the size dependence.
  c.links.intra_node.bandwidth_GBps = c.links.inter_node.bandwidth_GBps = 2e9;
  const Calibration cal = round_trip(s, c);
  CHECK_FALSE(cal.link.bandwidth_GBps);
  CHECK_THAT(cal.link.note, Catch::Contains("beyond 1e9 GB/s"));
  CHECK(cal.link.latency_ms == Approx(0.05).margin(kTimeTol));
  CHECK_NOTHROW(read_cost_model(write_cost_model(cal.costs), "fitted.json"));
}

TEST_CASE("split backward halves and MPipe tower steps are recovered as their own keys") {
  const CostModel c = known_costs();
  SECTION("zb-h1: BWD_INPUT and BWD_WEIGHT per stage, BWD derived as their sum") {
    GenerateOptions g;
    g.pp = 4;
    g.micro = 8;
    const Calibration cal = round_trip(generate("zb-h1", g), c);
    for (int st = 0; st < 4; ++st) {
      INFO("stage " << st);
      CHECK(cal.costs.bwd_input.at(st, 0) == Approx(c.bwd_input.at(st, 0)).margin(kTimeTol));
      CHECK(cal.costs.bwd_weight.at(st, 0) == Approx(c.bwd_weight.at(st, 0)).margin(kTimeTol));
      CHECK(cal.costs.bwd.at(st, 0) == Approx(c.bwd_input.at(st, 0) + c.bwd_weight.at(st, 0)).margin(kTimeTol));
    }
    CHECK(cal.link.latency_ms == Approx(0.05).margin(kTimeTol));
    REQUIRE(cal.link.bandwidth_GBps);
    CHECK(*cal.link.bandwidth_GBps == Approx(12.5).epsilon(1e-5));
  }
  SECTION("mpipe-transpose: tower forward, recompute, data load as scalars; feature and collective bytes") {
    GenerateOptions g;
    g.pp = 4;
    g.micro = 8;
    const Schedule s = generate("mpipe-transpose", g);
    const Calibration cal = round_trip(s, c);
    CHECK(cal.costs.tower_fwd.rows.size() == 1);
    CHECK(cal.costs.tower_fwd.at(-1, 0) == Approx(0.75).margin(kTimeTol));
    CHECK(cal.costs.tower_bwd.at(-1, 0) == Approx(2.25).margin(kTimeTol));
    CHECK(cal.costs.data_load.at(-1, 0) == Approx(0.125).margin(kTimeTol));
    CHECK(cal.costs.features_bytes == c.features_bytes);
    CHECK(cal.costs.tower_param_bytes == c.tower_param_bytes);
    for (int st = 0; st < 4; ++st) CHECK(cal.costs.fwd.at(st, 0) == Approx(c.fwd.at(st, 0)).margin(kTimeTol));
    // The tower-parameter broadcast is a sample of the link too (ring: 3 L + B / bandwidth).
    CHECK(cal.link.collectives >= 1);
    CHECK(cal.link.rms_residual_ms < kTimeTol);
    CHECK(cal.link.latency_ms == Approx(0.05).margin(kTimeTol));
    REQUIRE(cal.link.bandwidth_GBps);
    CHECK(*cal.link.bandwidth_GBps == Approx(12.5).epsilon(1e-5));
  }
}

TEST_CASE("the median ignores a preempted step, the mean does not") {
  // One forward of stage 0 stretched by 100 ms, as a descheduled CPU rank would show it.
  json t = json::parse(simulated_trace());
  for (auto& e : t["traceEvents"])
    if (e["ph"] == "X" && e["args"]["op"] == "FWD" && e["args"]["stage"] == 0 && e["args"]["micro"] == 1) {
      e["dur"] = e["dur"].get<double>() + 100000.0;
      break;
    }
  const std::string text = t.dump();
  CalibrateOptions median, mean;  // the default is the mean: the run's total, the preempted step in it
  median.statistic = Statistic::Median;
  CHECK(CalibrateOptions{}.statistic == Statistic::Mean);
  CHECK(calibrate_trace(text, "t", median).costs.fwd.at(0, 0) == Approx(1.25).margin(kTimeTol));
  CHECK(calibrate_trace(text, "t", mean).costs.fwd.at(0, 0) == Approx(1.25 + 100.0 / 4).margin(kTimeTol));
}

TEST_CASE("a trace calibration cannot use is refused with a located error") {
  SECTION("not JSON") {
    auto e = expect_error([] { calibrate_trace("{\"traceEvents\": [", "x.json"); });
    CHECK(e.where().file == "x.json");
    CHECK_THAT(e.what(), Catch::Contains("not JSON"));
  }
  SECTION("a number JSON cannot hold (found by fuzzing: nlohmann throws out_of_range, not parse_error)") {
    auto e = expect_error([] { calibrate_trace(R"({"traceEvents": [{"ts": 33554E432}]})", "big.json"); });
    CHECK(e.where().file == "big.json");
    CHECK_THAT(e.what(), Catch::Contains("not JSON") && Catch::Contains("number overflow"));
  }
  SECTION("JSON without traceEvents (a schedule file)") {
    auto e = expect_error([] { calibrate_trace(R"({"format": "ppsched-schedule", "version": 1})", "s.json"); });
    CHECK_THAT(e.what(), Catch::Contains("not a Chrome trace"));
  }
  SECTION("a trace without slices") {
    auto e = expect_error([] { calibrate_trace(R"({"traceEvents": [], "otherData": {"stages": 2}})", "e.json"); });
    CHECK_THAT(e.what(), Catch::Contains("no slices"));
  }
  SECTION("slices without args.op (a trace from another tool or an older writer)") {
    json t = json::parse(simulated_trace());
    int first = -1;
    for (size_t i = 0; i < t["traceEvents"].size(); ++i)
      if (t["traceEvents"][i]["ph"] == "X") {
        t["traceEvents"][i]["args"].erase("op");
        if (first < 0) first = static_cast<int>(i);
      }
    auto e = expect_error([&] { calibrate_trace(t.dump(), "noargs.json"); });
    CHECK(e.where().field == "traceEvents[" + std::to_string(first) + "]");
    CHECK_THAT(e.what(), Catch::Contains("args.op"));
  }
  SECTION("an unknown op") {
    json t = json::parse(simulated_trace());
    for (auto& ev : t["traceEvents"])
      if (ev["ph"] == "X") {
        ev["args"]["op"] = "FORWARD";
        break;
      }
    CHECK_THAT(expect_error([&] { calibrate_trace(t.dump(), "op.json"); }).what(), Catch::Contains("unknown op 'FORWARD'"));
  }
  SECTION("a flow end outside every slice") {
    json t = json::parse(simulated_trace());
    for (auto& ev : t["traceEvents"])
      if (ev["ph"] == "f") {
        ev["ts"] = 1e12;
        break;
      }
    CHECK_THAT(expect_error([&] { calibrate_trace(t.dump(), "flow.json"); }).what(), Catch::Contains("lies in no slice"));
  }
  SECTION("fields of the wrong type or out of range") {
    json t = json::parse(simulated_trace());
    t["traceEvents"][3]["ph"] = 5;
    auto e = expect_error([&] { calibrate_trace(t.dump(), "type.json"); });
    CHECK(e.where().field == "traceEvents[3]");
    json u = json::parse(simulated_trace());
    for (auto& ev : u["traceEvents"])
      if (ev["ph"] == "X") {
        ev["pid"] = 1e300;
        break;
      }
    CHECK_THAT(expect_error([&] { calibrate_trace(u.dump(), "pid.json"); }).what(), Catch::Contains("not an integer in range"));
    json v = json::parse(simulated_trace());
    v["otherData"]["stages"] = 2000000000;
    CHECK_THAT(expect_error([&] { calibrate_trace(v.dump(), "big.json"); }).what(), Catch::Contains("beyond 2^20"));
  }
  SECTION("numbers beyond the cost file's limits are refused where they are (CI's fuzzer found the fit passing them on)") {
    auto first_slice = [](json& t) -> std::pair<int, json*> {
      for (size_t i = 0; i < t["traceEvents"].size(); ++i)
        if (t["traceEvents"][i]["ph"] == "X") return {static_cast<int>(i), &t["traceEvents"][i]};
      return {-1, nullptr};
    };
    json t = json::parse(simulated_trace());
    auto [at, ev] = first_slice(t);
    (*ev)["args"]["bytes"] = -64;
    auto e = expect_error([&] { calibrate_trace(t.dump(), "neg.json"); });
    CHECK(e.where().field == "traceEvents[" + std::to_string(at) + "]");
    CHECK_THAT(e.what(), Catch::Contains("bytes -64 is outside 0 to 1099511627776"));
    (*ev)["args"]["bytes"] = 2e12;
    CHECK_THAT(expect_error([&] { calibrate_trace(t.dump(), "big.json"); }).what(), Catch::Contains("(1 TiB)"));
    json u = json::parse(simulated_trace());
    auto [at2, ev2] = first_slice(u);
    (*ev2)["dur"] = 2e12;  // us: 2e9 ms
    e = expect_error([&] { calibrate_trace(u.dump(), "dur.json"); });
    CHECK(e.where().field == "traceEvents[" + std::to_string(at2) + "]");
    CHECK_THAT(e.what(), Catch::Contains("over the limit of 1e9 ms"));
  }
  SECTION("a fit whose sum is beyond the limits (BWD = BWD_INPUT + BWD_WEIGHT over 1e9 ms) is refused as a whole") {
    json t = json::parse(simulated_trace());
    // Every backward of the trace becomes a BWD_INPUT or a BWD_WEIGHT of 0.9e9 ms: each is
    // within the limit, their sum (the derived BWD) is not.
    int k = 0;
    for (auto& ev : t["traceEvents"])
      if (ev["ph"] == "X" && ev["args"]["op"] == "BWD") {
        ev["args"]["op"] = (k++ % 2) ? "BWD_WEIGHT" : "BWD_INPUT";
        ev["dur"] = 0.9e12;
      }
    REQUIRE(k >= 2);
    auto e = expect_error([&] { calibrate_trace(t.dump(), "sum.json"); });
    CHECK(e.where().file == "sum.json");
    CHECK_THAT(e.what(), Catch::Contains("not a valid cost file (compute.BWD"));
  }
  SECTION("no stage count") {
    json t = json::parse(simulated_trace());
    t["otherData"].erase("stages");
    CHECK_THAT(expect_error([&] { calibrate_trace(t.dump(), "st.json"); }).what(), Catch::Contains("otherData.stages"));
  }
}

TEST_CASE("a Gloo trace gets the CPU run's protocol, any other the GPU's, and the options override either") {
  GenerateOptions g;
  g.pp = 2;
  g.micro = 4;
  const Schedule s = generate("1f1b", g);
  CostModel cpu = known_costs();
  cpu.protocol.compute_blocks_host = true;  // as on a CPU: no send slice spans a compute
  const RunRecord r = simulate(s, cpu);
  // The protocol follows the run's provenance (otherData.source and .transport), not its label.
  const auto fit = [&](RunSource source, RunTransport transport, const CalibrateOptions& o) {
    RunRecord measured = r;
    measured.provenance.source = source;
    measured.provenance.transport = transport;
    return calibrate_trace(chrome_trace_json(s, measured), "t.json", o);
  };
  const Calibration gloo = fit(RunSource::Measured, RunTransport::Gloo, {});
  CHECK(gloo.costs.protocol.eager_threshold_bytes == 0);
  CHECK(gloo.costs.protocol.compute_blocks_host);
  CHECK_FALSE(gloo.costs.protocol.background_progress);
  REQUIRE(gloo.costs.protocol.send_handoff_ms.has_value());
  // The simulated trace's sends end with their transfers, each a rendezvous of latency +
  // bytes / bandwidth (0.05 ms + bytes / 12.5 GB/s): the hand-off is the mean of those over
  // the run's messages, computed here from the cost model, not from the fit.
  REQUIRE_FALSE(r.flows.empty());
  double handoff = 0;
  for (const MessageFlow& f : r.flows) handoff += 0.05 + r.slices[static_cast<size_t>(f.recv_slice)].bytes / 12.5e6;
  handoff /= static_cast<double>(r.flows.size());
  CHECK(*gloo.costs.protocol.send_handoff_ms == Approx(handoff).margin(1e-5));
  CHECK(gloo.link.mean_transfer_ms == Approx(handoff).margin(1e-5));
  const auto said = [](const Calibration& c, const char* what) {
    for (const auto& n : c.notes)
      if (n.find(what) != std::string::npos) return true;
    return false;
  };
  CHECK(said(gloo, "compute_blocks_host: true"));
  CHECK(said(gloo, "background_progress: false"));
  CHECK(said(gloo, "send_handoff_ms"));
  const Calibration sim = fit(RunSource::Simulated, RunTransport::None, {});
  CHECK(sim.costs.protocol.eager_threshold_bytes == CostModel{}.protocol.eager_threshold_bytes);
  CHECK_FALSE(sim.costs.protocol.compute_blocks_host);
  CHECK(sim.costs.protocol.background_progress);
  CHECK_FALSE(sim.costs.protocol.send_handoff_ms.has_value());
  CHECK_FALSE(said(sim, "background_progress"));
  CalibrateOptions o;
  o.compute_blocks_host = false;
  o.background_progress = true;
  o.send_handoff = false;
  const Calibration overridden = fit(RunSource::Measured, RunTransport::Gloo, o);
  CHECK_FALSE(overridden.costs.protocol.compute_blocks_host);
  CHECK(overridden.costs.protocol.background_progress);
  CHECK_FALSE(overridden.costs.protocol.send_handoff_ms.has_value());
}

TEST_CASE("a batch's group is one sample of the link fit: interleaved --batch calibrates back its latency and bandwidth") {
  GenerateOptions g;
  g.pp = 2;
  g.vpp = 2;
  g.micro = 4;
  const Schedule s = coalesce_p2p(generate("interleaved-1f1b", g));
  CostModel c = known_costs();
  // One payload size: a group's messages all have its mean size.
  c.activation_bytes = c.gradient_bytes = StageValue::scalar(8 * kMiB);
  const Calibration cal = round_trip(s, c);
  bool grouped = false;
  for (const auto& n : cal.notes) grouped = grouped || n.find("carry several messages") != std::string::npos;
  CHECK(grouped);
  CHECK(cal.link.transfers > 0);
  CHECK(cal.link.latency_ms == Approx(0.05).margin(kTimeTol));
  REQUIRE(cal.link.bandwidth_GBps);
  CHECK(*cal.link.bandwidth_GBps == Approx(12.5).epsilon(1e-5));
  const RunRecord again = simulate(s, read_cost_model(write_cost_model(cal.costs), "fitted.json"));
  CHECK(again.makespan_ms == Approx(simulate(s, c).makespan_ms).margin(1e-4));
}

TEST_CASE("a Gloo overlap trace: the receives its ranks waited after a compute give deferred_start_ms back") {
  GenerateOptions g;
  g.pp = 2;
  g.vpp = 2;
  g.micro = 4;
  const Schedule s = generate("interleaved-1f1b", g);
  CostModel c = known_costs();
  c.protocol.compute_blocks_host = true;
  c.protocol.background_progress = false;
  c.protocol.deferred_start_ms = 0.375;
  SimOptions o;
  o.record_trace = true;
  o.check.overlap_p2p = true;
  const RunRecord r = simulate(s, c, o);
  REQUIRE(r.completed);
  RunRecord measured = r;  // the mode (overlap_p2p) comes with the simulation's provenance
  measured.provenance.source = RunSource::Measured;
  measured.provenance.transport = RunTransport::Gloo;
  CalibrateOptions co;
  co.send_handoff = false;
  const Calibration cal = calibrate_trace(chrome_trace_json(s, measured), "gloo.trace.json", co);
  CHECK(cal.costs.protocol.compute_blocks_host);
  CHECK_FALSE(cal.costs.protocol.background_progress);
  CHECK(cal.link.latency_ms == Approx(0.05).margin(kTimeTol));
  CHECK(cal.costs.protocol.deferred_start_ms == Approx(0.375).margin(kTimeTol));
  bool said = false;
  for (const auto& n : cal.notes) said = said || n.find("deferred_start_ms 0.375") != std::string::npos;
  CHECK(said);
  // The fitted model predicts the run it came from.
  const RunRecord again = simulate(s, read_cost_model(write_cost_model(cal.costs), "fitted.json"), o);
  CHECK(again.makespan_ms == Approx(r.makespan_ms).margin(1e-4));
}

TEST_CASE("calibrate notes ranks that shared cores or could have (otherData.cpu_binding of a measured run)") {
  auto notes_with = [](const json& binding) {
    json t = json::parse(simulated_trace());
    t["otherData"]["cpu_binding"] = binding;
    return calibrate_trace(t.dump(), "cpus.json").notes;
  };
  auto has = [](const std::vector<std::string>& notes, const std::string& needle) {
    for (const auto& n : notes)
      if (n.find(needle) != std::string::npos) return true;
    return false;
  };
  // Two ranks bound to a core each (ppsched-exec --cpu-bind auto on two cores): nothing to say.
  auto n = notes_with(json::parse(R"({"mode": "auto", "ranks": [{"host": "h", "cpus": [0], "bound": true},
                                                                 {"host": "h", "cpus": [1], "bound": true}]})"));
  CHECK(!has(n, "CPU"));
  // Four ranks on two cores (PP=4 on the 2-core machine): they took turns.
  n = notes_with(json::parse(R"({"mode": "auto", "ranks": [{"host": "h", "cpus": [0, 1], "bound": false},
      {"host": "h", "cpus": [0, 1], "bound": false}, {"host": "h", "cpus": [0, 1], "bound": false},
      {"host": "h", "cpus": [0, 1], "bound": false}]})"));
  CHECK(has(n, "4 ranks ran on 2 CPU(s) of host h: they took turns"));
  // Two unbound ranks on two cores (--cpu-bind none): the OS may put both on one core.
  n = notes_with(json::parse(R"({"mode": "none", "ranks": [{"host": "h", "cpus": [0, 1], "bound": false},
                                                            {"host": "h", "cpus": [0, 1], "bound": false}]})"));
  CHECK(has(n, "could run on the same CPUs"));
  // The same ranks on two hosts share nothing.
  n = notes_with(json::parse(R"({"mode": "none", "ranks": [{"host": "a", "cpus": [0], "bound": false},
                                                            {"host": "b", "cpus": [0], "bound": false}]})"));
  CHECK(!has(n, "CPU"));
  // A malformed field is refused where it is.
  json t = json::parse(simulated_trace());
  t["otherData"]["cpu_binding"] = json::parse(R"({"ranks": [{"host": "h", "cpus": [0, "one"]}]})");
  CHECK_THAT(expect_error([&] { calibrate_trace(t.dump(), "bad.json"); }).what(),
             Catch::Contains("otherData.cpu_binding.ranks[0].cpus: expected CPU numbers"));
  t["otherData"]["cpu_binding"] = 3;
  CHECK_THAT(expect_error([&] { calibrate_trace(t.dump(), "bad.json"); }).what(),
             Catch::Contains("otherData.cpu_binding: expected an object"));
}

// ---- per-layer fit with rank factors (sim/calibrate_model.cpp) -------------------------------
namespace {

// A calibration of `times` per (key, stage) on the given ranks, and a plan with those FLOPs.
struct RankedCase {
  Calibration c;
  StagePlan plan;
};
RankedCase ranked_case(const std::vector<int>& stage_ranks, const std::vector<double>& flops,
                       const std::vector<double>& factor, double overhead_ms, double rate) {
  RankedCase rc;
  rc.c.stages = static_cast<int>(flops.size());
  rc.c.stage_ranks = stage_ranks;
  for (size_t s = 0; s < flops.size(); ++s) {
    StageFigures st;
    st.fwd_flops = {flops[s]};
    st.bwd_input_flops = {flops[s]};
    st.bwd_weight_flops = {flops[s]};
    rc.plan.stages.push_back(st);
    const double f = factor[static_cast<size_t>(stage_ranks[s])];
    ComputeFit fwd;
    fwd.key = "FWD";
    fwd.stage = static_cast<int>(s);
    fwd.value_ms = f * (overhead_ms + flops[s] / rate * 1e3);
    rc.c.compute.push_back(fwd);
    ComputeFit bwd = fwd;
    bwd.key = "BWD";
    bwd.value_ms = 2 * fwd.value_ms;
    rc.c.compute.push_back(bwd);
  }
  return rc;
}

}  // namespace

TEST_CASE("per-layer fit: a rank that ran two stages of different FLOPs separates its factor, the overhead and the rate") {
  // Interleaved: stages 0 and 2 on rank 0 (1.5x slower), 1 and 3 on rank 1 (0.5x); 1 ms a step.
  const RankedCase rc = ranked_case({0, 1, 0, 1}, {4e9, 6e9, 8e9, 2e9}, {1.5, 0.5}, 1.0, 1e12);
  const std::vector<KindFit> fits = fit_kind_rates(rc.c, rc.plan);
  REQUIRE(fits.size() == 3);
  const KindFit& f = fits[0];
  CHECK(f.key == "FWD");
  CHECK_FALSE(f.through_origin);
  CHECK(f.flops_per_s == Approx(1e12).epsilon(1e-4));
  CHECK(f.overhead_ms == Approx(1.0).epsilon(1e-4));
  REQUIRE(f.rank_factors.size() == 2);
  CHECK(f.rank_factors[0] == Approx(1.5).epsilon(1e-4));
  CHECK(f.rank_factors[1] == Approx(0.5).epsilon(1e-4));
  CHECK(f.rms_residual_ms < 1e-3);
  const RankTimes rt = rank_time_factors(rc.c, fits);
  REQUIRE(rt.factors.size() == 2);
  CHECK(rt.factors[0][1] == Approx(1.5).epsilon(1e-4));  // BWD_INPUT: the whole backward's factor
  CHECK(rt.factors[0][2] == rt.factors[0][1]);
  // A traced rank that ran no stage still has its entry (1), so the traced rank count matches.
  RankedCase wider = rc;
  wider.c.ranks = 3;
  const RankTimes three = rank_time_factors(wider.c, fits);
  REQUIRE(three.factors.size() == 3);
  CHECK(three.factors[2] == std::array<double, 3>{1.0, 1.0, 1.0});
}

TEST_CASE("per-layer fit: one stage per rank leaves no overhead to fit, and each rank's time is exact") {
  // A true overhead cannot be told from the ranks' factors: through the origin, every stage
  // priced as it ran.
  const RankedCase rc = ranked_case({0, 1, 2}, {4e9, 6e9, 3e9}, {2.0, 1.0, 1.0}, 1.0, 1e12);
  const std::vector<KindFit> fits = fit_kind_rates(rc.c, rc.plan);
  const KindFit& f = fits[0];
  CHECK(f.through_origin);
  CHECK(f.overhead_ms == 0);
  REQUIRE(f.rank_factors.size() == 3);
  double mean = 0;
  for (size_t s = 0; s < 3; ++s) {
    mean += f.rank_factors[s] / 3;
    const double priced = f.rank_factors[s] * rc.plan.stages[s].fwd_flops[0] / f.flops_per_s * 1e3;
    CHECK(priced == Approx(rc.c.compute[2 * s].value_ms).epsilon(1e-3));
  }
  CHECK(mean == Approx(1.0).epsilon(1e-3));
  // Data-parallel replicas (a stage on two ranks): no factors, and why.
  RankedCase dp = rc;
  dp.c.stage_ranks[1] = -2;
  const std::vector<KindFit> pooled = fit_kind_rates(dp.c, dp.plan);
  CHECK(pooled[0].rank_factors.empty());
  const RankTimes rt = rank_time_factors(dp.c, pooled);
  CHECK(rt.factors.empty());
  CHECK(rt.why_not.find("several ranks") != std::string::npos);
}

TEST_CASE("rank factors price each stage at the factor of the rank the schedule places it on") {
  // V placement on 2 ranks: stages 0 and 3 on rank 0, 1 and 2 on rank 1.
  Schedule s;
  s.ranks = 2;
  s.stages = 4;
  s.micro_batches = 1;
  s.placement = Placement::v(2, 4);
  CostModel c;
  c.fwd = StageValue::scalar(10);
  c.bwd_input = StageValue::scalar(4);
  c.bwd_weight = StageValue::scalar(6);
  c.bwd = StageValue::scalar(10);
  Device d;
  d.rank_time = {{2.0, 3.0, 1.0}, {1.0, 1.0, 1.0}};
  REQUIRE(apply_rank_time(c, d, s));
  for (int st = 0; st < 4; ++st) {
    const bool slow = st == 0 || st == 3;
    CHECK(c.fwd.at(st, 0) == (slow ? 20 : 10));
    CHECK(c.bwd_input.at(st, 0) == (slow ? 12 : 4));
    CHECK(c.bwd_weight.at(st, 0) == 6);
    CHECK(c.bwd.at(st, 0) == Approx(slow ? 18 : 10));  // the halves' factors, weighted by their times
  }
  // Factors of another rank count change nothing.
  CostModel other;
  other.fwd = StageValue::scalar(10);
  d.rank_time.push_back({1, 1, 1});
  CHECK_FALSE(apply_rank_time(other, d, s));
  CHECK(other.fwd.rows.size() == 1);
}
