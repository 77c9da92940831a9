// Trace writing speed: chrome_trace_json and svg_timeline on fabricated results of 10^4 to
// 10^6 slices (a GPipe-like timeline with closed-form times, so this does not depend on the
// simulator). Target (issue "Simulation", Performance): a 10^6-step trace in under 2 s.
// Run: build/bench/bench_trace (or `meson test --benchmark`).
#include <benchmark/benchmark.h>

#include "traces/chrome_trace.hpp"
#include "traces/svg_timeline.hpp"

using namespace ppsched;

namespace {

struct Fabricated {
  Schedule s;
  RunRecord r;
};

// P ranks, M micro-batches; per rank: forward receive, FWD, forward send per micro, then the
// backward half, each P2P pair joined by a flow; a memory sample after every compute step.
Fabricated fabricate(int P, int M) {
  const double F = 1.0, B = 2.0, c = 0.25;
  Fabricated out;
  Schedule& s = out.s;
  RunRecord& r = out.r;
  s.name = "bench-gpipe";
  s.ranks = s.stages = P;
  s.micro_batches = M;
  s.placement = Placement::loop(P, P);
  s.programs.assign(static_cast<size_t>(P), {});
  const double T0 = (M - 1 + P - 1) * (F + c) + F;
  auto fs = [&](int rank, int m) { return (m + rank) * (F + c); };
  auto bs = [&](int rank, int m) { return T0 + (m + (P - 1 - rank)) * (B + c); };
  std::vector<int> fsend(static_cast<size_t>(P * M)), frecv(fsend.size()), bsend(fsend.size()), brecv(fsend.size());
  auto at = [&](int rank, int m) { return static_cast<size_t>(rank * M + m); };
  for (int rank = 0; rank < P; ++rank) {
    Program& p = s.programs[static_cast<size_t>(rank)];
    auto add = [&](Op op, int m, Lane lane, double a, double b) {
      p.push_back(make_step(op, m, rank));
      TimedSlice sl;
      sl.rank = rank;
      sl.step_index = static_cast<int32_t>(p.size() - 1);
      sl.lane = lane;
      sl.start_ms = a;
      sl.end_ms = b;
      sl.bytes = lane == Lane::Compute ? 0 : 4194304.0;
      r.slices.push_back(sl);
      return static_cast<int>(r.slices.size() - 1);
    };
    int64_t live = 0;
    for (int m = 0; m < M; ++m) {
      if (rank > 0) frecv[at(rank, m)] = add(Op::FWD_RECV, m, Lane::Recv, fs(rank - 1, m) + F, fs(rank, m));
      add(Op::FWD, m, Lane::Compute, fs(rank, m), fs(rank, m) + F);
      r.memory.push_back({rank, fs(rank, m) + F, live += 1 << 20});
      if (rank < P - 1) fsend[at(rank, m)] = add(Op::FWD_SEND, m, Lane::Send, fs(rank, m) + F, fs(rank, m) + F + c);
    }
    for (int m = 0; m < M; ++m) {
      if (rank < P - 1) brecv[at(rank, m)] = add(Op::BWD_RECV, m, Lane::Recv, bs(rank + 1, m) + B, bs(rank, m));
      add(Op::BWD, m, Lane::Compute, bs(rank, m), bs(rank, m) + B);
      r.memory.push_back({rank, bs(rank, m) + B, live -= 1 << 20});
      if (rank > 0) bsend[at(rank, m)] = add(Op::BWD_SEND, m, Lane::Send, bs(rank, m) + B, bs(rank, m) + B + c);
    }
  }
  for (int rank = 0; rank < P; ++rank)
    for (int m = 0; m < M; ++m) {
      if (rank < P - 1) r.flows.push_back({static_cast<int32_t>(r.flows.size()), fsend[at(rank, m)], frecv[at(rank + 1, m)]});
      if (rank > 0) r.flows.push_back({static_cast<int32_t>(r.flows.size()), bsend[at(rank, m)], brecv[at(rank - 1, m)]});
    }
  r.completed = true;
  r.makespan_ms = bs(0, M - 1) + B;
  r.steps = s.step_count();
  return out;
}

// Slices ~ 92 * M for P = 16.
void BM_ChromeTrace(benchmark::State& state) {
  Fabricated f = fabricate(16, static_cast<int>(state.range(0)));
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text = chrome_trace_json(f.s, f.r);
    bytes = text.size();
    benchmark::DoNotOptimize(text);
  }
  state.counters["slices"] = static_cast<double>(f.r.slices.size());
  state.counters["MiB"] = static_cast<double>(bytes) / (1 << 20);
  state.counters["slices_per_s"] =
      benchmark::Counter(static_cast<double>(f.r.slices.size()), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_SvgTimeline(benchmark::State& state) {
  Fabricated f = fabricate(16, static_cast<int>(state.range(0)));
  size_t bytes = 0;
  for (auto _ : state) {
    std::string svg = svg_timeline(f.s, f.r);
    bytes = svg.size();
    benchmark::DoNotOptimize(svg);
  }
  state.counters["slices"] = static_cast<double>(f.r.slices.size());
  state.counters["KiB"] = static_cast<double>(bytes) / 1024;
  state.counters["slices_per_s"] =
      benchmark::Counter(static_cast<double>(f.r.slices.size()), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

// M = 109, 1087, 10870: about 10^4, 10^5 and 10^6 slices.
BENCHMARK(BM_ChromeTrace)->Arg(109)->Arg(1087)->Arg(10870)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SvgTimeline)->Arg(109)->Arg(1087)->Arg(10870)->Unit(benchmark::kMillisecond);

// main(): bench_main.cpp.
