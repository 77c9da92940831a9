// Small reference oracles, written independently of the verification passes, so that a
// checker bug cannot hide a generator bug (and the other way round). Tests and the fuzzing
// properties (`ppsched fuzz`) judge the passes against them.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "schedule/schedule.hpp"

namespace ppsched::oracle {

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
