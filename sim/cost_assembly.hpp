// Cost assembly: the one road from what a user gives to the cost model the checks, the engine
// and the searches price with. The inputs are a model description (workload/: its layers, its
// training and, typed, its platform: device, links, collectives, protocol), a layout over the
// stages, a cost file laid over the model's figures, and the pricing assumptions; or a cost
// file alone; or the embedded default. Every step takes and returns types: no text is written
// and read again on the way. The CLI fills a CostSource from its flags (tools/cli/cost_flags.cpp);
// tune's searches and calibrate call the same functions.
#pragma once

#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "schedule/schedule.hpp"
#include "workload/layout.hpp"
#include "workload/workload.hpp"
#include "sim/cost_model.hpp"
#include "sim/workload_costs.hpp"

namespace ppsched {

// What a command sets over a model description's training and device (its flags); unset: the
// file's. Applies to a model computed from its architecture (a Hugging Face config or a model
// file's hf_config); a model listing its layers with their figures refuses the sequence and
// micro-batch settings (their figures are fixed).
struct TrainingOverrides {
  std::optional<int64_t> seq_len, micro_batch_size;
  std::optional<Recompute> recompute;
  std::optional<bool> flash_attention;
  std::optional<AttentionCore> attention_core;
  std::optional<int> tp;
  std::optional<int> ep, etp;                 // expert parallelism (Training::ep, etp)
  std::optional<double> moe_capacity_factor;  // Training::moe_capacity_factor
  std::optional<Precision> precision;
  std::optional<Optimizer> optimizer;
  std::optional<int> dp;
  // Given together: the data-parallel sharding (plain replicas, ZeRO-1's distributed optimizer, FSDP).
  std::optional<bool> fsdp, distributed_optimizer;
  std::optional<int64_t> memory_reserve_bytes;
  std::string memory_reserve_text;  // as given, for messages
};

// `net` (read from `file`) with `o` applied; returns check_positions' notes (a sequence past a
// RoPE model's trained length). Throws InputError naming the flag and the file.
std::vector<std::string> apply_training(Workload& net, const TrainingOverrides& o, const std::string& file);

// Assumptions every cost model states, whatever its source (unset: the model's own).
struct PricingAssumptions {
  std::optional<double> overlap_efficiency;  // OVERLAP_F_B / OVERLAP_B_F sub-steps hidden, 0..1
  std::optional<double> memory_margin;       // a peak within this fraction below the capacity is tight
  std::optional<double> comm_contention;     // MoeCosts::contention
  std::optional<int> ranks_per_node;         // Links::ranks_per_node
  bool delay_wgrad = false;                  // MoeCosts::delay_wgrad (refused without MoE layers)
};
void apply_assumptions(const PricingAssumptions& a, CostModel& c);

// A cost file laid over a model's cost model: its keys replace the model's (objects merge key
// by key). A backward the file gives replaces all of the model's (BWD and its halves derive from
// each other), an activation message its gradient, activation memory the weight-gradient memory.
struct CostOverlay {
  std::string file;
  nlohmann::json doc;  // the file's object, read once
};
CostOverlay read_cost_overlay(const std::string& path);
// `base` with `top` laid over it; the model's FSDP2 units stay unless `top` sets the parameters they split.
CostModel overlay_costs(const CostModel& base, const CostOverlay& top);

// Where a command's costs come from.
struct CostSource {
  std::optional<Workload> workload;        // a model description, overrides applied
  std::string model_file;              // its file, for messages
  std::string layout;                    // --layout's text ("": the model file's, else the even split)
  // A planned schedule's layout (its planned_for), used when --layout is not given.
  std::vector<int64_t> layout_counts;
  std::optional<CostOverlay> overlay;    // a cost file over the model's figures
  std::optional<CostModel> file_costs;   // a cost file alone (no model)
  PricingAssumptions assumptions;
};

// The model's costs over `stages` stages in the source's layout, or over `layout` (of the
// model's layers): the overlay and assumptions applied, the layout and stage plan kept.
// Requires a network.
WorkloadCosts assemble_costs(const CostSource& src, int stages);
WorkloadCosts assemble_costs(const CostSource& src, Layout layout);

// The cost model of `stages` stages from any source (the cost file's, the model's, the default's).
CostModel costs_for(const CostSource& src, int stages);

// The cost model of schedule `s`: as above for its stages or, with replicated stages, for its
// model stages repeated once per copy (CostModel::per_copies); refused (InputError) when it does
// not fit the schedule's stages and micro-batches. A model's measured ranks
// (device.rank_time_factors) price the stages each one runs; when they describe another rank
// count, a note says so in `notes`.
CostModel costs_for(const CostSource& src, const Schedule& s, std::vector<std::string>* notes = nullptr);

// The note a command that prices stages, not ranks, gives when the model carries rank factors
// ("" when it does not).
std::string rank_times_unused_note(const CostSource& src, const char* command);

}  // namespace ppsched
