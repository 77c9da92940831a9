// A reference derivation of every rank's communication, written from its own P2P and
// collective rows (peer rule, partner, meta, members: own_p2p_rows() and own_collective_rows()
// below, held against the step table by a test) and the runtime semantics alone (README
// "Verification model",
// hyper_parallel.md §3.2-3.3), without the lowering (checkers/comm_model.cpp). The fuzzing
// properties hold the lowering against it in every runtime mode, and hold the replay's
// deadlock verdict and the matcher's verdict against its own run and matching: an error in
// the lowering would otherwise be invisible to every pass that starts from it.
#pragma once

#include <string>
#include <vector>

#include "lowering/comm_model.hpp"
#include "lowering/options.hpp"
#include "schedule/schedule.hpp"

namespace ppsched::oracle {

// One message as the rank that posts it sees it.
struct Transfer {
  bool send = false;
  int peer = -1;
  bool meta = false;  // a shape/dtype meta, else a payload
  int step = -1;      // the step it belongs to in this rank's program
  int sub = -1;       // sub-step of a batch, -1 otherwise
  int tensor = 0;
  bool operator==(const Transfer& o) const {
    return send == o.send && peer == o.peer && meta == o.meta && step == o.step && sub == o.sub && tensor == o.tensor;
  }
  bool operator<(const Transfer& o) const;
};

enum class CommOpKind : uint8_t {
  Block,       // post the transfers and wait until every one matched (a blocking call, or one group)
  Post,        // post, do not wait (irecv cached for its consumer, isend drained at the end)
  Wait,        // wait transfers posted before
  Collective,  // a barrier of `members`
};

struct CommOp {
  CommOpKind kind = CommOpKind::Block;
  std::vector<Transfer> transfers;
  std::vector<int> members;  // Collective: sorted ranks
  Op op = Op::FWD;           // Collective: its step type
  int step = -1;             // Collective: its step index
  int batch = -1;            // Block/Post of a BATCH_SEND_RECV's payloads: its step index
  int subject = -1;          // Collective: a REPLICA_GRAD_SYNC's model stage, else -1
};

struct RankComm {
  std::vector<std::vector<CommOp>> ranks;
  std::vector<std::string> problems;  // "rank r step i[.sub]": a P2P leaf without a usable peer, a bad group
  // NCCL (CheckOptions::backend): a rank's Block and Post ops reach the wire in program order,
  // each once every transfer of the one before it is done (one communicator stream a rank).
  // The reference applies it to every program; the lowering keeps it only for programs that
  // post without waiting, where it can matter.
  bool stream_ordered = false;
};

// What the runtime does, per rank, for the schedule under these options.
RankComm reference_comm(const Schedule& s, const CheckOptions& o);
// The lowering's actions projected onto the same form (local steps left out).
RankComm lowered_comm(const Schedule& s, const CommModel& m);
// "" when equal, else the first difference, named by rank and position.
std::string first_difference(const Schedule& s, const RankComm& reference, const RankComm& lowered);

// "" when every message of the lowering takes its channel position in the order its rank
// posts it (FIFO positions are what the replay and the matcher read; the actions are what
// the runtime does: the two must agree), else the first message posted out of order.
std::string posting_order(const Schedule& s, const CommModel& m);

// Runs the reference communication: true when every rank reaches its end.
bool completes(const Schedule& s, const RankComm& c, CommMode mode);
// Positional matching on every ordered rank pair (meta against meta, partner step type,
// micro, stage, tensors), counts, and batch shapes mirrored. "" or the first disagreement.
std::string matching(const Schedule& s, const RankComm& c);

std::string describe(const CommOp& op);

// The oracle's own rows for the P2P step types, written from the runtime's semantics
// (hyper_parallel.md §1-§3: who sends to whom, which step answers, whether a shape/dtype meta
// goes first), not read from schedule/step_types.cpp: the oracle derives peers, partners and metas
// from these, so a wrong row of the step table shows as a difference between the lowering and
// the oracle, and tests/test_comm_oracle.cpp holds the two tables against each other.
struct P2PRow {
  Op op;
  bool send;
  PeerRule peer;
  Op partner;
  int stage_delta;  // the partner's stage = stage + stage_delta (body steps)
  Meta meta;
};
const std::vector<P2PRow>& own_p2p_rows();
const P2PRow* own_row(Op op);  // nullptr: not a P2P step type
// The same for the collective step types: who takes part.
struct CollectiveRow {
  Op op;
  CollectiveScope scope;
};
const std::vector<CollectiveRow>& own_collective_rows();
const CollectiveRow* own_collective_row(Op op);  // nullptr: not a collective step type

}  // namespace ppsched::oracle
