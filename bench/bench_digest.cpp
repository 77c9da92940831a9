// The run digest (schedule_digest, which exec/session.cpp compares across ranks) over the
// 782,336-step P=32 V=4 M=1024 interleaved-1F1B schedule: XXH3-64 (xxHash, what schedule_digest
// uses since issue 25 item 9) against the FNV-1a it replaced, both over the same byte stream
// (schedule/schedule_digest.hpp), measured in one run (docs/performance.md gives the figures).
// Run: build/bench/bench_digest (or `meson test --benchmark`).
#include <benchmark/benchmark.h>

#include "bench/big_schedule.hpp"
#include "schedule/schedule_digest.hpp"

using namespace ppsched;

namespace {

// The digest before issue 25 item 9: FNV-1a, a multiply per byte of the same stream.
class Fnv1aSink {
 public:
  void add(uint64_t v) {
    for (int k = 0; k < 8; ++k) byte(static_cast<unsigned char>(v >> (8 * k)));
  }
  void bytes(const std::string& s) {
    for (unsigned char c : s) byte(c);
  }
  uint64_t value() const { return h_; }

 private:
  void byte(unsigned char c) {
    h_ ^= c;
    h_ *= 0x100000001b3ull;
  }
  uint64_t h_ = 0xcbf29ce484222325ull;
};

uint64_t fnv1a_digest(const Schedule& s) {
  Fnv1aSink sink;
  DigestFields<Fnv1aSink>(sink).schedule(s);
  return sink.value();
}

template <class Digest>
void digest_bench(benchmark::State& state, Digest&& digest) {
  const Schedule& s = bench::big_schedule();
  for (auto _ : state) benchmark::DoNotOptimize(digest(s));
  state.counters["steps_per_s"] = benchmark::Counter(static_cast<double>(s.step_count()),
                                                     benchmark::Counter::kIsIterationInvariantRate);
}

void BM_DigestFnv1a(benchmark::State& state) { digest_bench(state, fnv1a_digest); }
void BM_DigestXxh3(benchmark::State& state) { digest_bench(state, schedule_digest); }

}  // namespace

BENCHMARK(BM_DigestFnv1a)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DigestXxh3)->Unit(benchmark::kMillisecond);

// main(): bench_main.cpp.
