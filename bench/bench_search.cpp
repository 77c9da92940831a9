// Speed of the schedule search (issue 14): how soon P=8 M=32 reaches its best on one core,
// and a 20 s `tune` at P=16 M=64 against every family. Counters: best_found_at_s (seconds into
// the search when the best order was reached), makespans in ms, gain over the best family.
#include <benchmark/benchmark.h>

#include "sim/search/tune.hpp"

using namespace ppsched;
using namespace ppsched::search;

// The embedded 7B model over 8 stages, split backward, 80 GiB per rank, one thread.
static void BM_SearchP8M32OneCore(benchmark::State& state) {
  const CostModel costs = default_cost_model(8);
  const Problem p = problem_from_costs(costs, 8, 1, 32, PlacementKind::Loop, true, MemoryRule::Ppsched, std::nullopt);
  SearchOutcome so;
  for (auto _ : state) {
    SearchSettings st;
    st.threads = 1;
    st.iterations = 20000;
    st.seconds = 10;
    so = ppsched::search::search(p, family_seeds(p), st);
  }
  state.counters["best_found_at_s"] = so.best.found_at;
  state.counters["search_s"] = so.seconds;
  state.counters["makespan_ms"] = so.best.eval.makespan;
  state.counters["bound_ms"] = lower_bound(p).makespan;
  state.counters["stopped_by_time"] = so.stopped_by_time ? 1 : 0;
}
BENCHMARK(BM_SearchP8M32OneCore)->Unit(benchmark::kSecond)->Iterations(1);

// The ZB grid's largest case (P=8 M=32 c=0.1 mem 2P, ZB's model), span objective, one thread.
static void BM_SearchZbP8M32OneCore(benchmark::State& state) {
  const Problem p = zb_problem(8, 32, {1.0}, {1.0}, {1.0}, 0.1, 16);
  SearchOutcome so;
  for (auto _ : state) {
    SearchSettings st;
    st.threads = 1;
    st.objective = Objective::Span;
    so = ppsched::search::search(p, {}, st);
  }
  state.counters["best_found_at_s"] = so.best.found_at;
  state.counters["search_s"] = so.seconds;
  state.counters["span"] = so.best.eval.span;  // ZB heuristic: 96.8
}
BENCHMARK(BM_SearchZbP8M32OneCore)->Unit(benchmark::kSecond)->Iterations(1);

// `ppsched tune --pp 16 --micro 64 --seconds 20` on the embedded model (all cores).
static void BM_TuneP16M64(benchmark::State& state) {
  TuneResult r;
  for (auto _ : state) {
    TuneRequest rq;
    rq.pp = 16;
    rq.micro = 64;
    rq.costs = [](int stages) { return default_cost_model(stages); };
    rq.settings.seconds = 20;
    rq.settings.threads = 0;
    r = tune(rq);
  }
  double best_family = 0;
  for (const auto& e : r.leaderboard)
    if (e.origin == "family" && e.verified && (best_family == 0 || e.makespan_ms < best_family)) best_family = e.makespan_ms;
  const double best = r.best >= 0 ? r.leaderboard[static_cast<size_t>(r.best)].makespan_ms : 0;
  state.counters["tune_s"] = r.seconds;
  state.counters["best_ms"] = best;
  state.counters["best_family_ms"] = best_family;
  state.counters["at_least_as_fast_as_every_family"] = best > 0 && best <= best_family + 1e-9 ? 1 : 0;
  state.counters["bound_ms"] = r.bound.makespan;
}
BENCHMARK(BM_TuneP16M64)->Unit(benchmark::kSecond)->Iterations(1);
