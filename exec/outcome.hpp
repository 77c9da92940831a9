// What one ppsched-exec process's run produced, as data: the command line (tools/exec_main.cpp)
// prints it and picks the exit code. Torch-free, like session.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ppsched::exec {

// Gradient parity of a run against the single-process reference (exec/parity.hpp).
struct ParityResult {
  bool ok = true;
  double tolerance = 1e-5;
  double max_rel_error = 0;      // over every compared gradient
  std::string worst;             // "block3.fc1.weight on rank 2"
  double loss_rel_error = 0;     // worst over iterations
  int tensors = 0;               // gradients compared
  std::vector<double> reference_losses;
  std::vector<std::string> problems;  // misplaced or missing gradients, errors over tolerance
};

// What rank 0 says about the trace it wrote.
struct TraceWritten {
  std::string path;
  size_t slices = 0, flows = 0;
  double makespan_ms = 0;
  bool cuda = false;
  bool shared_clock = false;
  std::vector<std::string> notes;
};

// Where one global rank's process ran (--cpu-bind, exec/cpu_binding.hpp).
struct CpuBindingReport {
  int rank = 0;
  bool bound = false;   // ppsched-exec bound it
  std::string cpus;     // the CPUs it could run on, "0-3,8"; "" when unknown
  std::string reason;   // why it was (not) bound
};

struct ExecOutcome {
  enum class Status : uint8_t {
    Ok,       // every rank ran every step of every iteration (and parity held when checked)
    Failed,   // a run failed: a step, a peer, connecting, or the parity check
    Refused,  // refused before any rank talked to another: --transport nccl without CUDA,
              // stage modules that do not chain, ranks started with different arguments
  };
  Status status = Status::Ok;
  // Refused: every reason, one line each ("rank 1: ..."); Failed: the final message (empty
  // when the parity check failed: the report says why).
  std::vector<std::string> errors;

  // Rank 0 after a completed run: what it reports.
  bool reporter = false;
  std::string transport;           // "gloo" / "nccl"
  std::vector<double> losses;      // per iteration, from the last stage's rank
  std::vector<double> seconds;     // per iteration, rank 0's wall clock
  std::optional<ParityResult> parity;
  std::optional<TraceWritten> trace;
  // Per global rank, after the last iteration: the parameter elements its stages have, and the
  // elements it holds (parameter tensors plus --fsdp shards; a resharded stage holds its shard).
  std::vector<int64_t> parameter_elements, held_parameter_elements;
  std::vector<CpuBindingReport> cpu_binding;  // per global rank
  // --model moe --ep > 1, per global rank: the expert all-to-alls its comm thread ran (every
  // iteration), and how many of them ran while another compute thread of the rank computed
  // (an overlapped step's other sub-step): the overlap the combined 1F1B exists for.
  std::vector<int64_t> all_to_alls, all_to_alls_overlapped;
};

}  // namespace ppsched::exec
