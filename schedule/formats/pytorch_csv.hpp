// PyTorch pipelining CSV schedules: one row per rank, one action per cell (empty = idle).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "schedule/schedule.hpp"

namespace ppsched {

struct CsvReadOptions {
  std::optional<Placement> placement;  // else inferred from the actions
  std::optional<int> micro_batches;    // else inferred (max micro + 1)
};
enum class CsvKind { ComputeOnly, ComputeComms };

// Reads either kind; a compute-only file gets its P2P steps from insert_p2p (Auto), by the rule
// JSON files follow too (insert_p2p_if_compute_only). `kind`, when given, is set to the kind the
// file was (ComputeComms: it held SEND/RECV actions); `inserted_p2p` to the number of P2P steps
// the column scan inserted (0: none).
Schedule read_pytorch_csv(std::string_view text, const std::string& file_name,
                          const CsvReadOptions& options = {}, CsvKind* kind = nullptr,
                          int64_t* inserted_p2p = nullptr);
// Writes the kind PyTorch's loaders take (torch/distributed/pipelining/schedules.py,
// _PipelineScheduleRuntime._load_csv): ComputeComms writes no idle slots (its loader refuses a
// blank cell: "Expected action to be not None"); ComputeOnly writes only compute actions (F, B,
// I, W and composites of them; its loader refuses communication actions, and re-derives the
// sends, receives and FSDP steps itself) and keeps idle slots as blank cells, which it allows.
std::string write_pytorch_csv(const Schedule& s, CsvKind kind);

}  // namespace ppsched
