// DualPipeV: DeepSeek's "cut-in-half" DualPipe (credited to Sea AI Lab), reference
// pytorch_and_peers.md §4 (phases, bubble/memory table) and §1.2 (PyTorch's
// ScheduleDualPipeV mirrors the same 8 phases).
//
// V placement, two chunks per rank: on rank r, chunk 0 = stage r and chunk 1 = stage
// 2P-1-r, so a micro-batch runs down the ranks on chunk 0, turns on rank P-1 (stages P-1
// and P are both there, no P2P between them) and comes back up on chunk 1. Each rank walks
// eight phases whose lengths are those of DeepSeek's dualpipev.py, with num_chunks = M:
//
//   1  nF0      (P-r-1)*2     F chunk0
//   2  nF0F1    r+1           F chunk0, F chunk1
//   3  nB1W1F1  P-r-1         B chunk1 split (I now, its W right after), F chunk1
//   4  nF0B1F1B0 M-2P+r+1     [F chunk0 | B chunk1], [F chunk1 | B chunk0]   (main loop)
//   5  nB1F1B0  P-r-1         B chunk1, [F chunk1 | B chunk0]
//   6  nB1B0    r+1           B chunk1, B chunk0; from the middle iteration on split
//   7  nWB0     P-r-1         a queued W, B chunk0 split
//   8  nW       r+1           a queued W (flush)
//
// [x | y] is an OVERLAP_F_B composite: DeepSeek runs the forward of one chunk and the full
// backward of the other together (overlapped_forward_backward) so that the communication of
// one hides behind the computation of the other.
//
// Every chunk runs its forwards in micro order 0, 1, ... and its backwards in micro order
// 0, 1, ..., counted separately. The phase lengths add up to exactly M forwards and M
// backwards per chunk (chunk 0 F: 1+2+4, chunk 1 F: 2+3+4+5, chunk 1 B: 3+4+5+6, chunk 0 B:
// 4+5+6+7). M >= 2P is DeepSeek's own requirement (dualpipev.py asserts num_chunks >=
// 2 * num_ranks; PyTorch's ScheduleDualPipeV asks n_mb >= num_stages): below it the
// warmup of rank 0 (2P-1 chunk-0 forwards) outgrows the micro-batches and phase 4's length
// M-2P+r+1 turns negative.
//
// Split backwards (zero bubble): a split backward emits BWD_INPUT now and queues its
// BWD_WEIGHT; a W step pops the oldest queued W (DeepSeek's WeightGradStore is a FIFO).
// Choices where the description leaves room, all following dualpipev.py as we read it:
//   * phase 6 switches to split backwards at i == (r+1)/2 (integer division). On an odd
//     rank the switch happens before that iteration's chunk-1 backward, on an even rank
//     between its chunk-1 and chunk-0 backwards. This leaves exactly r+1 W's queued, which
//     phase 7 keeps constant (one out, one in) and phase 8 drains.
//   * phase 4, i == 0 on the last rank: DeepSeek does not overlap F chunk0 and B chunk1 there
//     ("to further reduce bubble size"): it runs the forward, then the backward. We emit
//     them as two plain steps as well; every other phase-4 pair is an OVERLAP_F_B.
//   * backwards inside overlaps and outside the zero-bubble phases are full BWD steps.
#include <array>
#include <deque>
#include <stdexcept>
#include <string>

#include "schedule/comm_insertion.hpp"
#include "schedule/generators/generator.hpp"

namespace ppsched {
namespace {

// Emits one rank's compute order, keeping the per-chunk micro counters and the W queue.
class RankBuilder {
 public:
  RankBuilder(int P, int M, int r, Program& out) : M_(M), stage_{r, 2 * P - 1 - r}, out_(out) {}

  bool has_forward(int chunk) const { return next_f_[idx(chunk)] < M_; }

  Step forward(int chunk) { return make_step(Op::FWD, next_f_[idx(chunk)]++, stage_[idx(chunk)]); }
  Step full_backward(int chunk) { return make_step(Op::BWD, next_b_[idx(chunk)]++, stage_[idx(chunk)]); }

  void emit(Step st) { out_.push_back(std::move(st)); }
  void F(int chunk) { emit(forward(chunk)); }

  // B of `chunk`: a full BWD, or with zero bubble a BWD_INPUT now and its W queued.
  void B(int chunk, bool zero_bubble) {
    if (!zero_bubble) {
      emit(full_backward(chunk));
      return;
    }
    const int m = next_b_[idx(chunk)]++;
    emit(make_step(Op::BWD_INPUT, m, stage_[idx(chunk)]));
    weights_.push_back(make_step(Op::BWD_WEIGHT, m, stage_[idx(chunk)]));
  }

