// The verification passes. Each is independent: it reads the schedule (and the lowered
// communication model), appends located violations, and never prints.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lowering/comm_model.hpp"
#include "lowering/diagnostics.hpp"
#include "lowering/options.hpp"
#include "schedule/schedule.hpp"

namespace ppsched {

struct StreamProgram;

// What every verification pass reads: the schedule, its lowering, and the options (runtime
// mode) it was lowered under.
struct PassInput {
  const Schedule& schedule;
  const CommModel& lowering;
  const CheckOptions& options;
};
// One pass: reads the input, appends located violations, notes and stats to the report (the
// one diagnostics sink); never prints.
struct Pass {
  std::string_view name;
  void (*run)(const PassInput& in, CheckReport& out);
};

// Every (stage, micro) has one FWD and one full backward (BWD, or BWD_INPUT + BWD_WEIGHT),
// each step with a stage runs on the rank that owns it.
void check_coverage(const PassInput& in, CheckReport& out);

// Walks each rank's program applying the cache effects of the step table: consuming a missing
// entry (a compute step's input: `dependency`; anything else: `cache_violation`), producing an
// entry twice, entries left at the end. Also computes the per-rank peak of live bytes and,
// with a budget (in.options), reports `memory`; and counts the steps (out.stats.steps), since it
// visits every slot anyway (a separate count is one more pass over a schedule of millions of steps).
void check_caches(const PassInput& in, CheckReport& out);

// What the lowering itself could not lower (a P2P step without a peer, a bad group): appends
// in.lowering.problems.
void check_lowering_problems(const PassInput& in, CheckReport& out);

// Positional matching on every channel of in.lowering: the k-th send and the k-th receive agree
// (step type, micro, stage, tensors, meta vs payload), counts agree, batches mirror their peer's
// batch. Counts the messages (metas among them) and channels in out.stats.
void check_p2p_matching(const PassInput& in, CheckReport& out);

// Every member of a group reaches the same collectives in the same order. Counts the
// collective calls in out.stats.
void check_collectives(const PassInput& in, CheckReport& out);

// A pipeline x data parallel job (in.options.dp.degree > 1): the FSDP steps as PyTorch's runtime
// runs them -- with dp.fsdp, every stage computes on gathered parameters and each gather is used
// and released; each stage's weight gradients are reduced once, after its last backward.
// A schedule without FSDP steps gets a note in out.notes (and, with fsdp, the sharded-compute
// violations).
void check_data_parallel(const PassInput& in, CheckReport& out);

// Replicated stages (Schedule::pipes > 1): each copy of a stage syncs its weight gradients with
// its other copies exactly once, after its last weight-gradient backward (REPLICA_GRAD_SYNC).
void check_replicas(const PassInput& in, CheckReport& out);

// Replays in.lowering under in.options.comm and sets out.completes; each wait-for cycle (or stuck
// set without a cycle) becomes a violation, except the stuck sets without a cycle that a P2P or
// collective mismatch already in out.violations explains, so it runs after those passes. Each
// deadlock says whether eager sends, or posted operations progressing on their own (Gloo), would
// complete; under eager, a schedule that completes only thanks to buffering gets a note.
void check_deadlock(const PassInput& in, CheckReport& out);

// Outcome of replaying the lowered programs.
struct ReplayResult {
  bool completed = false;
  std::vector<Violation> deadlocks;  // one per wait-for cycle (or stuck set without a cycle)
  std::vector<int> stuck_rank_action;  // per rank: action index where it stopped (-1 done)
};
ReplayResult replay(const Schedule& s, const CommModel& m, CommMode mode);

// The same verdict as replay().completed, decided without a replay: a topological sort of
// the happens-before graph of the lowered programs (checkers/static_deadlock.cpp).
bool static_deadlock_free(const CommModel& m, CommMode mode);

// The batch transport (schedule/comm_insertion.hpp coalesce_p2p) applied to a schedule, kept
// only where both ends of every group still mirror each other: throws InputError naming the
// first violation otherwise. `ppsched generate --batch` and the fuzzing cases share it.
Schedule coalesce_verified(const Schedule& s, const std::string& family);
// The posting hyper-parallel's boundary transport relies on: every transfer a batch posted and
// waited later (a receive by its consumer, a send at the end of the run: overlap_p2p), each
// progressing on its own (P2PBackend::Gloo; hyper-parallel gives every rank pair a communicator
// of its own, which orders only that pair's transfers; ppsched does not model that, and on one
// NCCL stream per rank, PyTorch's pipeline-group communicator, the hoisted receives deadlock).
CheckOptions boundary_posting();
// hyper-parallel's boundary transport (comm_insertion.hpp attach_boundary_p2p) applied to a
// schedule with OVERLAP_B_F steps, checked like coalesce_verified under boundary_posting():
// throws InputError when the schedule has none (nothing to attach: the flag does not apply) or
// the result does not verify.
Schedule boundary_verified(const Schedule& s, const std::string& family);

// What a deadlock verdict over `m` (lowered under `o`) assumes, in a schedule author's words:
// how sends complete, where operations are waited, and, for a program that posts without
// waiting, what carries the posted operations (NCCL's stream order or Gloo's independence).
std::string p2p_semantics(const CheckOptions& o, const CommModel& m);

// verify()'s passes, in reporting order: coverage, caches, lowering problems, P2P matching,
// collectives, data parallelism, replicated stages, deadlock (the replay; it skips stuck sets the static passes explain).
const std::vector<Pass>& verification_passes();

// The multi-stream checker (checkers/stream_order.cpp): on every rank the calls of each
// communicator (and the sends and receives of each rank pair) totally ordered by happens-before,
// the same calls in the same order on every member, and no rendezvous cycle, over every
// interleaving the program's streams and events allow. Violations carry StreamOpRefs.
CheckReport verify_streams(const StreamProgram& p);

// Runs every pass. The schedule must be structurally valid (readers and generators ensure it).
CheckReport verify(const Schedule& s, const CheckOptions& options = {});
// The same, over a communication model already built with the same options (the simulator
// shares one lowering with the checks).
CheckReport verify(const Schedule& s, const CheckOptions& options, const CommModel& model);

}  // namespace ppsched
