// interleaved-zb: PyTorch's ScheduleInterleavedZeroBubble (the ZB1P schedule of Qi et al.,
// arXiv 2401.10241), loop placement, V stages per rank.
//
// Restated from torch/distributed/pipelining/schedules.py (pytorch/pytorch 00722e648b74):
// `_get_warmup_ops` and `_get_1f1b_rank_ops`, the per-rank order its Interleaved1F1B and
// InterleavedZeroBubble share (facts, not code):
//   rounds = max(1, M / P), micros per round mpr = M / rounds (M must be a multiple of rounds);
//   warmup w = min((V-1)*mpr + k*(P-1-r), V*M) with k = 2 (Interleaved1F1B) or 1 (ZB);
//   op j's forward stage  = ((j / mpr) % V) * P + r,
//   op j's backward stage = (V-1 - ((j - w) / mpr) % V) * P + r;
//   ops 0..w-1 are forwards; ops w..V*M-1 a forward then a backward (B, or I with zero
//   bubble); ops V*M..V*M+w-1 a backward. Each stage counts its micro-batches from 0 per kind.
//   Zero bubble: from backward op number r on (op - w >= r), every backward op is followed by
//   the W of the oldest backward not yet weighted; the Ws left are appended at the end.
// PyTorch's idle slots (its bubbles, `_add_bubbles_to_actions`) only align its grid; the
// communication here comes from insert_p2p (Auto), as for looped-bfs.
#include <algorithm>

#include "schedule/comm_insertion.hpp"
#include "schedule/generators/generator.hpp"

namespace ppsched {

std::vector<std::vector<Step>> pytorch_interleaved_order(int P, int V, int M, bool zero_bubble) {
  const int rounds = std::max(1, M / P);
  const int mpr = M / rounds;
  std::vector<std::vector<Step>> ranks(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) {
    const int ops = V * M;
    const int w = std::min((V - 1) * mpr + (zero_bubble ? 1 : 2) * (P - 1 - r), ops);
    auto fwd_stage = [&](int j) { return ((j / mpr) % V) * P + r; };
    auto bwd_stage = [&](int j) { return (V - 1 - ((j - w) / mpr) % V) * P + r; };
    // Micro-batch counters per kind and local stage (stage / P).
    std::vector<int> f_mb(static_cast<size_t>(V), 0), b_mb(f_mb), w_mb(f_mb);
    std::vector<int> backward_ops;
    size_t weighted = 0;
    auto& out = ranks[static_cast<size_t>(r)];
    auto forward = [&](int j) {
      const int st = fwd_stage(j);
      out.push_back(make_step(Op::FWD, f_mb[static_cast<size_t>(st / P)]++, st));
    };
    auto weight = [&] {
      const int st = bwd_stage(backward_ops[weighted++]);
      out.push_back(make_step(Op::BWD_WEIGHT, w_mb[static_cast<size_t>(st / P)]++, st));
    };
    auto backward = [&](int j) {
      const int st = bwd_stage(j);
      out.push_back(make_step(zero_bubble ? Op::BWD_INPUT : Op::BWD, b_mb[static_cast<size_t>(st / P)]++, st));
      backward_ops.push_back(j);
      if (zero_bubble && j - w >= r) weight();
    };
    for (int j = 0; j < ops + w; ++j) {
      if (j < ops) forward(j);
      if (j >= w) backward(j);
    }
    while (zero_bubble && weighted < backward_ops.size()) weight();
  }
  return ranks;
}

Schedule generate_interleaved_zb(const GenerateOptions& o) {
  const int P = o.pp, V = o.vpp, M = o.micro;
  const int rounds = std::max(1, M / P);
  if (M % rounds != 0)
    refuse("interleaved-zb", "--micro " + std::to_string(M) + " is not a multiple of the " + std::to_string(rounds) +
                                 " rounds (max(1, M / P)), as PyTorch's ScheduleInterleavedZeroBubble requires");
  Schedule s;
  s.name = "interleaved-zb";
  s.ranks = P;
  s.stages = P * V;
  s.micro_batches = M;
  s.placement = Placement::loop(P, P * V);
  for (auto& steps : pytorch_interleaved_order(P, V, M, true)) {
    Program prog;
    prog.reserve(steps.size());
    for (Step& st : steps) prog.push_back(std::move(st));
    s.programs.push_back(std::move(prog));
  }
  return insert_p2p(std::move(s), Alignment::Auto);
}

}  // namespace ppsched
