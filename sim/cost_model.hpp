// The cost and memory model of a simulation: what each step costs in time, what each message
// weighs, how fast each link is, and how many bytes each live cache entry holds.
// File format "ppsched-costs" version 1 (see README "Cost files"); an embedded default
// models a 7B-class transformer on H100-class GPUs so every command works without a file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "lowering/moe_phases.hpp"
#include "lowering/options.hpp"
#include "platform/interconnect.hpp"
#include "platform/protocol.hpp"
#include "schedule/schedule.hpp"
#include "schedule/step_types.hpp"
#include "sim/fsdp2_timing.hpp"

namespace ppsched {

// A per-stage (and optionally per-micro) quantity: one scalar for every stage, one value per
// stage, or one row of per-micro values per stage (variable sequence lengths).
struct StageValue {
  std::vector<std::vector<double>> rows;  // rows[stage][micro]; a 1x1 table is a scalar
  bool given = false;

  static StageValue scalar(double v) { return StageValue{{{v}}, true}; }
  double at(int stage, int micro) const {
    if (rows.empty()) return 0.0;
    const auto& row = rows[stage >= 0 && static_cast<size_t>(stage) < rows.size() ? static_cast<size_t>(stage)
                                                                                    : (stage < 0 ? 0 : rows.size() - 1)];
    if (row.empty()) return 0.0;
    return row[micro >= 0 && static_cast<size_t>(micro) < row.size() ? static_cast<size_t>(micro)
                                                                      : (micro < 0 ? 0 : row.size() - 1)];
  }
};

// The MoE side of a cost model (issue 38): expert parallelism, the all-to-all's streams, and the
// phases of each stage's MoE layers (lowering/moe_phases.hpp).
struct MoeCosts {
  // Expert-parallel ranks an all-to-all spans (Training::ep): the first ep data-parallel replicas
  // of a pipeline rank (sim/engine_streams.cpp reads their links by locality).
  int ep = 1;
  // The share of the device communication kernels take while they run beside compute: a compute
  // phase beside an all-to-all runs at (1 - contention) of its speed. Default: DeepSeek-V3's
  // all-to-all kernels take 20 of an H800's 132 SMs (DeepSeek-V3 technical report, 3.2.2).
  double contention = 20.0 / 132.0;
  // Per stage, its MoE layers' phases (from a model; a cost file does not carry them): empty, or
  // one entry per stage.
  std::vector<MoeStage> stages;
  // The cost of one all-to-all as a link of its own, t = latency + bytes this rank sends /
  // bandwidth, whatever the group's placement: what `ppsched calibrate` fits from a measured
  // run's comm stream (ppsched-exec --model moe). Unset: the platform's links (engine_prices).
  std::optional<Link> a2a;
  // Megatron-Core's --delay-wgrad-compute: a backward's weight gradients run beside its chain,
  // each after its layer's input gradient (expand_phases' delay_wgrad), priced as the split
  // backward's halves (BWD_INPUT, BWD_WEIGHT times).
  bool delay_wgrad = false;
  const MoeStage* stage(int s) const {
    return s >= 0 && static_cast<size_t>(s) < stages.size() && !stages[static_cast<size_t>(s)].empty()
               ? &stages[static_cast<size_t>(s)]
               : nullptr;
  }
};

struct CostModel {
  std::string source = "default";  // "default" or the file it was read from
  // compute times (milliseconds) by ComputeKind: FWD, BWD, BWD_INPUT, BWD_WEIGHT,
  // TOWER_FWD (MPIPE_TRANSPOSE_FWD), TOWER_BWD (MPIPE_TRANSPOSE_BWD), TOWER_GRAD_BWD
  // (the backward in MPIPE_GRAD_RECV_WITH_BACKWARD), DATA_LOAD, FSDP, SWAP.
  StageValue fwd, bwd, bwd_input, bwd_weight, tower_fwd, tower_bwd, tower_grad_bwd, data_load, fsdp, swap;
  // payload bytes by Payload kind
  StageValue activation_bytes, gradient_bytes;  // per stage (per micro): one message
  double data_bytes = 0, features_bytes = 0, tower_input_bytes = 0, feature_grad_bytes = 0;
  double meta_bytes = 64;            // one shape/dtype meta message
  double tower_param_bytes = 0;      // MPIPE_PARAM_BROADCAST / MPIPE_GRAD_REDUCE payload
  double tied_param_bytes = 0;       // ALL_REDUCE payload
  // Per stage: the bytes of the stage's parameters, and of its gradients (same dtype), that
  // the FSDP_* data-parallel collectives move (per stage only, never per micro-batch).
  StageValue param_bytes;
  // Per stage: the part of param_bytes that is routed experts (split over ep ranks, so their
  // optimizer state and, with --fsdp, all of them are sharded over the dp / ep expert-data-
  // parallel ranks: Megatron's 6 + 12 / EDP bytes per expert parameter).
  StageValue expert_param_bytes;
  MoeCosts moe;
  // the platform (platform/): links by locality, the collectives' algorithm, the protocol
  Links links;
  CollectiveAlgorithm collectives = CollectiveAlgorithm::Ring;
  Protocol protocol;
  // OVERLAP_*: how much of the shorter sub-step runs hidden behind the longer one (1 = fully).
  // Two computes on one device take turns unless measured otherwise (calibrate; a kernel pair
  // that leaves SMs idle may overlap a little), so the default is 0, serial.
  double overlap_efficiency = 0;
  // memory
  std::optional<double> capacity_bytes;   // per rank, usable (a device's memory less its reserve); reported against the peak
  std::string capacity_basis;             // how capacity_bytes was derived, for reports ("" : given as is)
  // A peak within this fraction below the capacity is reported as tight (its figures are
  // estimates; fragmentation and untracked buffers move a few %). Every cost model's default.
  double memory_margin = 0.05;
  StageValue kept_activation_bytes;       // FWD -> BWD per stage (per micro)
  StageValue weight_grad_bytes;           // BWD_INPUT -> BWD_WEIGHT per stage (per micro); none: half the above
  StageValue workspace_bytes;             // held while a backward runs (recomputation) per stage (per micro)
  // Held for the whole step per stage (per stage only), before data-parallel sharding.
  StageValue weights_bytes, grads_bytes, optimizer_bytes;
  // Weights several of those stages count whole (a tied embedding and head, MTP's copies): a
  // rank holding several of the stages holds them once.
  std::vector<SharedWeights> shared_weights;
  // A one-stage plan from a network (no pipeline): the units FSDP2 wraps, in forward order,
  // which a one-stage schedule's FSDP_UNSHARD gathers two at a time (MemoryModel::fsdp_units).
  // A cost file does not carry them.
  std::vector<FsdpUnit> fsdp_units;
  // Its layers in forward order with their units and compute: the engine prices the all-gathers
  // and reduce-scatters FSDP2 runs in every forward and backward from them (sim/fsdp2_timing.hpp).
  std::vector<FsdpLayerTime> fsdp_layers;
  double tower_graph_bytes = 0;           // owner_backward: the kept tower graph per micro
  double tower_copy_bytes = 0;            // every rank keeps a full tower copy (MPipe)

