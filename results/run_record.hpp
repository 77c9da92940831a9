// One run, simulated or measured: what ran when on which rank (slices, message flows, memory
// samples), what each rank did in total, and where the run came from (provenance). The DES
// (sim/engine.hpp) and the executor (exec/measured_trace.hpp) both fill one through a
// RunRecorder (results/recorder.hpp); traces/ writes it (Chrome trace, SVG, text grid) and
// reads a Chrome trace back into one (traces/trace_reader.hpp); `ppsched calibrate` fits a
// cost model from one (sim/calibrate.hpp). Nothing here knows how a run was priced or executed.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "lowering/diagnostics.hpp"
#include "lowering/options.hpp"
#include "schedule/schedule.hpp"

namespace ppsched {

// Comm: the communication stream beside the compute kernels (an MoE layer's all-to-all).
enum class Lane : uint8_t { Compute, Send, Recv, Collective, Comm };

// One timed interval of one step on one rank (a trace slice).
struct TimedSlice {
  int32_t rank = -1;
  int32_t step_index = -1;
  int32_t sub = -1;        // sub-step of a batch or composite, -1 otherwise
  // A phase of the step on the communication stream (Lane::Comm): its MoE layer among the
  // stage's and its position in the (sub-)step's StepTypeInfo::moe_phases; -1 otherwise.
  int32_t layer = -1;
  Lane lane = Lane::Compute;
  bool meta = false;       // a shape/dtype meta message
  int16_t phase = -1;
  double start_ms = 0, end_ms = 0;
  double bytes = 0;        // P2P / collective payload
};

// A matched message: from the sender's slice to the receiver's slice. leave_ms is when the
// payload left (inside the send slice), arrive_ms when it arrived (at most the receive slice's
// end); NaN when not known (a measured run records only the slices), and a trace then takes
// the send slice's start and the receive slice's end.
struct MessageFlow {
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
  // Data parallelism (SimOptions::check.dp): time this rank's DP-group collectives ran (its
  // FSDP_* steps'; without a pipeline under FSDP2, also those its forwards and backwards run
  // beside their compute), what of it its steps waited for (part of busy_ms), and whether its
  // DP ring crosses nodes.
  double dp_collective_ms = 0;
  double dp_exposed_ms = 0;
  bool dp_ring_inter_node = false;
  // MoE (sim/engine_streams.hpp): the time its all-to-alls ran on the communication stream, what
  // of it its steps waited for, and what running beside them slowed its compute by.
  double a2a_ms = 0, a2a_exposed_ms = 0, contention_ms = 0;
};

struct CriticalStep {
  int rank = -1, step_index = -1;
  Lane lane = Lane::Compute;
  double start_ms = 0, end_ms = 0;
  bool meta = false;      // a P2P step's shape/dtype meta message (else its payload)
  int sub = -1;           // the sub-step of a batch, -1 otherwise
};

struct LinkVolume {
  int src = -1, dst = -1;
  double bytes = 0;
  int messages = 0;
};

// ---- provenance: where a run came from ------------------------------------------------------

enum class RunSource : uint8_t { Simulated, Measured };
// The executor's transport (a measured run); None for a simulation.
enum class RunTransport : uint8_t { None, Gloo, Nccl };

const char* to_string(RunSource s);     // "simulated" / "measured"
const char* to_string(RunTransport t);  // "" / "gloo" / "nccl"
std::optional<RunTransport> transport_from_name(const std::string& name);

// The device mesh of a measured run with data parallelism (ppsched-exec --dp): the trace is one
// replica's pipeline, and global_ranks[r] is the global rank that ran its pipeline rank r.
struct RunMesh {
  int dp = 1, pp = 1;
  std::string order = "dp,pp";
  int replica = 0;
  std::vector<int> global_ranks;
};

// Where one rank of a measured run ran: its host and the CPUs it could use.
struct RankPlacement {
  std::string host;
  std::vector<int> cpus;
  bool bound = false;  // ppsched-exec bound it there (--cpu-bind)
};

// The model layers a stage held, in model order (names as the model file or the executor's
// model calls them: "embedding", "block 3", "head").
struct StageLayers {
  int stage = -1;
  std::vector<std::string> layers;
};

// The executor's split backward measured once on a stage (ppsched-exec --trace, after the run):
// one micro-batch's whole backward, and the same backward split as the schedule's BWD_INPUT and
// BWD_WEIGHT steps run it, medians of a few repetitions. A split costs more than the whole when
// its weight half re-traverses the graph; calibrate --model prices split steps with these ratios.
struct SplitBackwardProbe {
  int stage = -1;
  double bwd_ms = 0, bwd_input_ms = 0, bwd_weight_ms = 0;
};

struct RunProvenance {
  RunSource source = RunSource::Simulated;
  RunTransport transport = RunTransport::None;
  std::string label;           // a display label; empty: derived from source and transport
  std::string schedule;        // the schedule's name
  int ranks = 0, stages = 0, micro_batches = 0;
  // The runtime mode the run had (comm, overlap_p2p, mpipe_batched_recv, dyn_shape), so that a
  // prediction from it runs in the same mode; unset when not known (an older trace).
  std::optional<CheckOptions> mode;
  std::string mode_note;       // how the run's mode came about, when that needs saying
  std::optional<RunMesh> mesh;
  std::string cpu_bind;        // the --cpu-bind mode ("auto", "none", "blocks"); "" when not known
  std::vector<RankPlacement> placement;  // per pipeline rank; empty when not known
  std::vector<StageLayers> layers;       // per stage; empty when not known
  std::vector<SplitBackwardProbe> split_backward;  // per stage, measured runs with a trace; else empty
  bool shared_clock = false;   // measured: every rank timed on one host's monotonic clock
  std::vector<std::string> notes;  // records that could not be paired with the comm model, ...

  // "simulated", "measured (gloo)", ... unless `label` says otherwise.
  std::string display_label() const;
};

// The provenance every run of `s` starts from: its source, name and shape.
RunProvenance provenance_of(const Schedule& s, RunSource source);

struct RunRecord {
  RunProvenance provenance;
  bool completed = false;   // false: stopped by a deadlock (trace holds what ran until then)
  bool checked = true;      // false: simulated without the checks (SimOptions::run_checks)
  double makespan_ms = 0;
  std::vector<RankSummary> ranks;
  std::vector<CriticalStep> critical_path;  // from the first step to the last, in time order
  std::vector<LinkVolume> links;
  CheckReport check;        // every violation kind of `ppsched check` (a simulation)
  size_t steps = 0, events = 0;
  size_t phases = 0;        // MoE: the phases the compute steps on MoE stages expanded into
  int dp_degree = 1;             // the data-parallel replicas the run was priced for
  double dp_collective_ms = 0;   // sum over ranks of RankSummary::dp_collective_ms
  double dp_exposed_ms = 0;      // sum over ranks of RankSummary::dp_exposed_ms
  double a2a_ms = 0, a2a_exposed_ms = 0;  // sums over ranks of RankSummary's
  // trace
  std::vector<TimedSlice> slices;
  std::vector<MessageFlow> flows;
  std::vector<MemorySample> memory;
};

}  // namespace ppsched
