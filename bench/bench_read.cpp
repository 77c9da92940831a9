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

#include "checkers/checks.hpp"
#include "model/formats/pytorch_csv.hpp"
#include "model/formats/schedule_json.hpp"
#include "model/generators/generator.hpp"

using namespace ppsched;

namespace {

const Schedule& big() {
  static const Schedule s = [] {
    GenerateOptions g;
    g.pp = 32;
    g.vpp = 4;
    g.micro = 1024;
    return generate("interleaved-1f1b", g);
  }();
  return s;
}

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

// A pin: the JSON path and the CSV path in one iteration, their best times compared; fails
// (SkipWithError, which `meson test --benchmark` reports) when JSON / CSV exceeds `bound`.
// `path(read)` runs one path from a reader and returns whether its result is right.
template <class Path>
void pin_json_over_csv(benchmark::State& state, Path&& path, double bound, const char* what) {
  using Clock = std::chrono::steady_clock;
  build_texts();
  double best_json = 1e30, best_csv = 1e30;
  bool right = true;
  for (auto _ : state) {
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
BENCHMARK(BM_JsonOverCsv)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CheckJsonOverCsv)->Unit(benchmark::kMillisecond);

// main(): bench_main.cpp.
