// A cost model from a network (workload/): the per-stage figures of a layout priced as a cost
// file would give them, so that the checks and the engine read a model and a file alike. The
// embedded default (default_cost_model) is the default network's costs.
#pragma once

#include <string>
#include <vector>

#include "workload/layout.hpp"
#include "workload/workload.hpp"
#include "schedule/schedule.hpp"
#include "workload/stage_plan.hpp"
#include "sim/cost_model.hpp"

namespace ppsched {

// A network laid out over a schedule's stages, and its cost model.
// Tensor parallelism's collectives per micro-batch, priced into a stage's compute times
// (price_tensor_parallel below).
struct TensorParallelTime {
  std::vector<double> fwd_ms, bwd_ms;  // per stage, the first sequence length's (empty: TP 1)
};

struct WorkloadCosts {
  Workload workload;
  std::vector<Layer> layers;  // the figures of the first sequence length
  Layout layout;
  StagePlan plan;
  CostModel costs;
  TensorParallelTime tensor_parallel;  // what price_tensor_parallel added (assemble_costs applies it)
};

// The layout is `layout_text` ("" : the model file's, else torchtitan's even split), checked
// against `stages`. Throws InputError (the model file, the layout's source) on a bad layout or
// figures that leave the limits.
WorkloadCosts workload_costs(const Workload& net, int stages, const std::string& layout_text = "",
                           const std::string& layout_where = "--layout");
// The same for a layout already made (of `net`'s layers), or given as body-layer counts per
// stage (tune --partition search's candidates; refused like --layout's counts, `where`).
WorkloadCosts workload_costs(const Workload& net, Layout layout);
WorkloadCosts workload_costs(const Workload& net, const std::vector<int>& body_counts, const std::string& where);

// The cost model of a stage plan: compute times, boundary messages, kept activations, what each
// stage holds; the model file's link, collectives, protocol and overlap (cost-file keys) or the
// default's; the MPipe tower priced as the first two body layers.
// Prices each stage's compute steps (FWD, BWD, BWD_INPUT, BWD_WEIGHT) at the factor of the rank
// `s` places it on (Device::rank_time, what calibrate --model measured of each rank). Returns
// false, changing nothing, when the factors describe another rank count than the schedule's.
bool apply_rank_time(CostModel& c, const Device& d, const Schedule& s);

CostModel costs_from_plan(const Workload& net, const StagePlan& plan, const std::vector<Layer>& layers, std::string source);

// Tensor parallelism's collectives (Layer::tp_*; none when Training::tp is 1) added to each
// stage's forward and input-gradient backward times: they run on the compute stream between
// the layer's matmuls (Megatron-LM without its TP communication overlap), so a step waits for
// them. One all-gather or reduce-scatter of B bytes over a TP group of t ranks takes
// (t-1)/t B / bandwidth + (t-1) latency (NCCL's ring), over `links`' intra-node link when the
// group fits in a node (t <= ranks_per_node; Megatron places TP innermost), else the inter-node
// one. Keeps what it added to one micro-batch's forward and backward of each stage in
// nc.tensor_parallel (none when TP is 1).
void price_tensor_parallel(WorkloadCosts& nc, const Links& links);

}  // namespace ppsched
