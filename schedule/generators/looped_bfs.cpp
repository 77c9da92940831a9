// looped-bfs: breadth-first over the local stages (loop placement).
//
// Rank r runs, for each local chunk c ascending, the forward of stage c*P+r for every micro
// (ascending); then, for each chunk descending, the backward of every micro in reverse
// (M-1 first), as PyTorch's ScheduleLoopedBFS does (torch/distributed/pipelining/schedules.py,
// _calculate_single_rank_operations: reversed stages, reversed micro-batches; reference
// pytorch_and_peers.md §1.2). Every rank reverses alike, so each backward
// still follows its successor stage's backward of the same micro-batch. The compute order
// has no timing of its own, so the communication comes from insert_p2p with
// Alignment::Auto: it places every step at the earliest column its inputs allow and then
// runs the same column scan as hyper-parallel's add_send_recv (reference §2.0).
#include "schedule/comm_insertion.hpp"
#include "schedule/generators/generator.hpp"

namespace ppsched {

Schedule generate_looped_bfs(const GenerateOptions& o) {
  const int P = o.pp;
  const int V = o.vpp;
  const int M = o.micro;
  Schedule s;
  s.name = "looped-bfs";
  s.ranks = P;
  s.stages = P * V;
  s.micro_batches = M;
  s.placement = Placement::loop(P, P * V);
  for (int r = 0; r < P; ++r) {
    Program prog;
    for (int c = 0; c < V; ++c)
      for (int m = 0; m < M; ++m) prog.push_back(make_step(Op::FWD, m, c * P + r));
    for (int c = V - 1; c >= 0; --c)
      for (int m = M - 1; m >= 0; --m) prog.push_back(make_step(Op::BWD, m, c * P + r));
    s.programs.push_back(std::move(prog));
  }
  return insert_p2p(std::move(s), Alignment::Auto);
}

}  // namespace ppsched