  // Compute time of a (non-composite) step, in ms.
  double compute_ms(Op op, int stage, int micro) const;
  // Bytes of one payload message of a P2P step.
  double payload_bytes(Op op, int stage, int micro) const;
  // The link between two ranks (per-pair override, else intra/inter node by ranks_per_node).
  const Link& link(int src, int dst) const { return links.link(src, dst); }
  // The memory model the checkers use, from this cost model (stage count for the arrays).
  MemoryModel memory_model(int stages) const;

  // The StageValue a compute kind is priced by (ComputeKind::None: an all-zero value).
  const StageValue& compute(ComputeKind kind) const;
  // The same field, to set (calibrate). Throws std::logic_error for ComputeKind::None.
  StageValue& compute(ComputeKind kind);
  // How many stages the per-stage arrays describe: 1 when every value is a scalar.
  int stage_count() const;
  // Whether any per-stage value has per-micro rows (then a price depends on the micro-batch).
  bool varies_by_micro() const;
  // Throws InputError (this model's source, the offending field) when a per-stage array does
  // not have one entry per stage, or a per-micro row not one entry per micro-batch
  // (micro_batches <= 0: rows are not checked).
  void check_fits(int stages, int micro_batches) const;
  // The model of a schedule with `pipes` copies of its stages (Schedule::pipes): stage k costs
  // what model stage k mod S costs, so each per-stage array is repeated once per copy (scalars
  // stay scalars). Per-micro rows are kept as they are; the shared weights' stages are offset
  // per copy by `model_stages` (0: stage_count()).
  CostModel per_copies(int pipes, int model_stages = 0) const;
};

// Whether a peak is tight: within `margin` (a fraction) below `budget`, not over it. Every report
// that marks plans near their budget (simulate, compare, tune) asks this.
inline bool within_margin(double peak, double budget, double margin) {
  return peak <= budget && peak > budget * (1 - margin);
}

// The per-stage values of a cost model with the cost-file path each is written at (compute.FWD,
// bytes.activation, memory.weights_bytes, ...): what the shape checks and the writers visit.
struct StageField {
  std::string path;
  StageValue CostModel::*value;
  bool per_stage_only;  // no per-micro rows (parameters and resident bytes)
};
const std::vector<StageField>& stage_fields();

// The "compute" keys of a cost file, in file order, with the kind each one prices.
struct ComputeKey {
  std::string_view key;
  ComputeKind kind;
};
const std::vector<ComputeKey>& compute_keys();

// The embedded default describes the 7B-class model split over this many stages when no
// stage count is known (8 of its 32 layers per stage).
inline constexpr int kDefaultCostStages = 4;
// The embedded default for a schedule of `stages` stages: the 32 layers divided evenly
// (stages <= 0: kDefaultCostStages).
CostModel default_cost_model(int stages);
// The model as a complete "ppsched-costs" file (derived values written out); read_cost_model
// reads it back to an equal model.
std::string write_cost_model(const CostModel& model);

// The model as a cost file's document (what write_cost_model writes), and a document read as a
// cost file (read_cost_model's checks, its errors located in `file_name`): `--costs` over a
// model's cost model overlays the file on this document, no text in between.
nlohmann::json cost_document(const CostModel& model);
CostModel read_cost_document(const nlohmann::json& doc, const std::string& file_name);

// The embedded default (documented sources in cost_model.cpp and the README), for
// kDefaultCostStages stages.
CostModel default_cost_model();
// Parses a "ppsched-costs" file; throws InputError with the file and the JSON path.
CostModel read_cost_model(std::string_view text, const std::string& file_name);
CostModel read_cost_file(const std::string& path);
// A commented starting file (JSON with "comment" keys, accepted by the reader as is), with
// the default's numbers for kDefaultCostStages stages, or for `stages` stages.
std::string cost_template();
std::string cost_template(int stages);

// Whether schedule `s` under `dp` runs FSDP2's collectives unit by unit in its forwards and
// backwards, priced by sim/fsdp2_timing.hpp, instead of one collective per FSDP_* step: one
// stage, FSDP_* steps in it, the cost model's FSDP2 units (from a model), --fsdp over N > 1.
bool fsdp2_per_unit(const Schedule& s, const CostModel& c, const DataParallelOptions& dp);

}  // namespace ppsched
