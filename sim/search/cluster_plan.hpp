// `ppsched plan`: from "this model on these GPUs" to the best verified plans. A plan is a
// parallel shape (tensor x pipeline x data parallel, x expert parallel for an MoE model), a
// micro-batch size (so M = global batch / (DP x micro-batch size) micro-batches per step), a
// recomputation mode, a data-parallel sharding (plain replicas, Megatron's distributed
// optimizer, FSDP), and the schedule with its V and layer layout that tune finds best for them.
//
// The sweep (README "Plan a cluster"):
//   1. enumerate the shapes the constraints allow: TP divides the attention and key/value heads
//      and stays within a node unless asked; PP up to the body layers; DP = GPUs / (TP x PP)
//      divides the global batch; EP divides the experts and tiles DP x TP; PP = 1 included;
//   2. price each shape's lower bound (M x the model's forward + backward per micro-batch / PP,
//      TP collectives included) and refuse the ones whose weights, gradients and optimizer state
//      alone exceed the usable memory;
//   3. time the shapes in the order of their bounds with tune's families (every V up to
//      vpp_max, the data-parallel sync and FSDP's gathers priced, every candidate verified), a
//      shape skipped once its bound cannot beat the top plans found (branch and bound);
//   4. refine the best few with the layer-layout search and the order search (a framework that
//      runs only its own schedules keeps its families), with what is left of the time.
// Deterministic unless `seconds` stops it (the result says so).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "results/run_record.hpp"
#include "schedule/schedule.hpp"
#include "sim/cost_assembly.hpp"
#include "sim/search/tune.hpp"
#include "workload/workload.hpp"

namespace ppsched::search {

// The share of the usable memory a plan leaves free by default (PlanRequest::assumptions.memory_margin
// sets it): fragmentation and buffers a model cannot foresee.
inline constexpr double kPlanMemoryMargin = 0.05;

enum class Sharding : uint8_t { Replicas, DistributedOptimizer, Fsdp };
const char* to_string(Sharding s);  // "ddp", "zero1", "fsdp"

// What runs the plan, which narrows what it may be: torchtitan shards with FSDP (or keeps
// replicas) and runs any order (its CSV runtime); Megatron-LM runs its own 1F1B and interleaved
// 1F1B with replicas or its distributed optimizer; any: everything ppsched can verify.
enum class Framework : uint8_t { Any, Torchtitan, Megatron };

struct PlanShape {
  int tp = 1, pp = 1, dp = 1, ep = 1;
  int64_t micro_batch_size = 1;
  int micro = 1;  // M = global batch / (DP x micro-batch size)
  Recompute recompute = Recompute::None;
  Sharding sharding = Sharding::Replicas;
  std::string text() const;  // "TP 8 PP 4 DP 8 EP 1 mbs 1 M 16 recompute none zero1"
  DataParallelOptions data_parallel() const;  // its degree and sharding, as the DES and the memory model read them
};

struct PlanRequest {
  Workload model;              // read once; training overrides other than the shape's applied
  std::string model_file;
  int gpus = 0;
  int gpus_per_node = 8;
  int64_t global_batch = 0;    // sequences per step
  // Constraints: the values to try (empty: the defaults the header states).
  std::vector<int> tp, pp, ep;
  std::vector<int64_t> micro_batch_sizes;
  std::vector<Recompute> recompute;
  std::vector<Sharding> sharding;
  bool tp_across_nodes = false;  // allow TP > gpus_per_node (its collectives over the inter-node link)
  int vpp_max = 2;
  Framework framework = Framework::Any;
  std::vector<std::string> families;  // only these (empty: every family the framework runs)
  PricingAssumptions assumptions;     // ranks_per_node set from gpus_per_node
  bool prune = true;                  // skip shapes whose bound cannot enter the top plans (false: time every one)
  int top = 5;                        // plans kept
  int refine = 3;                     // best plans refined with the layout and order searches
  double seconds = 30;                // 0: no limit
  uint64_t seed = 1;
  int threads = 0;                    // shapes timed at once (0: every core)
  // Called from one worker at a time with the shapes timed, the shapes enumerated, the best step time so far (ms; 0: none
  // yet) and the elapsed seconds.
  std::function<void(long timed, long total, double best_ms, double elapsed)> progress;
};

struct Plan {
  PlanShape shape;
  Entry best;                  // tune's best verified entry (its layout filled)
  Schedule schedule;           // P2P (and FSDP) steps inserted, verified
  RunRecord sim;               // its DES run
  CostModel costs;             // the cost model of its stages
  std::vector<int64_t> layout; // body layers per stage
  std::string layout_megatron;
  std::string layout_even;     // the even split's counts, for comparison
  bool refined = false;        // the layout / order search ran on it
  double tune_seconds = 0;     // what timing its shape took (tune over the families)
  int vpp() const { return schedule.ranks > 0 ? schedule.stages / schedule.ranks : 1; }
  // Figures per step.
  double step_ms = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;              // model FLOPs (no recomputation) / (GPUs x peak x step)
  double tp_ms = 0;            // the busiest rank's TP collectives per step (in its compute)
  double dp_exposed_ms = 0;    // per rank: the data-parallel sync past the last compute
  double a2a_exposed_ms = 0;   // per rank: expert all-to-all not hidden
  int64_t peak_bytes = 0;      // the highest rank's peak
  int peak_rank = 0;
  std::string largest_part;    // of that peak: "activations", "optimizer state", ...
  int64_t largest_part_bytes = 0;
  int64_t budget_bytes = 0;    // what the plan was held to: the usable memory less the margin
};

struct PlanResult {
  std::vector<Plan> plans;              // best first, at most `top`
  std::optional<Plan> baseline;         // the best PP = 1 plan (none: none fits)
  long enumerated = 0, timed = 0, pruned_by_bound = 0, over_memory = 0, no_schedule = 0;
  std::map<std::string, long> refused;  // shapes the model or the GPUs refuse, by reason
  double seconds = 0;
  bool stopped_by_time = false;
  double model_flops_per_step = 0;      // the MFU's numerator
  double peak_flops = 0;                // per GPU
  // How the best step time improved: (seconds, ms) at each improvement.
  std::vector<std::pair<double, double>> trajectory;
};

// Throws InputError on constraints nothing satisfies (no shape at all).
PlanResult plan_cluster(const PlanRequest& rq);

// The model's training FLOPs of one step (forward and backward, no recomputation, every rank
// together) for `global_batch` sequences: what MFU counts.
double model_flops_per_step(const Workload& model, int64_t global_batch);

}  // namespace ppsched::search
