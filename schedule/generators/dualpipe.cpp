// DualPipe: DeepSeek's bidirectional pipeline (DeepSeek-V3 technical report §3.2.1;
// deepseek-ai/DualPipe, dualpipe/dualpipe.py), the original of DualPipeV. Two copies of the
// pipeline run on the same P ranks in opposite directions: micro-batches 0..M/2-1 enter at
// rank 0 (copy 0: model stage j on rank j, ppsched stage j), micro-batches M/2..M-1 at rank
// P-1 (copy 1: model stage j on rank P-1-j, ppsched stage P+j). So rank r holds model stage r
// of one copy and P-1-r of the other, and after the step the two copies of each model stage
// add up their weight gradients (REPLICA_GRAD_SYNC; DeepSeek's example exchanges them after
// DualPipe.step, which this schedule does at its end, lower model stage first on every rank).
//
// Each rank walks the eight phases of dualpipe.py with h = min(r, P-1-r) its distance from
// the nearer end and "phase" p meaning copy p on the first half of the ranks and copy 1-p on
// the second (DualPipe's `phase ^= is_in_second_half`); num_chunks = M, so each copy runs M/2:
//   1  nF0        (P/2-h-1)*2   F p0
//   2  nF0F1      h+1           F p0, F p1
//   3  nB1W1F1    P/2-h-1       B p1 split (its W right after), F p1
//   4  nF0B1F1B0  M/2-P+h+1     [F p0 | B p1], [F p1 | B p0]; on a middle rank (h = P/2-1) the
//                               first [F p0 | B p1] runs as two steps (not overlapped there)
//   5  nB1F1B0    P/2-h-1       B p1, [F p1 | B p0]
//   6  nB1B0      h+1           B p1, B p0; split from iteration (h+1)/2 on (an odd h before
//                               that iteration's B p1, an even h between its two backwards)
//   7  nWB0       P/2-h-1       a queued W, B p0 split
//   8  nW         h+1           a queued W
// Per copy the forwards and the backwards each run in micro order; a W pops the oldest queued
// weight gradient (DeepSeek's WeightGradStore is a FIFO). DeepSeek's step() asserts P even,
// M even and M >= 2P; ppsched refuses the same. Pinned against dualpipe.py's own output
// (tests/test_peer_orders.cpp).
#include <array>
#include <deque>
#include <stdexcept>
#include <string>

#include "schedule/comm_insertion.hpp"
#include "schedule/generators/generator.hpp"

namespace ppsched {
namespace {

class RankOrder {
 public:
  RankOrder(int P, int M, int r, Program& out)
      : half_(M / 2), second_half_(r >= P / 2 ? 1 : 0), stage_{r, P + (P - 1 - r)}, out_(out) {}

  // DualPipe's phase p on this rank -> the copy it runs.
  int copy(int p) const { return p ^ second_half_; }
  Step forward(int p) {
    const int c = copy(p);
    return make_step(Op::FWD, micro(c, next_f_[c]++), stage_[c]);
  }
  Step full_backward(int p) {
    const int c = copy(p);
    return make_step(Op::BWD, micro(c, next_b_[c]++), stage_[c]);
  }
  void F(int p) { out_.push_back(forward(p)); }
  void B(int p, bool zero_bubble) {
    if (!zero_bubble) {
      out_.push_back(full_backward(p));
      return;
    }
    const int c = copy(p);
    const int m = micro(c, next_b_[c]++);
    out_.push_back(make_step(Op::BWD_INPUT, m, stage_[c]));
    weights_.push_back(make_step(Op::BWD_WEIGHT, m, stage_[c]));
  }
  void W() {
    if (weights_.empty()) throw std::logic_error("dualpipe: W step with an empty queue (bug)");
    out_.push_back(weights_.front());
    weights_.pop_front();
  }
  void overlap(int p_forward, int p_backward) {
    Step f = forward(p_forward);
    Step b = full_backward(p_backward);
    out_.push_back(make_composite(Op::OVERLAP_F_B, {std::move(f), std::move(b)}));
  }
  void finish() const {
    for (int c = 0; c < 2; ++c)
      if (next_f_[c] != half_ || next_b_[c] != half_)
        throw std::logic_error("dualpipe: phase lengths do not cover every micro-batch (bug)");
    if (!weights_.empty()) throw std::logic_error("dualpipe: W queue not drained (bug)");
  }

