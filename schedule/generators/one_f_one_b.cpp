// 1f1b: one-forward-one-backward with P-r warmup forwards (reference hyper_parallel.md §2.2).
//
// Hand-placed like hyper-parallel's 1F1B, with its P2P layout reproduced literally:
// - warmup w = min(P-r, M) forwards, the first steady F counted inside it;
// - the warmup sends depend on rank parity: even ranks send right after each F (not after
//   the last warmup F), odd ranks send the previous micro's output just before the next F.
//   On each adjacent pair one end is thus send-first and the other recv-first (§2.0, §3.4);
// - steady: [BR(b), FS(f-1)] B(b) [BS(b), FR(f)] F(f);
// - cooldown: [BR(b)] (+ the pending FS(f-1) on the first iteration) B(b) [BS(b)].
// When P-r > M the warmup holds every micro and the last forward output is sent right after
// the warmup (the "extra FS(f-1)").
// --data-steps: hyper-parallel's Schedule1F1B with its data steps, literally: DATA_SEND right
// before each FWD_SEND, DATA_RECV right before each FWD_RECV, and a DATA_LOAD before each
// warmup forward's receives and, in the steady phase, right after the backward.
#include "schedule/generators/generator.hpp"

#include <algorithm>

namespace ppsched {

Schedule generate_1f1b(const GenerateOptions& o) {
  if (o.vpp != 1)
    refuse("1f1b", "needs --vpp 1 (one stage per rank; got --vpp " + std::to_string(o.vpp) +
                       "); use interleaved-1f1b for V > 1");
  const int P = o.pp;
  const int M = o.micro;
  const bool data = o.data_steps.value_or(false);
  Schedule s = one_stage_per_rank("1f1b", P, M);
  for (int r = 0; r < P; ++r) {
    const bool first = r == 0;
    const bool last = r == P - 1;
    const bool even = r % 2 == 0;
    const int w = std::min(P - r, M);
    Program prog;
    auto put = [&](Op op, int micro) { prog.push_back(make_step(op, micro, r)); };
    auto send_fwd = [&](int micro) {
      if (data) put(Op::DATA_SEND, micro);
      put(Op::FWD_SEND, micro);
    };
    auto recv_fwd = [&](int micro) {
      if (data) put(Op::DATA_RECV, micro);
      put(Op::FWD_RECV, micro);
    };
    auto load = [&](int micro) {
      if (data) put(Op::DATA_LOAD, micro);
    };

    // Warmup.
    for (int f = 0; f < w; ++f) {
      load(f);
      if (!first) recv_fwd(f);
      if (!even && !last && f > 0) send_fwd(f - 1);
      put(Op::FWD, f);
      if (even && !last && f + 1 < w) send_fwd(f);
    }
    // The output of the last warmup F is still unsent (last rank: nothing to send).
    bool pending = !last;
    if (P - r > M && pending) {
      send_fwd(w - 1);
      pending = false;
    }
    // Steady: M-w iterations, b = backward micro, f = forward micro.
    int b = 0;
    for (int f = w; f < M; ++f, ++b) {
      if (!last) {
        put(Op::BWD_RECV, b);
        send_fwd(f - 1);
      }
      put(Op::BWD, b);
      load(f);
      if (!first) {
        put(Op::BWD_SEND, b);
        recv_fwd(f);
      }
      put(Op::FWD, f);
    }
    // Cooldown: w iterations.
    for (; b < M; ++b) {
      if (!last) put(Op::BWD_RECV, b);
      if (pending) {
        send_fwd(M - 1);
        pending = false;
      }
      put(Op::BWD, b);
      if (!first) put(Op::BWD_SEND, b);
    }
    s.programs.push_back(std::move(prog));
  }
  return s;
}

}  // namespace ppsched
