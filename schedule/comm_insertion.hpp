// Passes that add communication to a compute-only order.
//
// insert_p2p is the one P2P insertion pass (families and CSV imports use it). It follows
// hyper-parallel's column scan (reference hyper_parallel.md §2.0): a program's slot index is
// logical time; an OVERLAP composite occupies two columns, one per sub-step. For each column
// t, every rank's item at t is emitted, then, even ranks first and odd ranks after, every
// compute step at t that feeds a stage on another rank appends its send to its own program
// and the matching receive to the receiver's. So each receive lands at the column where its
// producer ran, and each send right after its producer.
//
// Why it cannot deadlock: the pass itself writes one global order (column by column, each
// send immediately followed by its receive) of which every rank's program is a subsequence,
// so replaying that order under blocking rendezvous always finds both ends of the next
// message at their heads. It only needs every consumer to sit in a later column than its
// producer; Alignment::Auto computes such columns, Alignment::AsGiven checks them.
#pragma once

#include "schedule/schedule.hpp"

namespace ppsched {

enum class Alignment {
  AsGiven,  // slots (idle ones included) are time columns, as the generator laid them out
  Auto,     // ignore idle slots; place every step at the earliest column its inputs allow
};

// `compute_only` may contain compute steps, composites of compute steps, local steps and
// collectives, and idle slots; no P2P steps. Returns the schedule with FWD/BWD sends and
// receives added (none between adjacent stages on the same rank). In Auto mode the result
// keeps the computed columns as idle slots, so `ppsched show` draws a time grid, as long as
// that padding stays within 2^23 slots; a larger layout (a compute-only pipeline of thousands
// of ranks pads to ~1.5 ranks^2) is emitted in the same order without idle slots, so memory
// stays in proportion to the steps.
// Throws InputError when the order cannot run (a consumer not after its producer, a
// dependency cycle, a step on a rank that does not own its stage).
Schedule insert_p2p(const Schedule& compute_only, Alignment alignment);
// The same, moving the steps out of a schedule the caller gives up (a generator's
// compute-only order): a million-step schedule is not copied step by step.
Schedule insert_p2p(Schedule&& compute_only, Alignment alignment);

// TEST-ONLY: a planted insertion bug: every receive insert_p2p adds names its producer's stage
// instead of the consumer's (the partner_stage_delta left out), so that a test can show that
// the checks and the independent oracles (checkers/oracles.hpp) catch a wrong insertion in
// what the generators write. Set only by tests (tests/test_comm_oracle.cpp), never by the tools.
inline bool testing_planted_insertion_bug = false;
// The one rule for a hand-written schedule file, JSON or CSV alike: a schedule with no P2P step
// at all (no send, receive or batch, top level or inside a composite) whose stages hand over
// from one rank to another gets its sends and receives from insert_p2p (Auto), the column
// scan; a schedule with any P2P step is taken as written (a missing send is the checkers' to
// report). Schedules of replicated stages (pipes > 1) and MPipe schedules carry their own
// communication and are taken as written. Returns the number of P2P steps inserted (0: `s`
// unchanged). Throws InputError as insert_p2p does.
int64_t insert_p2p_if_compute_only(Schedule& s);
// Whether a step, or any of its sub-steps, is a P2P step or a batch of them.
bool has_p2p_step(const Step& st);

// The compute-only projection: drops P2P steps (and BATCH_SEND_RECV) and idle slots.
Schedule strip_p2p(const Schedule& s);

// Transport rewrite (reference §2.4, hyper-parallel's coalesce_p2p): each maximal run of >= 2
// consecutive body P2P steps (FWD/BWD sends and receives: hyper-parallel's _P2P_STEP_TYPES)
// becomes one BATCH_SEND_RECV with the run as its sub-steps, in order. Data steps and MPipe
// transfers are never batched (hyper-parallel sends them alone), and they end a run.
Schedule coalesce_p2p(const Schedule& s);

// Transport rewrite: hyper-parallel's "boundary" P2P transport (attach_fwd_boundary_p2p,
// reference §2.4). After each OVERLAP_B_F, the run of P2P steps that follows it is split by
// what is ready when the overlap's forward ends: the overlap's own forward's FWD_SEND first,
// then every FWD_RECV / BWD_RECV of the run in order (hyper-parallel issues these at the
// boundary inside the overlap); the rest of the run (the backward's BWD_SEND, any other send)
// after them, in order. A run is body P2P steps only, as coalesce_p2p's: a data step ends it
// (with hyper-parallel's --data-steps a DATA_SEND stands before each FWD_SEND, so only the
// receives move). Every body P2P step of the schedule is then issued as a batch of its own (a BATCH_SEND_RECV of one transfer, as hyper-parallel's runtime issues each
// under this transport), so every rank pair's batches stay one transfer against one.
// `coalesce` (the naive variant hyper-parallel found to hang, for the checks to show where):
// the boundary group and the rest each become one batch instead (coalesce_p2p's rule: a group of
// one stays a single step). The per-direction FIFO order of the transfers is unchanged; the
// order of sends against receives is not.
Schedule attach_boundary_p2p(const Schedule& s, bool coalesce = false);
// Whether `s` has an OVERLAP_B_F step (where the boundary transport moves anything).
bool has_overlap_b_f(const Schedule& s);

}  // namespace ppsched
