// gpipe: all forwards, then all backwards (reference hyper_parallel.md §2.1).
//
// Hand-placed like hyper-parallel's GPipe: no bubbles and no column scan. Each rank runs,
// for every micro, [FR] F [FS], then for every micro (ascending) [BR] B [BS]. Under blocking
// rendezvous this cannot deadlock: the forward sweep flows down the ranks in micro order and
// the backward sweep flows up in micro order, and every rank posts a transfer's two ends in
// the same relative order.
#include "schedule/generators/generator.hpp"

namespace ppsched {

Schedule generate_gpipe(const GenerateOptions& o) {
  if (o.vpp != 1)
    refuse("gpipe", "needs --vpp 1 (one stage per rank; got --vpp " + std::to_string(o.vpp) + ")");
  const int P = o.pp;
  const int M = o.micro;
  const bool data = o.data_steps.value_or(false);
  Schedule s = one_stage_per_rank("gpipe", P, M);
  for (int r = 0; r < P; ++r) {
    const bool first = r == 0;
    const bool last = r == P - 1;
    Program prog;
    // --data-steps: hyper-parallel's ScheduleGPipe with its data steps, literally:
    // DATA_LOAD, [DATA_RECV, FWD_RECV], FWD, [DATA_SEND, FWD_SEND].
    for (int m = 0; m < M; ++m) {
      if (data) prog.push_back(make_step(Op::DATA_LOAD, m, r));
      if (!first && data) prog.push_back(make_step(Op::DATA_RECV, m, r));
      if (!first) prog.push_back(make_step(Op::FWD_RECV, m, r));
      prog.push_back(make_step(Op::FWD, m, r));
      if (!last && data) prog.push_back(make_step(Op::DATA_SEND, m, r));
      if (!last) prog.push_back(make_step(Op::FWD_SEND, m, r));
    }
    for (int m = 0; m < M; ++m) {
      if (!last) prog.push_back(make_step(Op::BWD_RECV, m, r));
      prog.push_back(make_step(Op::BWD, m, r));
      if (!first) prog.push_back(make_step(Op::BWD_SEND, m, r));
    }
    s.programs.push_back(std::move(prog));
  }
  return s;
}

}  // namespace ppsched