  // Pops the oldest queued weight gradient.
  void W() {
    if (weights_.empty()) throw std::logic_error("dualpipev: W step with an empty queue (bug)");
    emit(weights_.front());
    weights_.pop_front();
  }

  // [F f_chunk | B b_chunk] as one OVERLAP_F_B; when f_chunk has no forward left, the
  // backward runs alone (cannot happen for M >= 2P with the phase lengths above).
  void overlap(int f_chunk, int b_chunk) {
    if (!has_forward(f_chunk)) {
      B(b_chunk, false);
      return;
    }
    Step f = forward(f_chunk);
    Step b = full_backward(b_chunk);
    emit(make_composite(Op::OVERLAP_F_B, {std::move(f), std::move(b)}));
  }

  void finish() const {
    for (int c = 0; c < 2; ++c)
      if (next_f_[idx(c)] != M_ || next_b_[idx(c)] != M_)
        throw std::logic_error("dualpipev: phase lengths do not cover every micro-batch (bug)");
    if (!weights_.empty()) throw std::logic_error("dualpipev: W queue not drained (bug)");
  }

 private:
  static size_t idx(int chunk) { return static_cast<size_t>(chunk); }
  int M_;
  std::array<int, 2> stage_;
  std::array<int, 2> next_f_{0, 0};
  std::array<int, 2> next_b_{0, 0};
  std::deque<Step> weights_;
  Program& out_;
};

}  // namespace

Schedule generate_dualpipev(const GenerateOptions& o) {
  if (o.vpp != 2)
    refuse("dualpipev", "needs exactly two stages per rank (--vpp 2, V placement: stage r and stage "
                        "2P-1-r on rank r), got --vpp " + std::to_string(o.vpp));
  const int P = o.pp, M = o.micro;
  if (M < 2 * P)
    refuse("dualpipev", "needs --micro >= 2 * --pp (" + std::to_string(2 * P) + "), got --micro " +
                            std::to_string(M) +
                            ": the eight phases assume it (rank 0 forwards 2P-1 micro-batches on "
                            "chunk 0 before its main loop, which runs M-2P+1 times)");

  Schedule s;
  s.name = "dualpipev";
  s.ranks = P;
  s.stages = 2 * P;
  s.micro_batches = M;
  s.placement = Placement::v(P, 2 * P);
  s.programs.assign(static_cast<size_t>(P), Program{});

  for (int r = 0; r < P; ++r) {
    RankBuilder b(P, M, r, s.programs[static_cast<size_t>(r)]);
    const bool last_rank = r == P - 1;

    // Phase 1 (nF0): fill chunk 0; rank 0 forwards the most, the last rank none.
    for (int i = 0; i < (P - r - 1) * 2; ++i) b.F(0);

    // Phase 2 (nF0F1): alternate the chunks; chunk 1 starts receiving from rank r+1.
    for (int i = 0; i < r + 1; ++i) {
      b.F(0);
      b.F(1);
    }

    // Phase 3 (nB1W1F1): the first chunk-1 backwards come back; their W runs right away
    // (the queue is empty here, so the W popped is the one just queued).
    for (int i = 0; i < P - r - 1; ++i) {
      b.B(1, true);
      b.W();
      b.F(1);
    }

    // Phase 4 (nF0B1F1B0), the main loop: two overlapped forward/backward pairs per round.
    for (int i = 0; i < M - 2 * P + r + 1; ++i) {
      if (i == 0 && last_rank) {
        b.F(0);  // not overlapped in dualpipev.py: the B can start as soon as its input arrives
        b.B(1, false);
      } else {
        b.overlap(0, 1);
      }
      b.overlap(1, 0);
    }

    // Phase 5 (nB1F1B0): chunk 0 has no forwards left; chunk 1 still overlaps.
    for (int i = 0; i < P - r - 1; ++i) {
      b.B(1, false);
      b.overlap(1, 0);
    }

    // Phase 6 (nB1B0): backwards only; from the middle iteration on they are split, the rank
    // parity deciding whether chunk 1's or chunk 0's backward switches first.
    const int step_6 = r + 1;
    bool zero_bubble = false;
    for (int i = 0; i < step_6; ++i) {
      if (i == step_6 / 2 && r % 2 == 1) zero_bubble = true;
      b.B(1, zero_bubble);
      if (i == step_6 / 2 && r % 2 == 0) zero_bubble = true;
      b.B(0, zero_bubble);
    }

    // Phase 7 (nWB0): a queued W fills the wait for each remaining chunk-0 gradient.
    for (int i = 0; i < P - r - 1; ++i) {
      b.W();
      b.B(0, true);
    }

    // Phase 8 (nW): flush the W queue.
    for (int i = 0; i < r + 1; ++i) b.W();

    b.finish();
  }
  return insert_p2p(std::move(s), Alignment::Auto);
}

}  // namespace ppsched
