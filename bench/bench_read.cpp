// Reading speed of the two schedule formats at the 782,336-step P=32 V=4 M=1024
// interleaved-1F1B schedule: the canonical JSON (SAX straight into the IR) against PyTorch's
// CSV (compute_comms), both from text already in memory. `steps_per_s` and `MB_per_s`
// compare them; the JSON text is about five times the CSV's. The JSON reader runs on
// ppsched's own parser (json_lexer.hpp) and reads each step in the writer's plain shape in one
// pass over its bytes: 48-50 ms against the CSV's 44-45 ms here (94-96 ms through the SAX
// events alone, 0.24-0.27 s on nlohmann's SAX parser), which keeps `ppsched check` of the JSON
// within 1.5x the CSV's time (1.00-1.06x). BM_JsonOverCsv fails when the JSON read takes over 3x the CSV read
// (best of its iterations; on nlohmann's parser it was 5.5x); BM_CheckJsonOverCsv, when
// reading and verifying the JSON takes over 1.5x the CSV's (the target of `ppsched check`).
// Run: build/bench/bench_read (or `meson test --benchmark`).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "bench/big_schedule.hpp"
#include "checkers/checks.hpp"
#include "schedule/errors.hpp"
#include "schedule/formats/action_notation.hpp"
#include "schedule/formats/pytorch_csv.hpp"
#include "schedule/formats/schedule_json.hpp"
#include "schedule/validate.hpp"

#if PPSCHED_BENCH_SIMDJSON
#include <simdjson.h>
#endif

using namespace ppsched;

