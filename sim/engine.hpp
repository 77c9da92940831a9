// The discrete-event simulator: replays the per-rank programs in simulated time, with the
// same lowering (lowering/comm_model.hpp) and the same verdicts as `ppsched check`.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "lowering/diagnostics.hpp"
#include "lowering/options.hpp"
#include "model/schedule.hpp"
#include "sim/cost_model.hpp"

namespace ppsched {

enum class Lane : uint8_t { Compute, Send, Recv, Collective };

// One timed interval of one step on one rank (a trace slice).
struct SimSlice {
  int32_t rank = -1;
  int32_t step_index = -1;
  int32_t sub = -1;        // sub-step of a batch (send/recv lanes), -1 otherwise
  Lane lane = Lane::Compute;
  double start_ms = 0, end_ms = 0;
  double bytes = 0;        // P2P / collective payload
  bool meta = false;       // a shape/dtype meta message
};

// A matched message: from the sender's slice to the receiver's slice. leave_ms is when the
// payload left (inside the send slice), arrive_ms when it arrived (at most the receive slice's
// end); NaN when not known (a measured run records only the slices), and a trace then takes
// the send slice's start and the receive slice's end.
struct SimFlow {
  int32_t id = 0;
  int32_t send_slice = -1, recv_slice = -1;
  double leave_ms = std::numeric_limits<double>::quiet_NaN();
  double arrive_ms = std::numeric_limits<double>::quiet_NaN();
};

// What a rank holds at one moment: everything (resident weights, gradients and optimizer state
// plus live activations and buffers), and the kept activations alone.
struct MemorySample {
  int32_t rank = -1;
  double time_ms = 0;
  int64_t bytes = 0;
  int64_t activations = 0;
};

// A rank's memory over the run (README "Model and memory"): what it holds for the whole step, the
// peak of its kept activations alone, and what its peak (RankSummary::peak_memory_bytes) is made of.
struct RankMemory {
  int64_t weights_bytes = 0, grads_bytes = 0, optimizer_bytes = 0;  // resident, after sharding
  int64_t activations_peak_bytes = 0;
  double activations_peak_time_ms = 0;
  // At the peak of the whole: kept activations, buffers (messages and hand-overs), gathered
  // parameters (--fsdp) and a recomputing backward's workspace.
  int64_t at_peak_activations_bytes = 0, at_peak_buffers_bytes = 0, at_peak_gathered_bytes = 0,
          at_peak_workspace_bytes = 0;
  int64_t resident_bytes() const { return weights_bytes + grads_bytes + optimizer_bytes; }
};

struct RankSummary {
  int rank = 0;
  double busy_ms = 0;     // compute stream busy
  double idle_ms = 0;     // makespan - busy
  double bubble_fraction = 0;
  int64_t peak_memory_bytes = 0;   // everything the rank holds, at its peak
  double peak_memory_time_ms = 0;
  int peak_memory_step = -1;
  RankMemory memory;
  double end_ms = 0;      // when this rank's host finished
  // Data parallelism (SimOptions::check.dp): time this rank's FSDP_* steps spent in their
  // DP-group collectives (part of busy_ms), and whether its DP ring crosses nodes.
  double dp_collective_ms = 0;
  bool dp_ring_inter_node = false;
};

struct CriticalStep {
  int rank = -1, step_index = -1;
  Lane lane = Lane::Compute;
  double start_ms = 0, end_ms = 0;
  bool meta = false;  // a P2P step's shape/dtype meta message (else its payload)
  int sub = -1;       // the sub-step of a batch, -1 otherwise
};

struct LinkVolume {
  int src = -1, dst = -1;
  double bytes = 0;
  int messages = 0;
};

struct SimOptions {
  CheckOptions check;       // comm semantics (eager/rendezvous, overlap_p2p, batched MPipe recv)
  bool record_trace = true; // keep slices, flows and memory samples
};

struct SimResult {
  bool completed = false;   // false: stopped by a deadlock (trace holds what ran until then)
  double makespan_ms = 0;
  std::vector<RankSummary> ranks;
  std::vector<CriticalStep> critical_path;  // from the first step to the last, in time order
  std::vector<LinkVolume> links;
  CheckReport check;        // every violation kind of `ppsched check`
  size_t steps = 0, events = 0;
  int dp_degree = 1;             // the data-parallel replicas the run was priced for
  double dp_collective_ms = 0;   // sum over ranks of RankSummary::dp_collective_ms
  // trace
  std::vector<SimSlice> slices;
  std::vector<SimFlow> flows;
  std::vector<MemorySample> memory;
};

// Throws InputError when options.check.dp cannot describe a job of s.ranks pipeline ranks.
SimResult simulate(const Schedule& s, const CostModel& costs, const SimOptions& options = {});

}  // namespace ppsched
