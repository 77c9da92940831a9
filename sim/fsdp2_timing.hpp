// The time FSDP2 (torch.distributed.fsdp.fully_shard) adds to a forward and a backward when it
// trains a model without a pipeline: every micro-batch's forward all-gathers the wrapped units
// one by one, its backward all-gathers them again (those not kept gathered since the forward)
// and reduce-scatters each unit's gradients. docs/model.md "FSDP without a pipeline" cites the
// sources; the memory side is lowering/fsdp2_gather.hpp.
//
// Two lanes per rank. The compute lane runs the layers in order; a unit's first layer starts
// when its all-gather has ended. The communication lane runs the collectives one at a time, in
// the order FSDP2 issues them: FSDP2 uses one process group, hence one NCCL communicator, for
// its all-gathers and reduce-scatters, and a communicator runs one collective at a time
// (pytorch/pytorch#177015, #177102, #186335). FSDP2 issues:
//   forward:  unit k+1's all-gather when unit k starts computing (implicit prefetch: one
//             all-gather result is kept, released when its unit starts); the first unit's
//             all-gather at the start;
//   backward: in reverse order, unit k-1's all-gather when unit k starts its backward
//             (_backward_prefetch), unless it is still gathered since its forward; unit k's
//             reduce-scatter of its gradients when its backward ends (post_backward).
// A micro-batch's backward ends when its last reduce-scatter has: the next forward's first
// all-gather queues behind it on the same communicator. torchtitan reduce-scatters every
// micro-batch (its gradient-accumulation loop does not turn gradient sync off).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "lowering/fsdp2_gather.hpp"

namespace ppsched {

// One layer of the stage, in forward order: the unit FSDP2 wraps it in and its compute as the
// model prices it (only the proportions are used: a priced F or B is split in these shares).
struct FsdpLayerTime {
  int32_t unit = 0;  // index into the units
  double fwd_ms = 0, bwd_input_ms = 0, bwd_weight_ms = 0;
};

// Which part of a backward a step runs: a whole backward, or the input or weight half of a
// split one (the gathers go with the input half, the reduce-scatters with the weight half).
enum class Fsdp2BackwardPart : uint8_t { Whole, Input, Weight };

struct Fsdp2Pass {
  double compute_ms = 0;     // the layers' compute (the priced step time)
  double span_ms = 0;        // from the pass's first collective or layer to its end
  double collective_ms = 0;  // the communication lane's busy time
  int collectives = 0;
  double exposed_ms() const { return span_ms > compute_ms ? span_ms - compute_ms : 0.0; }
};

// `collective_ms(bytes)`: the time of one all-gather or reduce-scatter moving a unit of so many
// bytes (all of it, not one shard) over the data-parallel group.
using Fsdp2CollectiveMs = std::function<double(int64_t bytes)>;

// One micro-batch's forward whose layers take `fwd_ms` in all.
Fsdp2Pass fsdp2_forward(const std::vector<FsdpUnit>& units, const std::vector<FsdpLayerTime>& layers, double fwd_ms,
                        const Fsdp2CollectiveMs& all_gather_ms);

// One micro-batch's backward (or `part` of it) whose layers take `bwd_ms` in all.
Fsdp2Pass fsdp2_backward(const std::vector<FsdpUnit>& units, const std::vector<FsdpLayerTime>& layers, double bwd_ms,
                         Fsdp2BackwardPart part, const Fsdp2CollectiveMs& all_gather_ms,
                         const Fsdp2CollectiveMs& reduce_scatter_ms);

}  // namespace ppsched
