// Calibration: a cost model fitted to a run record (results/run_record.hpp) — in practice a
// Chrome trace read back by traces/trace_reader.hpp, from `ppsched-exec --trace` or
// `ppsched simulate --trace`.
//
// What is fitted, and from what:
//  - compute: every slice on a compute thread whose args name a step type with a compute kind
//    (FWD, BWD, BWD_INPUT, BWD_WEIGHT, MPIPE_TRANSPOSE_FWD/BWD, DATA_LOAD, the backward of
//    MPIPE_GRAD_RECV_WITH_BACKWARD, ...) is one sample of (kind, stage); the model's value is
//    the mean of the samples (the model adds step times up, so the mean reproduces the run's
//    total) or their median. A composite's single slice (a simulated
//    OVERLAP_*) prices two kinds at once and is not used; the executor records its sub-steps
//    separately (args.sub), which are.
//  - link: one flat latency + bandwidth, by least squares over P2P transfers t = L + bytes / B
//    and over pipeline-wide collectives with the simulator's ring formulas (below).
//    A transfer is a flow whose send slice and receive slice carry one message each (a batch's
//    group slice carries several concurrent ones and is left out). Its time runs from when
//    both ends could go: the later of the two posts and the end of the sender's last compute
//    slice issued before the send (its payload is not ready earlier), to the end of the
//    receive, so waiting for the peer is not counted.
//  - bytes: the median payload of each kind (activation / gradient per stage boundary, data,
//    features, ..., meta, collective payloads) as the slices' args.bytes give them.
//  - protocol: when the record's provenance says the run was measured on Gloo (otherData.transport),
//    its sends wait for their receiver (eager threshold 0), its compute
//    runs on the thread that posts the communication (compute_blocks_host), and a receiver
//    reads a payload in only while it waits (background_progress false), and a send
//    returns once the transport took its payload (send_handoff_ms: the mean time from a
//    fitted transfer's start to its send's end).
//  - mode: otherData.mode, the runtime mode the run had, for predicting it (Calibration::mode).
// Memory is not in a trace: the fitted model has no capacity and no kept activations.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "results/run_record.hpp"
#include "sim/cost_model.hpp"

namespace ppsched {

enum class Statistic { Median, Mean };

// The statistic of `v` (0 when empty; the median of an even count is the mean of the middle two).
double statistic(std::vector<double> v, Statistic s);

struct CalibrateOptions {
  Statistic statistic = Statistic::Mean;
  int stages = -1;  // -1: otherData.stages of the trace
  // Written to the fitted model's protocol section (the fit itself times every transfer as a
  // rendezvous, from the later post). Unset: 0 for a measured Gloo run (Gloo's
  // TCP pairs send only once the receiver posted), else the cost model's 4 MiB (NCCL's buffer).
  std::optional<double> eager_threshold_bytes;
  // Written to the protocol section too. Unset: true for a measured Gloo run
  // (the executor's Gloo runs compute on the CPU thread that posts the communication), else
  // false (a GPU run launches compute on a stream and goes on posting).
  std::optional<bool> compute_blocks_host;
  // The same: unset, false for a measured Gloo run (one core per rank: Gloo's
  // thread of the receiver reads a payload in only while the rank waits), else true.
  std::optional<bool> background_progress;
  // Whether to fit protocol.send_handoff_ms. Unset: for a measured Gloo run.
  std::optional<bool> send_handoff;
};

struct ComputeFit {
  std::string key;   // cost file key ("FWD", "TOWER_FWD", ...)
  int stage = -1;    // -1: a step without a stage (MPipe prefix, DATA_LOAD): one scalar
  int samples = 0;
  double value_ms = 0;  // what went into the model (median or mean)
  double median_ms = 0, mean_ms = 0, min_ms = 0, max_ms = 0;
};

struct LinkFit {
  int transfers = 0;         // usable P2P transfers
  int collectives = 0;       // pipeline-wide collective instances in the fit
  int sizes = 0;             // distinct payload sizes among them
  double latency_ms = 0;
  std::optional<double> bandwidth_GBps;  // nullopt: infinite (no size dependence measured)
  double rms_residual_ms = 0, max_residual_ms = 0;
  double mean_transfer_ms = 0;
  std::string note;          // how the fit was constrained, when it was
};

// A measured MoE run's comm stream (ppsched-exec --model moe --ep N --trace): its all-to-alls
// fitted as one link, t = latency + bytes sent / bandwidth (least squares over every all-to-all
// slice, from its hand-over to the comm thread to the end of its exchange); each stage's MoE
// layers, whose phase shares are the compute between the all-to-alls of the steps that ran
// alone; and the contention: the factor that makes the simulator's two-stream timeline of each
// overlapped step (run_streams) closest to its measured span (least squares over a grid of
// 0.00 .. 0.95).
struct MoeFit {
  int all_to_alls = 0;       // comm-stream slices fitted
  int sizes = 0;             // distinct byte counts among them
  double latency_ms = 0;
  std::optional<double> bandwidth_GBps;
  double rms_residual_ms = 0, mean_ms = 0;
  std::string note;
  int ep = 1;
  std::vector<int> layers;   // per stage, its MoE layers
  int shared_steps = 0;      // steps that ran alone whose gaps gave the shares
  int overlapped_steps = 0;  // overlapped steps the contention was fitted on (0: the default kept)
  double contention = 0;
  double contention_rms_ms = 0;
};

struct Calibration {
  CostModel costs;
  std::optional<MoeFit> moe;  // a measured MoE run's comm stream
  std::string schedule;      // otherData.schedule
  std::string label;         // the run's display label ("measured (gloo)", "simulated", ...)
  RunTransport transport = RunTransport::None;  // a measured run's transport (its protocol)
  std::vector<StageLayers> layers;  // the model layers each stage held, when the run said
  std::vector<SplitBackwardProbe> split_backward;  // the executor's split-backward probes, when the trace has them
  int ranks = 0, stages = 0, micro_batches = 0;
  int dp = 1;  // otherData.mesh: the data-parallel replicas of the traced pipeline (ppsched-exec --dp / --ep)
  // Per stage, the rank whose compute slices ran it: -1 none, -2 several (data-parallel
  // replicas, or a trace whose stages moved).
  std::vector<int> stage_ranks;
  // otherData.mode: the runtime mode the traced run had (comm, overlap_p2p, mpipe_batched_recv,
  // dyn_shape); unset for a trace that does not say.
  std::optional<CheckOptions> mode;
  std::vector<ComputeFit> compute;  // by cost key, then stage
  LinkFit link;
  double measured_makespan_ms = 0;  // last slice end - first slice start
  int slices = 0, flows = 0;
  std::vector<std::string> notes;   // what the fit left out or assumed
};

// Throws InputError (file, event index, field) when `text` is not a usable trace: not JSON,
// no traceEvents, no slices, a slice without the args calibration needs, an unknown op, a
// flow end that lies in no slice, a number beyond the cost file's limits (bytes, durations,
// a fitted link): what it returns, write_cost_model writes and read_cost_model reads.
Calibration calibrate_trace(std::string_view text, const std::string& file_name, const CalibrateOptions& options = {});

// The same fit from a trace already read (traces/trace_reader.hpp); `file_name` locates errors.
struct ReadTrace;
Calibration calibrate_run(const ReadTrace& trace, const std::string& file_name, const CalibrateOptions& options = {});

}  // namespace ppsched