 private:
  int micro(int c, int chunk) const { return c * half_ + chunk; }
  int half_, second_half_;
  std::array<int, 2> stage_;
  std::array<int, 2> next_f_{0, 0}, next_b_{0, 0};
  std::deque<Step> weights_;
  Program& out_;
};

}  // namespace

Schedule generate_dualpipe(const GenerateOptions& o) {
  const int P = o.pp, M = o.micro;
  if (o.vpp != 1)
    refuse("dualpipe", "takes no --vpp: each rank holds one stage of each of the two pipelines (got --vpp " +
                           std::to_string(o.vpp) + ")");
  if (P % 2 != 0) refuse("dualpipe", "needs an even --pp (dualpipe.py asserts num_ranks % 2 == 0), got " + std::to_string(P));
  if (M % 2 != 0 || M < 2 * P)
    refuse("dualpipe", "needs an even --micro >= 2 * --pp (" + std::to_string(2 * P) +
                           ") (dualpipe.py asserts num_chunks % 2 == 0 and num_chunks >= num_ranks * 2), got --micro " +
                           std::to_string(M));
  const int H = P / 2, half = M / 2;

  Schedule s;
  s.name = "dualpipe";
  s.ranks = P;
  s.stages = 2 * P;
  s.micro_batches = M;
  s.placement = Placement::v(P, 2 * P);
  s.pipes = 2;
  s.micro_pipe.assign(static_cast<size_t>(M), 0);
  for (int m = half; m < M; ++m) s.micro_pipe[static_cast<size_t>(m)] = 1;
  s.programs.assign(static_cast<size_t>(P), Program{});

  for (int r = 0; r < P; ++r) {
    Program& prog = s.programs[static_cast<size_t>(r)];
    RankOrder b(P, M, r, prog);
    const int h = std::min(r, P - 1 - r);
    const bool middle = h == H - 1;
    for (int i = 0; i < (H - h - 1) * 2; ++i) b.F(0);
    for (int i = 0; i < h + 1; ++i) {
      b.F(0);
      b.F(1);
    }
    for (int i = 0; i < H - h - 1; ++i) {
      b.B(1, true);
      b.W();
      b.F(1);
    }
    for (int i = 0; i < half - P + h + 1; ++i) {
      if (i == 0 && middle) {
        b.F(0);  // "We don't overlap these two chunks to further reduce bubble size."
        b.B(1, false);
      } else {
        b.overlap(0, 1);
      }
      b.overlap(1, 0);
    }
    for (int i = 0; i < H - h - 1; ++i) {
      b.B(1, false);
      b.overlap(1, 0);
    }
    bool zero_bubble = false;
    for (int i = 0; i < h + 1; ++i) {
      if (i == (h + 1) / 2 && h % 2 == 1) zero_bubble = true;
      b.B(1, zero_bubble);
      if (i == (h + 1) / 2 && h % 2 == 0) zero_bubble = true;
      b.B(0, zero_bubble);
    }
    for (int i = 0; i < H - h - 1; ++i) {
      b.W();
      b.B(0, true);
    }
    for (int i = 0; i < h + 1; ++i) b.W();
    b.finish();
    // The copies exchange their weight gradients after the step, lower model stage first.
    const int lower = std::min(r, P - 1 - r);
    for (int model_stage : {lower, P - 1 - lower})
      prog.push_back(make_step(Op::REPLICA_GRAD_SYNC, kNone, model_stage == r ? r : P + model_stage));
  }
  return insert_p2p(std::move(s), Alignment::Auto);
}

}  // namespace ppsched
