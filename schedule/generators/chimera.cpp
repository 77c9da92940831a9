// Chimera (Li & Hoefler, "Chimera: Efficiently Training Large-Scale Neural Networks with
// Bidirectional Pipelines", SC'21): two copies of the pipeline on the same P ranks, one running
// down (model stage j on rank j) and one up (model stage j on rank P-1-j), so each rank holds
// one stage of each copy and the two fill each other's bubbles. The copies of a model stage
// add up their weight gradients (REPLICA_GRAD_SYNC, Chimera's sync_grad) in the rank's first
// idle slot after the copy's last backward.
//
// In ppsched's IR (Schedule::pipes = 2, V placement): copy 0 is stages 0..P-1 (stage j on
// rank j), copy 1 stages P..2P-1 (stage P+j, model stage j, on rank P-1-j).
//
// The order is the time grid of Shigangli/Chimera's chimera_pipeline_rank.py as its runtime
// walks it (pinned by tests/test_peer_orders.cpp against that code's output), stated as:
//   * the micro-batches go in units of P/2, unit u carrying micro-batches u*P/2 .. u*P/2+P/2-1,
//     alternately down (u even) and up (u odd);
//   * units 0 and 1 start at time 0, unit u+2 when unit u's first micro-batch has left, 2P
//     steps after unit u started (Chimera's "concatenated basic units");
//   * inside a unit started at T, micro-batch x runs its forward at model stage j at time
//     T + 2x + j and its backward at T + 2x + 2P - 1 - j: one stage per step, down and back.
// No two steps meet on a rank at the same time (checked below). Where Chimera's own generator
// does something else ppsched keeps the rule above: at P = 8 it starts a unit at every
// micro-batch the first unit retires, so from M = 3P its units collide on the grid and it
// drops steps; at P = 8, M = 2P it syncs a copy after each unit, some before the copy's last
// backward (tests/data/peers/README.md).
#include <algorithm>
#include <array>
#include <map>
#include <stdexcept>
#include <string>

#include "schedule/comm_insertion.hpp"
#include "schedule/generators/generator.hpp"

namespace ppsched {

Schedule generate_chimera(const GenerateOptions& o) {
  const int P = o.pp, M = o.micro;
  if (o.vpp != 1)
    refuse("chimera", "takes no --vpp: each rank holds one stage of each of the two pipelines (got --vpp " +
                          std::to_string(o.vpp) + ")");
  if (P < 2 || P % 2 != 0)
    refuse("chimera", "needs an even --pp (Chimera asserts 'The number of stages should be an even value.'), got " +
                          std::to_string(P));
  if (M % P != 0)
    refuse("chimera", "needs --micro a multiple of --pp (Chimera asserts 'num_micro_batches*2 should be a multiple "
                      "of num_stages.', its num_micro_batches being per pipeline), got --micro " +
                          std::to_string(M));
  const int half = P / 2, units = M / half;

  Schedule s;
  s.name = "chimera";
  s.ranks = P;
  s.stages = 2 * P;
  s.micro_batches = M;
  s.placement = Placement::v(P, 2 * P);
  s.pipes = 2;
  s.micro_pipe.resize(static_cast<size_t>(M));

  // The grid: (rank, time) -> step.
  std::map<std::pair<int, int>, Step> grid;
  std::vector<std::array<int, 2>> last_backward(static_cast<size_t>(P), std::array<int, 2>{-1, -1});
  std::vector<int> start(static_cast<size_t>(units), 0);
  for (int u = 0; u < units; ++u) {
    if (u >= 2) start[static_cast<size_t>(u)] = start[static_cast<size_t>(u - 2)] + 2 * P;
    const int copy = u % 2, T = start[static_cast<size_t>(u)];
    for (int x = 0; x < half; ++x) {
      const int m = u * half + x;
      s.micro_pipe[static_cast<size_t>(m)] = copy;
      for (int j = 0; j < P; ++j) {
        const int rank = copy == 0 ? j : P - 1 - j, stage = copy * P + j;
        const int tf = T + 2 * x + j, tb = T + 2 * x + 2 * P - 1 - j;
        for (auto [t, op] : {std::pair{tf, Op::FWD}, std::pair{tb, Op::BWD}})
          if (!grid.emplace(std::pair{rank, t}, make_step(op, m, stage)).second)
            throw std::logic_error("chimera: two steps at one time on rank " + std::to_string(rank) + " (bug)");
        int& last = last_backward[static_cast<size_t>(rank)][static_cast<size_t>(copy)];
        last = std::max(last, tb);
      }
    }
  }
  int end = 0;
  for (const auto& [at, st] : grid) end = std::max(end, at.second + 1);

  s.programs.assign(static_cast<size_t>(P), Program{});
  for (int r = 0; r < P; ++r) {
    Program& prog = s.programs[static_cast<size_t>(r)];
    // The copies' syncs, in the order their last backward passes this rank, each in the first
    // idle slot after it (or after the grid).
    std::vector<std::pair<int, int>> syncs;  // (ready time, copy)
    for (int c = 0; c < 2; ++c) syncs.push_back({last_backward[static_cast<size_t>(r)][static_cast<size_t>(c)] + 1, c});
    std::sort(syncs.begin(), syncs.end());
    size_t next_sync = 0;
    for (int t = 0; t < end || next_sync < syncs.size(); ++t) {
      auto it = grid.find({r, t});
      if (it != grid.end()) {
        prog.push_back(std::move(it->second));
      } else if (next_sync < syncs.size() && syncs[next_sync].first <= t) {
        const int copy = syncs[next_sync++].second;
        prog.push_back(make_step(Op::REPLICA_GRAD_SYNC, kNone, copy == 0 ? r : 2 * P - 1 - r));
      } else {
        prog.push_back(std::nullopt);
      }
    }
  }
  return insert_p2p(std::move(s), Alignment::AsGiven);
}

}  // namespace ppsched
