// PyTorch's lowering of a compute-only schedule to its compute_comms form: what
// `_PipelineScheduleRuntime` builds (and `_dump_csv(format="compute_comms")` writes) from a
// per-rank compute order. Reference: torch/distributed/pipelining/schedules.py at
// pytorch/pytorch 00722e648b74, `_prepare_schedule_with_comms(format="compute_only")`, which
// every _PipelineScheduleRuntime class (Interleaved1F1B, LoopedBFS, InterleavedZeroBubble,
// ZBVZeroBubble, DualPipeV) runs on its pipeline_order, and `_load_csv(format="compute_only")`.
#pragma once

#include "schedule/schedule.hpp"

namespace ppsched {

// How many stages `_add_unshard_reshard` keeps unsharded ahead (its max_active_stages default).
inline constexpr int kTorchMaxActiveStages = 3;

// Returns the schedule PyTorch's lowering makes of `s`'s per-rank compute order (its FWD, BWD,
// BWD_INPUT, BWD_WEIGHT and OVERLAP_F_B steps, in program order). Idle slots, P2P steps (batched
// or not) and FSDP steps of `s` are dropped: PyTorch re-derives them. The passes, restated
// (facts, not code):
//
//  1. `_add_unshard_reshard`, per rank: before each compute action, the next
//     kTorchMaxActiveStages distinct stages the rank computes from there on (an OVERLAP_F_B
//     counts all its sub-actions' stages at once, so it may make one more) are the ones to keep
//     gathered: FSDP_RESHARD every active stage not among them, then FSDP_UNSHARD each of them
//     not active yet, in the order they come; after the last action FSDP_RESHARD every stage
//     still active.
//  2. `_add_reduce_grad`, per rank: right after the action holding a stage's M-th BWD or
//     BWD_WEIGHT (sub-actions counted), FSDP_REDUCE_GRAD for that stage.
//  3. `_add_send_recv`, over all ranks: a sweep visits the ranks in ascending order and
//     schedules at most one action of each: its next action, once ready (a FWD needs its
//     FWD_RECV, or the previous stage's FWD on the same rank, before it; a BWD or BWD_INPUT the
//     BWD_RECV, or the next stage's BWD/BWD_INPUT on the same rank; every other action is ready);
//     the action goes to the rank's list, then for each (sub-)action that hands over to another
//     rank its FWD_SEND / BWD_SEND right after it on this rank and the partner FWD_RECV /
//     BWD_RECV at the end of the receiving rank's list at once. Sweeps repeat until every list
//     is done; a sweep without progress is PyTorch's "Malformed compute schedule, can't
//     schedule sends/recvs" (an InputError here).
//
// Two stages evicted at the same action are resharded in ascending stage order (PyTorch
// iterates a Python set of ints there; with at most kTorchMaxActiveStages stages per rank, as in
// every PyTorch class at V <= 3, no two stages are ever evicted at once, so the order is PyTorch's).
// The result has no idle slots (PyTorch's compute_comms loader refuses a blank cell), the same
// ranks, stages, placement and micro-batches, and passes validate_structure.
//
// Throws InputError (located at rank and step) for a step PyTorch's compute-only format cannot
// hold: OVERLAP_B_F, the MPipe layer, data, swap and ALL_REDUCE steps.
Schedule lower_like_pytorch(const Schedule& s);

}  // namespace ppsched
