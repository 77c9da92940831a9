// Simulation speed: simulated steps per second (all invariant checks on, no trace), for
// schedules from ~10^3 to ~10^7 steps. The measured exponent of time vs steps goes in the
// README. Run: build/bench/bench_sim.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "bench/search_shapes.hpp"
#include "schedule/generators/generator.hpp"
#include "sim/engine.hpp"

using namespace ppsched;

namespace {

void BM_SimulateInterleaved(benchmark::State& state) {
  GenerateOptions g;
  g.pp = static_cast<int>(state.range(0));
  g.vpp = static_cast<int>(state.range(1));
  g.micro = static_cast<int>(state.range(2));
  Schedule s = generate("interleaved-1f1b", g);
  CostModel c = default_cost_model(s.stages);  // as the CLI builds it
  SimOptions o;
  o.record_trace = false;
  // As `ppsched simulate` sets them (tools/cli/cmd_simulate.cpp): the cost model's memory
  // model and its capacity as the budget, so the memory check runs as it does there.
  o.check.memory = c.memory_model(s.stages);
  if (c.capacity_bytes) o.check.memory_budget = static_cast<int64_t>(*c.capacity_bytes);
  for (auto _ : state) {
    RunRecord r = simulate(s, c, o);
    if (!r.completed || !r.check.ok()) state.SkipWithError("simulation did not complete clean");
    benchmark::DoNotOptimize(r.makespan_ms);
  }
  state.counters["steps"] = static_cast<double>(s.step_count());
  state.counters["steps_per_s"] =
      benchmark::Counter(static_cast<double>(s.step_count()), benchmark::Counter::kIsIterationInvariantRate);
}

// One evaluation of a search-sized schedule (issue 26 item 4: P 4/8/16, M = P/2P/4P, V 1/2,
// interleaved 1F1B, the embedded 7B model), evals_per_s: /0 with every check and the memory
// model's budget (as `simulate` runs it), /1 timing only (SimOptions::timing_only, the screening
// run of tune's DES hill climb).
void BM_SearchSizedRun(benchmark::State& state) {
  GenerateOptions g;
  g.pp = static_cast<int>(state.range(0));
  g.micro = static_cast<int>(state.range(1));
  g.vpp = static_cast<int>(state.range(2));
  const Schedule s = generate("interleaved-1f1b", g);
  const CostModel c = default_cost_model(s.stages);
  SimOptions o;
  o.record_trace = false;
  o.check.memory = c.memory_model(s.stages);
  if (c.capacity_bytes) o.check.memory_budget = static_cast<int64_t>(*c.capacity_bytes);
  o.timing_only = state.range(3) == 1;
  for (auto _ : state) {
    RunRecord r = simulate(s, c, o);
    if (!r.completed || !r.check.ok()) state.SkipWithError("simulation did not complete clean");
    benchmark::DoNotOptimize(r.makespan_ms);
  }
  state.counters["steps"] = static_cast<double>(s.step_count());
  state.counters["evals_per_s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

// Each size is run 5 times: this VM shares its host and one run varies by up to ±30%.
// The aggregates are per size; for steps_per_s, "max" is the best run and "median" the usual
// one. The first run of a size also pays for first-touching its memory (page faults); later
// runs reuse the heap (tools/process_memory.hpp).
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

BENCHMARK(BM_SimulateInterleaved)
    ->Args({4, 2, 32})        // ~1.4e3 steps
    ->Args({8, 2, 128})       // ~1.2e4
    ->Args({16, 4, 256})      // ~9.7e4
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.2)
    ->Repetitions(5)
    ->ComputeStatistics("min", min_of)
    ->ComputeStatistics("max", max_of);
BENCHMARK(BM_SimulateInterleaved)
    ->Args({32, 4, 1024})     // 782,336 (PyTorch's simulator: 43 K steps/s, 32 s end to end)
    ->Args({32, 4, 12800})    // ~9.8e6
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->Repetitions(5)
    ->ComputeStatistics("min", min_of)
    ->ComputeStatistics("max", max_of);

BENCHMARK(BM_SearchSizedRun)
    ->Apply([](benchmark::internal::Benchmark* b) { bench::search_shapes(b, {0, 1}); })  // timing_only
    ->ArgNames({"P", "M", "V", "timing_only"})
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.1);

// main(): bench_main.cpp.
