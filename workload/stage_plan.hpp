// The figures of each pipeline stage: the sums over the layers a layout gives it. What a cost
// model needs (compute times, boundary bytes, kept activation bytes per micro-batch) and what the
// stage holds for the whole step (parameters, gradients, optimizer state).
#pragma once

#include <cstdint>
#include <vector>

#include "workload/layout.hpp"
#include "workload/workload.hpp"

namespace ppsched {

// One unit FSDP2 (fully_shard) wraps on a stage, as torchtitan's apply_fsdp_to_decoder wraps a
// decoder model: the embedding, each decoder (MTP, listed) layer, and the final norm with the
// output head (and the loss); a head tied to the embedding on the same stage joins the
// embedding's unit (docs/model.md "FSDP without a pipeline").
struct WrappedUnit {
  std::vector<int32_t> layers;  // indices into the network's layers, in forward order
  int64_t params = 0;           // one TP shard; a copy of a table another stage owns included
  // reshard_after_forward=False (torchtitan's default for the norm + head unit and for the tied
  // one): gathered from its forward to the end of its backward.
  bool kept_gathered = false;
};

struct StageFigures {
  std::vector<int32_t> layers;  // indices into the network's layers
  int64_t params = 0;           // held by the stage's ranks (a tied head's copy included), one TP shard
  // Resident bytes before any data-parallel sharding (lowering/options.hpp shards them).
  int64_t weight_bytes = 0, grad_bytes = 0, optimizer_bytes = 0;
  // Per micro-batch: one entry, or one per micro-batch when the sequence lengths differ.
  std::vector<double> fwd_flops, bwd_input_flops, bwd_weight_flops;
  std::vector<double> fwd_ms, bwd_ms;  // the whole backward: input + weight by their FLOPs
  // A split backward's steps: by their FLOPs, or the device's measured split fractions of bwd_ms.
  std::vector<double> bwd_input_ms, bwd_weight_ms;
  std::vector<int64_t> activation_bytes;   // kept from FWD to the backward
  std::vector<int64_t> weight_grad_bytes;  // kept from BWD_INPUT to BWD_WEIGHT
  std::vector<int64_t> workspace_bytes;    // held while a backward runs (its largest layer's)
  std::vector<int64_t> boundary_bytes;     // what it sends to the next stage (0 on the last)
  std::vector<WrappedUnit> fsdp_units;     // its layers as FSDP2 wraps them, in forward order
};

// A table of weights several stages hold, each counting it whole in its params: the embedding's
// (on its own stage and with a tied output head or an MTP module elsewhere) or the untied head's
// (with an MTP module elsewhere). A rank that holds several of these stages holds it once.
struct SharedTable {
  std::vector<int> stages;
  int64_t params = 0;  // one TP shard
};

struct StagePlan {
  std::vector<StageFigures> stages;
  int micro_variants = 1;  // entries of the per-micro vectors
  std::vector<SharedTable> shared;  // tables on more than one stage
};

// Per-stage figures of `net` under `layout`. Throws InputError when a sum leaves the limits.
StagePlan plan_stages(const Workload& net, const Layout& layout);

// Every one of `stages` stages holds the fraction 1/stages of every layer (the embedded default:
// 32 equal layers over any stage count, as its costs were always split). Every stage but the
// last is the same, so the plan holds min(stages, 2) entries: a stage that is not the last
// (when stages > 1) and the last one; memory does not grow with the stage count.
StagePlan plan_fraction(const Workload& net, int stages);

// Milliseconds for `flops` at the device's effective rate, rounded to the microsecond.
double compute_ms(const Device& d, double flops);
// The same for one step of a kind: the fitted rate and overhead where calibration gave them.
double compute_ms(const Device& d, double flops, RateKind kind);

}  // namespace ppsched
