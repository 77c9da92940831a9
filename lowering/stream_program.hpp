// A multi-stream program (issue 39): every rank's operations, each on one of the rank's streams,
// ordered across streams only by events, and the communicators its collectives run on. It is
// what a rank runs once MoE phases put the expert all-to-alls on a second stream: the checker
// (checkers/stream_order.cpp) proves it safe over every interleaving its streams and events
// allow. Two sources build one: the lowering of a schedule whose stages hold MoE layers
// (lower_streams below), and a `ppsched-streams` JSON file (lowering/stream_program_json.cpp),
// in which a runtime's own stream and event logic is written down (the hang cases of
// tests/data/streams/ are written from their issues that way).
//
// Semantics (docs/streams.md):
//  - A rank lists its operations in the order its host issues them. A stream runs its
//    operations in that order, each after the one before it on the stream has completed.
//  - An operation may wait on events and record events. A wait on event E binds to the latest
//    record of E the rank listed before it (CUDA's cudaStreamWaitEvent, `event_binding` latest,
//    the default); a wait on an event never recorded before it does not wait. A runtime whose
//    launch order varies (a run loop that launches whichever node's event fired, a thread per
//    stream) cannot rely on which record is the latest: with `event_binding` any, a wait is
//    satisfied by any record of E listed before it, and the checker orders a wait after a record
//    only when every record that may satisfy it is.
//  - A collective rendezvous: it completes once every member of its communicator has started
//    its matching call (the k-th call on the communicator, by happens-before, on each member).
//    A send and a receive are a rendezvous of two (NCCL's blocking P2P), matched in FIFO order
//    per ordered rank pair.
//  - Compute completes on its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lowering/moe_phases.hpp"
#include "schedule/schedule.hpp"

namespace ppsched {

enum class StreamOpKind : uint8_t { Compute, Collective, Send, Recv };
std::string_view to_string(StreamOpKind k);

struct StreamOp {
  std::string name;        // what it is; a collective's or a P2P's name must match its partners'
  int32_t stream = 0;      // index in its rank's streams
  StreamOpKind kind = StreamOpKind::Compute;
  int32_t comm = -1;       // Collective: its communicator (index in StreamProgram::comms)
  int32_t peer = -1;       // Send: destination rank; Recv: source rank
  std::vector<int32_t> waits;    // events (index in its rank's events) it waits on before starting
  std::vector<int32_t> records;  // events it records once it completes
  // Where it comes from in a schedule (lower_streams): the step and sub-step, -1 otherwise.
  int32_t step = -1, sub = -1;
};

struct StreamRank {
  std::vector<std::string> streams;
  std::vector<std::string> events;
  std::vector<StreamOp> ops;  // in host issue order
};

struct Communicator {
  std::string name;
  std::vector<int32_t> ranks;  // sorted
};

struct StreamProgram {
  std::vector<Communicator> comms;
  std::vector<StreamRank> ranks;
  bool any_record = false;  // event_binding any (above); false: latest
  // "rank 2 op 7 (dispatch_fwd L1 F3, stream comm)"
  std::string describe(int rank, int op) const;
};

// What lower_streams builds per rank from a schedule.
struct StreamLowering {
  int ep = 1;                    // expert-parallel size: each pipeline rank has ep replicas
  std::vector<MoeStage> stages;  // per model stage: its MoE layers (CostModel::moe)
  // Megatron-Core's --delay-wgrad-compute (MoeCosts::delay_wgrad): each backward layer's weight
  // gradients on the compute stream right after its input gradients, beside the chain (nothing
  // waits for them); the backward's last layer's after every other operation of the step.
  bool delay_wgrad = false;
};

// The multi-stream program of `s` on stages with MoE layers: each pipeline rank r becomes `ep`
// ranks (r + k * s.ranks, k < ep: its expert-parallel replicas), each with a compute and a comm
// stream, and communicator "EP(r)" over them. A compute step's phases (expand_phases) run on
// their streams, each waiting on the phase before it in its chain through an event of its own;
// an OVERLAP_F_B / OVERLAP_B_F interleaves its two chains as Megatron-Core's combined 1F1B
// does (comm: combine_bwd, dispatch_fwd, dispatch_bwd, combine_fwd; compute: attention
// forward, expert backward and its weight gradient, expert forward, attention backward); a step
// without MoE phases is one compute operation. Every step starts after the step before it on
// its rank has ended on both streams (a join). P2P and collective steps are not lowered: the
// schedule's own checks prove them (checkers/verify.cpp); what this program adds is the order of
// the expert all-to-alls the streams issue. Throws InputError when ep < 1 or stages are short.
StreamProgram lower_streams(const Schedule& s, const StreamLowering& l);

// Mutations for the fuzzer: a program that differs in one place.
// Drops the k-th wait of rank r's op i (no-op when it has none).
void drop_wait(StreamProgram& p, int rank, int op, int k);
// Moves rank r's op i to stream `stream` (a new stream named `name` when stream == -1).
void move_to_stream(StreamProgram& p, int rank, int op, int stream, const std::string& name = "moved");

}  // namespace ppsched
