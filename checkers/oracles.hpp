// Small reference oracles, written independently of the verification passes, so that a
// checker bug cannot hide a generator bug (and the other way round). Tests and the fuzzing
// properties (`ppsched fuzz`) judge the passes against them.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "schedule/schedule.hpp"

namespace ppsched {
struct StreamProgram;
}

namespace ppsched::oracle {

// Multi-stream programs (lowering/stream_program.hpp), by brute force over each rank's states
// (at most 20 operations a rank): the (rank, domain) pairs whose calls a rank can complete in
// two different orders, as "rank R: communicator C" / "rank R: sends to Q" / "rank R: receives
// from Q" lines, sorted; empty when none. Throws std::invalid_argument past 20 ops a rank.
std::vector<std::string> stream_races(const StreamProgram& p);

// Runs the program once, choosing among the enabled actions at random (`seed`): an operation
// starts once its stream's previous one completed and each of its waits has a completed record
// listed before it (or none at all); compute completes at once; the k-th call a rank starts on a
// communicator joins the k-th calls of the other members, the k-th send on a rank pair the k-th
// receive, and they complete together. Whether every operation completed.
bool stream_run_completes(const StreamProgram& p, unsigned seed);

// Every (stage, micro) has exactly one FWD and one full backward (BWD, or BWD_INPUT +
// BWD_WEIGHT), each on the rank that owns the stage. Returns "" or the first problem.
std::string check_compute_coverage(const Schedule& s);

// On every rank, every send comes after its producer (FWD for FWD_SEND, the backward for
// BWD_SEND) and every receive before its consumer. Returns "" or the first problem.
std::string check_send_recv_placement(const Schedule& s);

// Replays the programs under blocking rendezvous: a send and a receive complete together
// when both are at the heads of their ranks and match (op partner, micro, partner stage);
// collectives need the whole group at their heads; a BATCH_SEND_RECV completes when all its
// sub-steps can be matched against the heads (or batches) of the peers. Returns "" when every
// rank reaches its end, else a description of the stuck heads.
std::string rendezvous_replay(const Schedule& s);

// The compact per-rank label list (idle slots as ".").
std::vector<std::string> labels(const Program& p, bool keep_idle = true);
std::string joined(const Program& p, bool keep_idle = true);

}  // namespace ppsched::oracle
