// The per-layer phases of a body compute step on a stage with MoE layers (issue 38): a schedule
// file stays at stage granularity (one FWD, BWD, BWD_INPUT or BWD_WEIGHT per stage and
// micro-batch) while the engine sees, for each MoE layer the stage holds, the phases the step
// table declares for the step's op (StepTypeInfo::moe_phases: attention, dispatch all-to-all,
// experts, combine all-to-all, and the backward's mirror), each on its stream.
//
// What a stage's layers are is the workload's (sim/workload_costs fills MoeStage below from the
// layers' FLOPs and all-to-all bytes, CostModel::moe); how long a phase lasts is the engine's
// (sim/engine_streams): a compute phase takes its share of the step's priced time, an
// all-to-all its bytes over the expert-parallel group's links.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "schedule/step_types.hpp"

namespace ppsched {

// Which of a stage's step times a share is of: FWD, BWD (whole), BWD_INPUT, BWD_WEIGHT.
enum class PhasePart : uint8_t { Forward, Backward, BackwardInput, BackwardWeight };
inline constexpr size_t kPhaseParts = 4;
// The part a compute kind's step is priced as (its PhasePart; -1: a step without phases).
inline int phase_part(ComputeKind k) {
  switch (k) {
    case ComputeKind::Forward: return static_cast<int>(PhasePart::Forward);
    case ComputeKind::Backward: return static_cast<int>(PhasePart::Backward);
    case ComputeKind::BackwardInput: return static_cast<int>(PhasePart::BackwardInput);
    case ComputeKind::BackwardWeight: return static_cast<int>(PhasePart::BackwardWeight);
    default: return -1;
  }
}

// The compute kind whose step time a part is (phase_part's inverse).
inline ComputeKind part_kind(PhasePart p) {
  switch (p) {
    case PhasePart::Forward: return ComputeKind::Forward;
    case PhasePart::Backward: return ComputeKind::Backward;
    case PhasePart::BackwardInput: return ComputeKind::BackwardInput;
    case PhasePart::BackwardWeight: return ComputeKind::BackwardWeight;
  }
  return ComputeKind::Backward;
}

// One MoE layer of a stage: the share of each step time (by PhasePart) its attention side takes
// (with the dense layers between the previous MoE layer and it) and its routed experts take, and
// the bytes each of its all-to-alls sends per micro-batch.
struct MoeLayerShare {
  std::array<float, kPhaseParts> before{}, experts{};
  double a2a_bytes = 0;
};

// A stage's MoE layers in forward order, and the share of each step time past the last one (the
// dense layers, the norm and the head after it). A stage without MoE layers has none.
struct MoeStage {
  std::vector<MoeLayerShare> layers;
  std::array<float, kPhaseParts> after{};
  bool empty() const { return layers.empty(); }
};

// One phase of an expanded step: the step table's phase, the MoE layer it belongs to (its index
// among the stage's MoE layers; -1 for the compute past the last one), and its size: a compute
// phase's share of its step's time, an all-to-all's bytes.
struct PhaseItem {
  Phase phase;
  uint8_t index = 0;   // its position in the op's StepTypeInfo::moe_phases
  int32_t layer = -1;
  double share = 0;
  double bytes = 0;
  // Under --delay-wgrad-compute (expand_phases' delay_wgrad), a backward's phases are priced as
  // its split halves: `share` is then of the step time of this part (BackwardInput for the
  // input-gradient phases, BackwardWeight for the delayed weight gradients); -1: of the step's
  // own time.
  int8_t part = -1;
  // A delayed weight-gradient phase: it runs after the phase before it in the listing (its
  // layer's input gradient) but nothing in the chain waits for it; it only holds its stream.
  bool beside = false;
};

// The phases leaf step `op` runs on a stage described by `m`, in order, appended to `out`: for a
// forward each MoE layer's attention side, dispatch, experts, combine, then the compute past the
// last layer; a backward the compute past the last layer first, then the layers in reverse, each
// as the step table orders its phases. Compute phases of zero share and all-to-alls of zero
// bytes (one EP rank) are left out. Nothing when the stage has no MoE layers or the op no phases.
// `delay_wgrad` (Megatron-Core's --delay-wgrad-compute): the step table's delayed_wgrad phases
// run, each right after the compute phase of its layer and work (the input gradient, priced as
// BackwardInput), beside the chain (PhaseItem::beside, priced as BackwardWeight); without it they
// are left out and the backward's phases carry the weight gradients.
void expand_phases(Op op, const MoeStage& m, std::vector<PhaseItem>& out, bool delay_wgrad = false);

// A step without phases (a dense stage's, or a sub-step of a composite whose other sub-step has
// them) as one phase: the whole step on the compute stream, named by its op. The engine prices
// it with the step's time; the stream lowering lists it as one compute operation.
inline PhaseItem whole_step_phase(Op op) {
  return PhaseItem{Phase{PhaseWork::Attention, Stream::Compute, op_name(op)}, 0, -1, 1.0, 0};
}

}  // namespace ppsched