namespace {

const Schedule& big() { return bench::big_schedule(); }

// The same schedule in both formats, written once.
const std::string& json_text() {
  static const std::string t = write_schedule_json(big());
  return t;
}
const std::string& csv_text() {
  static const std::string t = write_pytorch_csv(big(), CsvKind::ComputeComms);
  return t;
}
Schedule read_json() { return read_schedule_json(json_text(), "big.json"); }
Schedule read_csv() { return read_pytorch_csv(csv_text(), "big.csv"); }

#if PPSCHED_BENCH_SIMDJSON
// simdjson 3.0.1 (Debian's libsimdjson-dev, On-Demand API) building the same IR as
// read_schedule_json, for the decision of issue 25 item 9 (docs/performance.md: not adopted).
// It reads the top keys, a placement by name, and every program's null slots, action strings
// and steps in the writer's plain shape (op, micro, stage, peer), then runs the reader's passes
// (mark_data_steps, validate_structure, drop_rank_tags); anything else (sub-steps, tensors,
// MPipe, annotations, duplicate keys) it neither reads nor refuses as the reader does: the
// measured file has none. Its errors carry no location: simdjson reports an error code only
// ("improper structure", no line, no "expected ','"), which is what adopting it would lose.
const simdjson::padded_string& padded_json() {
  static const simdjson::padded_string t(json_text());
  return t;
}

[[noreturn]] void simd_fail(const std::string& what) {
  Location at;
  at.file = "big.json";
  throw InputError(at, what);
}

Op op_of(std::string_view name) {
  for (const auto& row : step_table())
    if (row.name == name) return row.op;
  simd_fail("unknown op '" + std::string(name) + "'");
}

template <class Value>  // an ondemand::value or a simdjson_result of one
int32_t int32_of(Value v) {
  int64_t x = 0;
  if (v.get_int64().get(x) || x < INT32_MIN || x > INT32_MAX) simd_fail("expected an integer");
  return static_cast<int32_t>(x);
}

Schedule read_json_ondemand() {
  static simdjson::ondemand::parser parser;
  namespace od = simdjson::ondemand;
  Schedule s;
  std::string placement = "loop";
  od::document doc;
  if (parser.iterate(padded_json()).get(doc)) simd_fail("not JSON");
  od::object root;
  if (doc.get_object().get(root)) simd_fail("expected an object");
  for (auto field : root) {
    std::string_view key;
    if (field.unescaped_key().get(key)) simd_fail("bad key");
    od::value v = field.value();
    if (key == "format" || key == "name") {
      std::string_view t;
      if (v.get_string().get(t)) simd_fail("expected a string");
      if (key == "name") s.name = std::string(t);
    } else if (key == "version") {
      int32_of(v);
    } else if (key == "ranks") {
      s.ranks = int32_of(v);
    } else if (key == "stages") {
      s.stages = int32_of(v);
    } else if (key == "micro_batches") {
      s.micro_batches = int32_of(v);
    } else if (key == "placement") {
      std::string_view t;
      if (v.get_string().get(t)) simd_fail("placement: only a name here");
      placement = std::string(t);
    } else if (key == "programs") {
      od::array programs;
      if (v.get_array().get(programs)) simd_fail("expected an array");
      for (auto prog_v : programs) {
        od::array prog_a;
        if (prog_v.get_array().get(prog_a)) simd_fail("expected an array");
        Program& prog = s.programs.emplace_back();
        if (s.programs.size() > 1) prog.reserve(s.programs[s.programs.size() - 2].size());
        for (auto slot_v : prog_a) {
          od::value slot;
          if (slot_v.get(slot)) simd_fail("bad slot");
          od::json_type type;
          if (slot.type().get(type)) simd_fail("bad slot");
          if (type == od::json_type::null) {
            prog.push_back(std::nullopt);
            continue;
          }
          if (type == od::json_type::string) {
            std::string error;
            auto st = parse_action(std::string_view(slot.get_string()), &error);
            if (!st) simd_fail(error);
            prog.push_back(std::move(*st));
            continue;
          }
          od::object step_o;
          if (slot.get_object().get(step_o)) simd_fail("expected a step object");
          Step st;
          // Keys compared raw (no unescaping copy): the fastest On-Demand field loop.
          for (auto sf : step_o) {
            od::field f;
            if (std::move(sf).get(f)) simd_fail("bad key");
            const od::raw_json_string k = f.key();
            if (k == "op") {
              std::string_view name;
              if (f.value().get_string().get(name)) simd_fail("expected a string");
              st.op = op_of(name);
            } else if (k == "micro") {
              st.micro = int32_of(f.value());
            } else if (k == "stage") {
              st.stage = int32_of(f.value());
            } else if (k == "peer") {
              st.peer = int32_of(f.value());
            } else {
              simd_fail("this benchmark reads plain steps only");
            }
          }
          prog.push_back(std::move(st));
        }
      }
    } else {
      simd_fail("this benchmark reads the measured file's keys only");
    }
  }
  s.placement = placement == "v" ? Placement::v(s.ranks, s.stages) : Placement::loop(s.ranks, s.stages);
  mark_data_steps(s);
  validate_structure(s, "big.json");
  drop_rank_tags(s);
  return s;
}

#endif

// The schedule and both texts are function-local statics, built on first use: every benchmark
// builds them before its timed loop, so no iteration pays for generating or writing them
// (which, inside the first iteration, also cut the iteration count to a handful), whatever
// --benchmark_filter selects.
void build_texts() {
  benchmark::DoNotOptimize(json_text().size() + csv_text().size() + big().step_count());
}

template <class Read>
void read_bench(benchmark::State& state, const std::string& text, Read&& read) {
  build_texts();
  size_t steps = 0;
  for (auto _ : state) {
    Schedule s = read();
    steps = s.step_count();
    benchmark::DoNotOptimize(s);
  }
  if (steps != big().step_count()) state.SkipWithError("the schedule did not read back whole");
  state.counters["steps"] = static_cast<double>(steps);
  state.counters["steps_per_s"] =
      benchmark::Counter(static_cast<double>(steps), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MB_per_s"] =
      benchmark::Counter(static_cast<double>(text.size()) / 1e6, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_ReadJson(benchmark::State& state) { read_bench(state, json_text(), read_json); }
void BM_ReadCsv(benchmark::State& state) { read_bench(state, csv_text(), read_csv); }
#if PPSCHED_BENCH_SIMDJSON
// The same JSON text through simdjson (padded once, outside the loop: a reader adopting it
// would load the file into a padded_string directly).
void BM_ReadJsonSimdjsonOnDemand(benchmark::State& state) {
  benchmark::DoNotOptimize(padded_json().size());
  read_bench(state, json_text(), read_json_ondemand);
}
#endif

// A pin: the JSON path and the CSV path in one iteration, their best times compared; fails
// (SkipWithError, which `meson test --benchmark` reports) when JSON / CSV exceeds `bound`.
// `path(read)` runs one path from a reader and returns whether its result is right.
template <class Path>
void pin_json_over_csv(benchmark::State& state, Path&& path, double bound, const char* what) {
  using Clock = std::chrono::steady_clock;
  build_texts();
  double best_json = 1e30, best_csv = 1e30;
  bool right = true;
  int pairs = 0;  // with none the ratio would be 1e30 / 1e30, a pass
  for (auto _ : state) {
    ++pairs;
    auto t0 = Clock::now();
    right = path(read_json) && right;
    auto t1 = Clock::now();
    right = path(read_csv) && right;
    auto t2 = Clock::now();
    best_json = std::min(best_json, std::chrono::duration<double>(t1 - t0).count());
    best_csv = std::min(best_csv, std::chrono::duration<double>(t2 - t1).count());
  }
  const double ratio = best_json / best_csv;
  state.counters["json_ms"] = best_json * 1e3;
  state.counters["csv_ms"] = best_csv * 1e3;
  state.counters["json_over_csv"] = ratio;
  state.counters["pin_checks"] = pairs;
  static std::string why;  // SkipWithError keeps the pointer
  if (!right) {
    state.SkipWithError("the schedule did not read back whole or did not verify");
  } else if (ratio > bound) {
    why = std::string(what) + " the JSON took " + std::to_string(ratio) + "x the CSV's time (" +
          std::to_string(best_json * 1e3) + " vs " + std::to_string(best_csv * 1e3) + " ms), over " +
          std::to_string(bound) + "x";
    state.SkipWithError(why.c_str());
  }
}

// Reading alone (the JSON text is five times the CSV's): at most 3x.
void BM_JsonOverCsv(benchmark::State& state) {
  pin_json_over_csv(state, [](Schedule (*read)()) {
    Schedule s = read();
    benchmark::DoNotOptimize(s);
    return s.step_count() == big().step_count();
  }, 3.0, "reading");
}

// The target, end to end as `ppsched check` runs it: read (from memory) and verify the
// same schedule from each format; the JSON path may take at most 1.5x the CSV path.
void BM_CheckJsonOverCsv(benchmark::State& state) {
  pin_json_over_csv(state, [](Schedule (*read)()) { return verify(read()).ok(); }, 1.5, "checking");
}

}  // namespace

BENCHMARK(BM_ReadJson)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReadCsv)->Unit(benchmark::kMillisecond);
#if PPSCHED_BENCH_SIMDJSON
BENCHMARK(BM_ReadJsonSimdjsonOnDemand)->Unit(benchmark::kMillisecond);
#endif
BENCHMARK(BM_JsonOverCsv)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CheckJsonOverCsv)->Unit(benchmark::kMillisecond);

// main(): bench_main.cpp.
