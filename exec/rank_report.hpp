// What each rank tells rank 0 after the run, through the store (outside the schedule's
// channels), in one JSON document per rank: its losses (the ranks holding a last stage), where
// it ran, how many parameter elements it holds, and (replica 0, --trace) its timed record.
// Gradients for --check-parity travel apart, as packed tensor bytes (exec/parity.hpp).
// Torch-free, so that it is tested without libtorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "exec/measured_trace.hpp"
#include "exec/outcome.hpp"

namespace ppsched::exec {

struct RankReport {
  int rank = -1;                        // global rank
  std::optional<std::vector<double>> losses;  // per iteration, when it holds a last stage
  CpuBindingReport cpu;
  int64_t parameter_elements = 0, held_parameter_elements = 0;
  int64_t all_to_alls = 0, all_to_alls_overlapped = 0;  // --model moe --ep > 1 (exec/outcome.hpp)
  std::optional<RankTrace> trace;       // replica 0's pipeline ranks, with --trace
};

std::string serialize(const RankReport& r);
// Throws std::runtime_error naming the rank and the field on a malformed report.
RankReport parse_rank_report(const std::string& text);

}  // namespace ppsched::exec
