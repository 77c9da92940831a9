// Verification speed: steps per second of verify() (all passes) on generated schedules,
// from 10^3 to ~10^6 steps. Run: build/bench/bench_check (or `meson test --benchmark`).
#include <benchmark/benchmark.h>

#include "checkers/checks.hpp"
#include "schedule/formats/schedule_json.hpp"
#include "schedule/generators/generator.hpp"

using namespace ppsched;

namespace {

Schedule interleaved(int pp, int vpp, int micro) {
  GenerateOptions g;
  g.pp = pp;
  g.vpp = vpp;
  g.micro = micro;
  return generate("interleaved-1f1b", g);
}

void BM_VerifyInterleaved(benchmark::State& state) {
  const int pp = static_cast<int>(state.range(0)), vpp = static_cast<int>(state.range(1)),
            micro = static_cast<int>(state.range(2));
  Schedule s = interleaved(pp, vpp, micro);
  size_t violations = 0;
  for (auto _ : state) {
    CheckReport r = verify(s);
    violations += r.violations.size();
    benchmark::DoNotOptimize(r);
  }
  if (violations) state.SkipWithError("schedule did not verify");
  state.counters["steps"] = static_cast<double>(s.step_count());
  state.counters["steps_per_s"] =
      benchmark::Counter(static_cast<double>(s.step_count()), benchmark::Counter::kIsIterationInvariantRate);
}

// The schedule JSON writer and reader on a million steps (8 ranks x 125,000 FWD): both
// linear in the steps. Formerly a hidden [.perf] case of tests/test_formats.cpp that nothing ran.
void BM_ScheduleJsonMillionSteps(benchmark::State& state) {
  Schedule s;
  s.name = "big";
  s.ranks = s.stages = 8;
  s.micro_batches = 125000;
  s.placement = Placement::loop(8, 8);
  s.programs.resize(8);
  for (int r = 0; r < 8; ++r)
    for (int m = 0; m < 125000; ++m) s.programs[static_cast<size_t>(r)].push_back(make_step(Op::FWD, m, r));
  size_t bytes = 0;
  for (auto _ : state) {
    const std::string text = write_schedule_json(s);
    const Schedule back = read_schedule_json(text, "big.json");
    if (!(back == s)) state.SkipWithError("the JSON round trip changed the schedule");
    bytes = text.size();
  }
  state.counters["MB"] = static_cast<double>(bytes) / 1e6;
  state.counters["steps_per_s"] = benchmark::Counter(1e6, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

// P, V, M: ~10^3, 10^4, 10^5 and the 782,336-step P=32 V=4 M=1024 case.
BENCHMARK(BM_VerifyInterleaved)
    ->Args({4, 2, 32})
    ->Args({8, 2, 128})
    ->Args({16, 4, 256})
    ->Args({32, 4, 1024})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ScheduleJsonMillionSteps)->Unit(benchmark::kMillisecond)->Iterations(1)->Repetitions(3);

// main(): bench_main.cpp.
