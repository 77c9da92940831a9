// The main() of every benchmark program: Google Benchmark's, under the ppsched CLI's memory
// policy (tools/process_memory.hpp), so that the figures are the CLI's.
#include <benchmark/benchmark.h>

#include "tools/process_memory.hpp"

int main(int argc, char** argv) {
  ppsched::use_batch_memory_policy();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
