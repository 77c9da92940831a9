// mpipe-transpose: the interleaved 1F1B body with hyper-parallel's MPipe Transpose layer
// (reference hyper_parallel.md §2.5).
//
// MPipe spreads the "tower" (the first T layers, replicated on every rank) over NT = min(P, M)
// owner ranks: each owner loads and runs the tower on the micros it owns and ships the raw
// inputs (DS), the tower features (MFS) and, for the stage-0 recompute of a trainable tower,
// the tower inputs (GS) to rank 0, which runs stage 0. Construction (§2.5):
//   1. build the interleaved body (less_memory honoured, overlap_b_f forced off, so the
//      transport is plain, §2.0) with hyper-parallel's body data steps (DATA_SEND before
//      FWD_SEND, DATA_RECV before FWD_RECV; --no-data-steps leaves them out) and strip every
//      idle slot and body DATA_LOAD;
//   2. patch rank 0's body (inline DL/TF for "min" overflow micros, TB after each stage-0 B);
//   3. prepend each rank's prefix; with owner_backward append the grad ship-back suffix and
//      the final GREDUCE.
// All MPipe steps, and the data steps of the prefix, have no stage (kNone): they talk
// owner <-> rank 0 (peer rules OwnerToRank0 / Rank0ToOwner / DataChain without a stage).
#include <string>
#include <vector>

#include "schedule/generators/generator.hpp"
#include "schedule/generators/interleaved_1f1b.hpp"

