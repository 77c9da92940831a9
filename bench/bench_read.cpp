// Reading speed of the two schedule formats at the 782,336-step P=32 V=4 M=1024
// interleaved-1F1B schedule: the canonical JSON (SAX straight into the IR) against PyTorch's
// CSV (compute_comms), both from text already in memory. `steps_per_s` and `MB_per_s`
// compare them; the JSON text is about five times the CSV's, and nlohmann's lexer sets the
// JSON reader's pace. Run: build/bench/bench_read (or `meson test --benchmark`).
#include <benchmark/benchmark.h>

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

template <class Read>
void read_bench(benchmark::State& state, const std::string& text, Read&& read) {
  size_t steps = 0;
  for (auto _ : state) {
    Schedule s = read(text);
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

void BM_ReadJson(benchmark::State& state) {
  static const std::string text = write_schedule_json(big());
  read_bench(state, text, [](const std::string& t) { return read_schedule_json(t, "big.json"); });
}

void BM_ReadCsv(benchmark::State& state) {
  static const std::string text = write_pytorch_csv(big(), CsvKind::ComputeComms);
  read_bench(state, text, [](const std::string& t) { return read_pytorch_csv(t, "big.csv"); });
}

}  // namespace

BENCHMARK(BM_ReadJson)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReadCsv)->Unit(benchmark::kMillisecond);

// main(): bench_main.cpp.
