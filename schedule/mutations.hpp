// Schedule-authoring mistakes as deterministic mutations. A mutation is parameters (class,
// rank, position, argument); applying it picks its target by those numbers modulo the valid
// choices, so fuzzers generate and shrink parameters and every case stays reproducible.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "schedule/schedule.hpp"

namespace ppsched {

enum class MutationKind : uint8_t {
  SwapAdjacent,           // swap two adjacent steps on one rank
  RecvAfterConsumer,      // move a receive right after the compute step that consumes it
  RecvBeforeSend,         // hoist a receive above the send just before it (the "recv-first" gap)
  DropStep,               // drop one step
  DuplicateStep,          // duplicate one step
  ReverseTransferBlock,   // reverse a run of >= 2 transfers to one peer, on one side only
  SplitBatch,             // split a BATCH_SEND_RECV into plain steps, on one side only
  RemoveCollective,       // remove a collective from one rank
  ChangeMicro,            // change the micro index of one step
  ChangePayloadShape,     // annotate every transfer with a shape, then change it on one side
};
inline constexpr int kMutationKinds = 10;
std::string_view to_string(MutationKind k);

struct Mutation {
  MutationKind kind = MutationKind::SwapAdjacent;
  int rank = 0;
  int position = 0;
  int arg = 0;
};

struct MutationOutcome {
  bool applied = false;      // false: no valid target, or the edit left the schedule as it was
  std::string description;   // "rank 1: moved FR3s1 after F3s1"
  int rank = -1;             // the rank edited
  // The steps the edit moved, dropped, duplicated, split or changed, as they were before it,
  // in program order (a swap: both; a changed micro: the step before the change).
  std::vector<Step> touched;
};

MutationOutcome apply_mutation(Schedule& s, const Mutation& m);

}  // namespace ppsched