namespace ppsched {
namespace {

constexpr const char* kFamily = "mpipe-transpose";

Step mp(Op op, int micro = kNone) { return make_step(op, micro, kNone); }

// The prefix of `rank` (§2.5 "Prefix(rank)").
Program prefix(const Schedule& s, int rank) {
  const MPipeConfig& cfg = *s.mpipe;
  const bool tower = cfg.tower != Tower::None;
  const bool trainable = cfg.tower == Tower::Trainable;
  const int M = s.micro_batches;
  const int NT = s.mpipe_owner_count();
  Program p;
  // Every rank takes part in the broadcast of the trainable tower parameters from rank 0.
  if (trainable) p.push_back(mp(Op::MPIPE_PARAM_BROADCAST));
  // The micros this rank loads up front: "full" owns its round-robin set; "min" only {rank}
  // (rank 0's overflow micros m >= NT are loaded inline in the body, see patch_rank0).
  std::vector<int> owned;
  for (int m = 0; m < M; ++m) {
    if (s.owner_of(m) != rank) continue;
    if (cfg.overflow == Overflow::Min && m >= NT) continue;
    owned.push_back(m);
  }
  for (int m : owned) {
    p.push_back(mp(Op::DATA_LOAD, m));
    if (tower) p.push_back(mp(Op::MPIPE_TRANSPOSE_FWD, m));
  }
  // The type-major transfer block: all DS, then all MFS, then all GS, on both sides. A
  // micro-major order on one side drifts the per-pair FIFO against the other (§3.4, §3.5
  // item 5). Rank 0 receives every micro it does not own, ascending; in "min" those are
  // exactly 1..NT-1.
  std::vector<int> micros;
  if (rank == 0) {
    for (int m = 0; m < M; ++m)
      if (s.owner_of(m) != 0) micros.push_back(m);
  } else {
    micros = owned;
  }
  const bool ship_graph = trainable && !cfg.owner_backward;
  auto block = [&](Op send, Op recv) {
    for (int m : micros) p.push_back(mp(rank == 0 ? recv : send, m));
  };
  block(Op::DATA_SEND, Op::DATA_RECV);
  if (tower) block(Op::MPIPE_FWD_SEND, Op::MPIPE_FWD_RECV);
  if (ship_graph) block(Op::MPIPE_GRAPH_SEND, Op::MPIPE_GRAPH_RECV);
  return p;
}

// §2.5 "Rank-0 body patch": in "min", each overflow micro m >= NT is loaded (and its tower
// run) right before its stage-0 forward; with a trainable tower in stage-0-backward mode,
// rank 0 recomputes the tower and backprops the feature gradients (TB) right after every
// stage-0 backward (the features are always detached in the round-robin design).
Program patch_rank0(const Schedule& s, const Program& body) {
  const MPipeConfig& cfg = *s.mpipe;
  const int NT = s.mpipe_owner_count();
  const bool tower = cfg.tower != Tower::None;
  const bool tb = cfg.tower == Tower::Trainable && !cfg.owner_backward;
  Program out;
  out.reserve(body.size() + 3 * static_cast<size_t>(s.micro_batches));
  for (const Slot& slot : body) {
    const Step& st = *slot;
    if (cfg.overflow == Overflow::Min && st.op == Op::FWD && st.stage == 0 && st.micro >= NT) {
      out.push_back(mp(Op::DATA_LOAD, st.micro));
      if (tower) out.push_back(mp(Op::MPIPE_TRANSPOSE_FWD, st.micro));
    }
    out.push_back(slot);
    if (tb && st.op == Op::BWD && st.stage == 0) out.push_back(mp(Op::MPIPE_TRANSPOSE_BWD, st.micro));
  }
  return out;
}

// §2.5 "Owner-backward suffix": only after the whole body (inline ship-back deadlocks against
// the body P2P, §3.5 item 6), ascending micro order on both sides of each pair (§3.5 item 7),
// then the all-reduce of the tower gradients on every rank, last.
void append_owner_backward_suffix(const Schedule& s, int rank, Program& p) {
  for (int m = 0; m < s.micro_batches; ++m) {
    const int owner = s.owner_of(m);
    if (owner == 0) continue;
    if (rank == 0) p.push_back(mp(Op::MPIPE_GRAD_SEND, m));
    else if (owner == rank) p.push_back(mp(Op::MPIPE_GRAD_RECV_WITH_BACKWARD, m));
  }
  p.push_back(mp(Op::MPIPE_GRAD_REDUCE));
}

}  // namespace

Schedule generate_mpipe_transpose(const GenerateOptions& o) {
  // MPipe forces overlap_b_f off (§2.0 step 1), so the dx/dw split, which only splits
  // overlap pairs, is rejected the way hyper-parallel rejects it without overlap_b_f (§3.5
  // item 19).
  if (o.dxdw_split)
    refuse(kFamily, "--dxdw-split needs --overlap-b-f, which MPipe Transpose forces off");
  if (o.owner_backward && o.tower != Tower::Trainable)
    refuse(kFamily, "--owner-backward needs a trainable tower (got --tower " +
                        std::string(to_string(o.tower)) + "): there is no tower gradient to ship back");

  interleaved::BodyOptions body_options;
  body_options.less_memory = o.less_memory;
  body_options.overlap_b_f = false;
  // hyper-parallel's body carries its data steps: DATA_SEND/DATA_RECV beside every cross-rank
  // forward (its add_send_recv); the body's DATA_LOADs go, the prefix loads instead.
  body_options.data_steps = o.data_steps.value_or(true);
  Schedule s = interleaved::body(o.pp, o.vpp, o.micro, body_options);
  s.name = kFamily;
  MPipeConfig cfg;
  cfg.overflow = o.overflow;
  cfg.tower = o.tower;
  cfg.owner_backward = o.owner_backward;
  s.mpipe = cfg;

  for (int r = 0; r < s.ranks; ++r) {
    Program& prog = s.programs[static_cast<size_t>(r)];
    // Strip all bubbles and any body DATA_LOAD: the MPipe program is a plain list.
    Program body;
    body.reserve(prog.size());
    for (Slot& slot : prog)
      if (slot && slot->op != Op::DATA_LOAD) body.push_back(std::move(slot));
    if (r == 0) body = patch_rank0(s, body);
    Program out = prefix(s, r);
    out.insert(out.end(), body.begin(), body.end());
    if (cfg.owner_backward) append_owner_backward_suffix(s, r, out);
    prog = std::move(out);
  }
  return s;
}

}  // namespace ppsched
