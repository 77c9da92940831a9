// The main() of every benchmark program: Google Benchmark's, under the ppsched CLI's memory
// policy (tools/process_memory.hpp), so that the figures are the CLI's. A benchmark that pins a
// claim reports a broken one with state.SkipWithError and counts what its assertions compared in
// the counter `pin_checks` (rows of a table, timed pairs); the program then exits 1 (after every
// benchmark ran and was reported), so that a pin is a check.
//
// A check must be able to fail, so the program also exits 1 when no benchmark ran (Google
// Benchmark exits 0 when --benchmark_filter matches nothing: a renamed pin would pass forever),
// and, given --pins (ppsched's flag, which the pin tests pass), when a run reports no
// `pin_checks` above 0: a pin whose assertions saw no rows, or a benchmark that is not a pin.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/process_memory.hpp"

namespace {

// The console reporter, remembering which runs reported an error or, under --pins, checked nothing.
class PinReporter : public benchmark::ConsoleReporter {
 public:
  bool pins = false;
  std::vector<std::string> failed;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred) {
        failed.push_back(r.benchmark_name() + ": " + r.error_message);
      } else if (pins && r.run_type == Run::RT_Iteration) {
        const auto c = r.counters.find("pin_checks");
        if (c == r.counters.end() || !(c->second.value > 0))
          failed.push_back(r.benchmark_name() + ": its assertions checked nothing (no pin_checks counter above 0)");
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  ppsched::use_batch_memory_policy();
  PinReporter reporter;
  int kept = 1;  // --pins is ours: taken out before Google Benchmark reads the arguments
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--pins") == 0) reporter.pins = true;
    else argv[kept++] = argv[i];
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const size_t ran = benchmark::RunSpecifiedBenchmarks(&reporter);
  const std::string filter = benchmark::GetBenchmarkFilter();
  benchmark::Shutdown();
  if (ran == 0) {
    std::fprintf(stderr, "error: no benchmark matches --benchmark_filter=%s: nothing was measured or checked\n",
                 filter.c_str());
    return 1;
  }
  for (const std::string& f : reporter.failed) std::fprintf(stderr, "pin failed: %s\n", f.c_str());
  return reporter.failed.empty() ? 0 : 1;
}
