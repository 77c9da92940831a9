// Per-step timing of a real run, as a RunRecord (results/run_record.hpp) like a simulation's:
// each rank records what it ran (timed intervals, the messages it exchanged), ships the
// records to rank 0 after the iteration, and rank 0 builds one RunRecord for every rank and
// writes it with the same Chrome-trace writer as `ppsched simulate --trace` (source "measured"). Torch-free: the
// records are plain numbers, so this part compiles and is tested without libtorch.
//
// What a slice is, so that a measured trace reads like a simulated one:
//  - compute and local steps: one slice on the compute lane (OVERLAP_* sub-steps, which the
//    executor runs one after the other, one slice each with their sub index);
//  - P2P: one slice per blocking phase, as the comm model lowers it: each shape/dtype meta
//    message (meta = true; a batch's metas carry their sub-step), each payload of a single
//    step, and a BATCH_SEND_RECV's payload group (one slice for all its messages); a
//    receive that computes (MPIPE_GRAD_RECV_WITH_BACKWARD) also gets a compute slice;
//  - collectives: one slice on the collective lane, bytes = the tensors reduced or broadcast.
// Flows pair each payload or meta slice with its partner's through the comm model's FIFO
// matching (lowering/comm_model.hpp), never by re-deriving it here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exec/cpu_binding.hpp"
#include "lowering/comm_model.hpp"
#include "schedule/schedule.hpp"
#include "results/run_record.hpp"

namespace ppsched::exec {

// What the executor sent and received, in order, to compare with the comm model and to pair
// measured slices.
struct LoggedMessage {
  int peer;
  bool send;
  bool meta;
  int step_index;
  int sub;
  int tensor;
};

struct TracedInterval {
  int step_index = -1;
  int sub = -1;
  Lane lane = Lane::Compute;
  double start_ms = 0, end_ms = 0;  // since the rank's epoch (taken right after a barrier)
  double bytes = 0;
  bool meta = false;
  int first_message = -1;  // P2P: range of the rank's LoggedMessages this interval carried
  int messages = 0;
  // An expert all-to-all (Lane::Comm, --model moe --ep > 1): its MoE layer among the stage's and
  // its position in the (sub-)step's StepTypeInfo::moe_phases, as the simulator's slices say.
  int layer = -1, phase = -1;
};

struct RankTrace {
  int rank = -1;
  // Where the epoch lies on this host's monotonic clock (steady_clock), and the host: ranks
  // on one host share that clock, so rank 0 can align them exactly (see assemble).
  std::string host;
  int64_t epoch_ns = 0;
  // The CPUs the rank's process could run on during the run, and whether ppsched-exec bound it
  // there (--cpu-bind); empty when not known.
  std::vector<int> cpus;
  bool cpu_bound = false;
  std::vector<TracedInterval> intervals;
  std::vector<LoggedMessage> messages;
  std::vector<SplitBackwardProbe> split_backward;  // this rank's stages (probe_split_backward)
};

// Its JSON form (inside the rank's report, exec/rank_report.hpp); from_json throws
// std::runtime_error on a malformed record.
std::string serialize(const RankTrace& t);
RankTrace parse_rank_trace(const std::string& text);

// What rank 0 knows of the run besides the ranks' records: it goes into the record's
// provenance (results/run_record.hpp), so that the trace says it and calibrate reads it.
struct MeasuredRunInfo {
  CheckOptions mode;                       // the runtime mode the executor ran
  RunTransport transport = RunTransport::None;
  std::optional<RunMesh> mesh;             // with --dp: the traced replica's place in the mesh
  CpuBindMode cpu_bind = CpuBindMode::Auto;
  std::vector<StageLayers> layers;         // the model layers each stage held
};

// One RunRecord for every rank, filled through the RunRecorder like a simulation: slices in
// rank order, on one time axis: when every rank ran on the same host, their shared monotonic
// clock (each rank's times shifted by its epoch's distance from the earliest epoch), else each
// rank's epoch (taken right after a barrier) is time 0; flows from the comm model's matching
// (info.mode, what the executor ran), link volumes, per-rank busy time and end; provenance
// (measured, the transport, the mode, the mesh, where each rank ran, the layers). A message the
// comm model has but the rank did not exchange is skipped only when it is a meta (body FWD
// metas go once per process, so later iterations have none); any other difference stops
// pairing that rank's messages and is reported in provenance.notes.
RunRecord assemble_measured_run(const Schedule& s, const std::vector<RankTrace>& ranks, const MeasuredRunInfo& info = {});
// The same with the run's lowering (of `s` under info.mode), as the executor built it once.
RunRecord assemble_measured_run(const Schedule& s, const std::vector<RankTrace>& ranks, const MeasuredRunInfo& info,
                                const CommModel& model);

}  // namespace ppsched::exec
