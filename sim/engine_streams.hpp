// A rank's two streams inside one compute step on stages with MoE layers (issue 38): the
// compute stream runs the attention and expert phases, the communication stream the dispatch
// and combine all-to-alls, each chain of phases (one step's, or the two sub-steps' of an
// OVERLAP_F_B / OVERLAP_B_F) in its own order. Private to sim/ (the engine, sim/engine.cpp).
//
// The rules:
//  - a phase starts when the one before it in its chain has ended and its stream is free;
//  - of the phases that can start, the one that can start first does (a list schedule); at a
//    tie an all-to-all first (it is posted as soon as its input is ready, then computes run
//    beside it), then the chain listed first;
//  - a compute phase running beside an all-to-all runs at (1 - contention) of its speed: it
//    lasts contention x (the time the two overlap) longer (SM sharing; MoeCosts::contention);
//    the slowdown of a compute phase already placed when an all-to-all is placed beside it is
//    added to the compute stream's end (an approximation: it is not redistributed);
//  - one chain alone has nothing to run beside its all-to-alls: every one of them is exposed,
//    and its step lasts its compute plus its all-to-alls;
//  - a phase beside its chain (PhaseItem::beside: a delayed weight gradient, --delay-wgrad-compute)
//    starts once the chain phase listed before it has ended and the compute stream is free, and
//    nothing waits for it; at a tie it goes before a chain's compute phase (it is listed first).
//    A chain's last phase when it is beside (the backward's last layer's weight gradients) runs
//    after every chain phase of the step, as Megatron runs it after the step's P2P hook.
// What a step reports: its span (the step's duration), the compute stream's busy time with the
// slowdown, the all-to-alls' time on the communication stream, and the part of it the step
// waited for (its span minus its compute stream's busy time: the exposed all-to-all).
#pragma once

#include <cstdint>
#include <vector>

#include "lowering/moe_phases.hpp"

namespace ppsched::des {

// A phase with its duration.
struct TimedPhase {
  PhaseItem item;
  double ms = 0;
};

// One all-to-all placed on the communication stream, from the step's start.
struct CommSpan {
  double start_ms = 0, end_ms = 0;
  int chain = 0;  // which sub-step (0 for a plain step)
  PhaseItem item;
};

struct StreamTimeline {
  double span_ms = 0;         // the step, from its start to its last phase's end
  double compute_ms = 0;      // the compute stream's busy time, slowdown included
  double slowdown_ms = 0;     // of it, what all-to-alls beside compute added
  double a2a_ms = 0;          // the communication stream's busy time
  double a2a_exposed_ms = 0;  // what of it the step waited for
  int phases = 0;             // the phases run (the step's expansion)
  std::vector<CommSpan> comm;
};

// Runs `chains` (one or two chains of phases) on the two streams.
StreamTimeline run_streams(const std::vector<std::vector<TimedPhase>>& chains, double contention);

}  // namespace ppsched::des
