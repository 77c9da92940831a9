// What the checkers report: structured violations (never printed here; the CLI renders them).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "schedule/schedule.hpp"

namespace ppsched {

enum class ViolationKind : uint8_t {
  Deadlock,            // the rendezvous replay reaches a state where no rank can progress
  P2PMismatch,         // k-th send and k-th receive of a channel disagree, or are unmatched
  CacheViolation,      // consume of a missing entry, double produce, non-empty at the end
  Dependency,          // a compute step before its input can exist; coverage; ownership
  CollectiveMismatch,  // members reach different collectives, or one never reaches it
  Memory,              // peak live bytes over the per-rank budget
  // Two collectives of one communicator (or two sends on one rank pair) that a rank may issue
  // in either order (its streams and events leave them unordered), or that ranks issue in
  // conflicting orders (checkers/stream_order.cpp)
  CollectiveOrderRace,
};
std::string_view to_string(ViolationKind k);

struct StepRef {
  int rank = -1;
  int index = -1;   // index in the rank's program
  int sub = -1;     // sub-step of a composite, -1 for the step itself
  Step step;        // the step (the sub-step when sub >= 0)
};

// Why the ranks of a deadlock are stuck: what a caller decides on (never its message).
enum class DeadlockCause : uint8_t {
  None,              // not a deadlock
  WaitForCycle,      // `ranks` wait on each other in a cycle, in wait-for order
  WaitsOnFinished,   // `ranks` wait on ranks that finished: the consequence of an unmatched
                     // message or collective (the static passes locate it)
};
std::string_view to_string(DeadlockCause c);

// An operation of a multi-stream program (lowering/stream_program.hpp): its rank, its index in
// the rank's list, its name and stream.
struct StreamOpRef {
  int rank = -1;
  int op = -1;
  std::string name, stream;
};

struct Violation {
  ViolationKind kind;
  std::vector<int> ranks;
  std::vector<StepRef> steps;
  std::vector<StreamOpRef> ops;  // a multi-stream program's operations involved (stream_order)
  std::string interleaving;      // a run that hangs, in words (collective_order_race, stream deadlocks)
  std::string message;  // one paragraph a schedule author understands
  DeadlockCause cause = DeadlockCause::None;  // Deadlock only
  bool completes_with_eager = false;          // Deadlock only: buffered sends would let it complete
};

struct CheckStats {
  size_t steps = 0;          // non-idle steps (composites count once)
  size_t messages = 0;       // P2P messages matched (payloads and metas)
  size_t meta_messages = 0;  // of which shape/dtype metas
  size_t collectives = 0;    // collective calls checked (per group instance)
  size_t channels = 0;       // ordered rank pairs that carry messages
  // Per rank: the peak of everything it holds (resident weights, gradients and optimizer state,
  // live activations and buffers, a backward's recomputation workspace), and the step where it
  // occurs (-1: none); the resident part alone.
  std::vector<int64_t> peak_memory_bytes;
  std::vector<int> peak_memory_index;
  std::vector<int64_t> resident_bytes;
};

struct CheckReport {
  std::vector<Violation> violations;
  bool completes = true;  // the replay of the lowering reaches every rank's end (deadlock pass)
  std::vector<std::string> notes;  // facts that are not violations ("relies on buffering" under eager)
  // What the deadlock verdict assumes of the runtime: how sends complete and what carries the
  // operations a rank posts without waiting (checkers/verify.cpp p2p_semantics).
  std::string semantics;
  CheckStats stats;
  bool ok() const { return violations.empty(); }
};

StepRef step_ref(const Schedule& s, int rank, int index, int sub = -1);

}  // namespace ppsched
