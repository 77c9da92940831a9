// The main() of every benchmark program: Google Benchmark's, under the ppsched CLI's memory
// policy (tools/process_memory.hpp), so that the figures are the CLI's. A benchmark that pins a
// claim reports a broken one with state.SkipWithError; the program then exits 1 (after every
// benchmark ran and was reported), so that a pin is a check.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tools/process_memory.hpp"

namespace {

// The console reporter, remembering which runs reported an error.
class PinReporter : public benchmark::ConsoleReporter {
 public:
  std::vector<std::string> failed;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (r.error_occurred) failed.push_back(r.benchmark_name() + ": " + r.error_message);
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  ppsched::use_batch_memory_policy();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  PinReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  for (const std::string& f : reporter.failed) std::fprintf(stderr, "pin failed: %s\n", f.c_str());
  return reporter.failed.empty() ? 0 : 1;
}
