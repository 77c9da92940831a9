// interleaved-1f1b: hyper-parallel's Interleaved 1F1B (reference hyper_parallel.md §2.3).
//
// The family is built the way hyper-parallel builds it: a per-rank compute list in which
// the list index is a logical time column and `None` bubbles (our idle slots) keep the ranks
// aligned, then the column scan (insert_p2p with Alignment::AsGiven, §2.0) adds the P2P
// steps. The bubbles are load-bearing: the scan only works when every consumer sits in a
// later column than its producer, and insert_p2p checks exactly that.
#include "schedule/generators/interleaved_1f1b.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "schedule/comm_insertion.hpp"
#include "schedule/generators/generator.hpp"

namespace ppsched::interleaved {
namespace {

// The round layout of §2.3: R rounds of "micros per round" (npr); a rank's forward ops are
// issued round by round, each round running every chunk (virtual stage) over npr micros.
// Megatron-LM's micro-batch groups are the same layout with other sizes: its
// get_schedule_table runs each chunk over G consecutive micro-batches, the last group holding
// the rest (M - G * floor((M-1) / G) of them), and its warmup (V-1)*G + 2(P-1-r) is the
// classic one with R0 = G (megatron/core/pipeline_parallel/schedules.py).
struct Rounds {
  std::vector<int> npr;   // micros in round a
  std::vector<int> accu;  // accu[a] = first op index of round a (prefix sums of npr, times V)

  Rounds(int P, int V, int M, int group_size) {
    accu.push_back(0);
    auto add = [&](int n) {
      npr.push_back(n);
      accu.push_back(accu.back() + n * V);
    };
    if (group_size > 0) {
      for (int first = 0; first < M; first += group_size) add(std::min(group_size, M - first));
      return;
    }
    const int R = std::max(1, M / P);
    // M < P: one round of M micros (base = M-P is negative, no remainder).
    const int base = M < P ? M - P : (M % P) / R;
    const int rem = M < P ? 0 : (M % P) % R;
    for (int a = 0; a < R; ++a) add(P + base + (a < rem ? 1 : 0));
  }
  // The chunk (local virtual stage) op k belongs to: (k - accu[a]) / npr[a], a = k's round.
  int chunk(int k) const {
    size_t a = 0;
    while (a + 1 < npr.size() && k >= accu[a + 1]) ++a;
    return (k - accu[a]) / npr[a];
  }
};

// One entry of a rank's list before composites are formed.
struct Item {
  enum Kind { Idle, WarmupF, SteadyF, SteadyB, CooldownB } kind;
  Step step;
};

std::vector<Item> rank_items(int P, int V, int M, int i, const Rounds& rounds, bool less_memory) {
  const int ops = V * M;
  const int R0 = rounds.npr[0];
  const int depth = P - 1 - i;
  // Classic warmup 2(P-1-i) extra forwards; less_memory (newest hyper-parallel) only P-1-i,
  // which at V=1 is exactly the plain 1F1B warmup (§2.3 Options, §5).
  const int unclipped = (V - 1) * R0 + (less_memory ? depth : 2 * depth);
  const int w = std::min(unclipped, ops);
  const int fb = ops - w;
  const bool short_micro = M < P;

  std::vector<int> f_next(static_cast<size_t>(V), 0), b_next(static_cast<size_t>(V), 0);
  auto forward = [&](int k) {
    const int c = rounds.chunk(k);
    return make_step(Op::FWD, f_next[static_cast<size_t>(c)]++, c * P + i);
  };
  // Backward op k runs the reversed chunk V-1-chunk(k); micros count up per stage.
  auto backward = [&](int k) {
    const int c = V - 1 - rounds.chunk(k);
    return make_step(Op::BWD, b_next[static_cast<size_t>(c)]++, c * P + i);
  };

  std::vector<Item> out;
  out.reserve(static_cast<size_t>(2 * ops + 3 * P));
  auto idle = [&](int n) {
    for (int k = 0; k < n; ++k) out.push_back({Item::Idle, Step{}});
  };
  // 1. i leading bubbles: rank i's first input arrives i columns late.
  idle(i);
  // 2. Warmup forwards. With M < P a round holds only M micros, but the wrap-around from
  //    stage c*P+P-1 to (c+1)*P takes P columns: pad P-M after the last micro's F, except at
  //    the final warmup op on non-last ranks (the steady/idle block below already waits).
  for (int k = 0; k < w; ++k) {
    Step f = forward(k);
    const bool last_micro = f.micro == M - 1;
    out.push_back({Item::WarmupF, f});
    if (short_micro && last_micro && !(k == w - 1 && i != P - 1)) idle(P - M);
  }
  // 3. The warmup forwards the clip to V*M took away become bubbles (the reference writes
  //    max(0, 2(P-1-i)-M): the clip only bites with a single round, where R0 = M, so the two
  //    agree; written this way it also covers the less_memory warmup), then P-1-i bubbles
  //    while the first gradient comes back from the last rank.
  idle(std::max(0, unclipped - ops));
  idle(depth);
  // 4. Steady pairs F, B. With M < P the last rank pads 2(P-M) after the last micro's B so
  //    the next chunk's B waits for the wrap-around (the newer 2(P-M) rule, §7 item 1).
  for (int k = 0; k < fb; ++k) {
    out.push_back({Item::SteadyF, forward(w + k)});
    Step b = backward(k);
    const bool last_micro = b.micro == M - 1;
    out.push_back({Item::SteadyB, b});
    if (short_micro && i == P - 1 && last_micro) idle(2 * (P - M));
  }
  // 5. Cooldown: one bubble before each B, keeping the steady two-column period so every
  //    gradient arrives before its B; with M < P, 2(P-M) after the last micro's B of a chunk
  //    (none after the final op: trailing bubbles carry no timing).
  for (int k = fb; k < ops; ++k) {
    idle(1);
    Step b = backward(k);
    const bool last_micro = b.micro == M - 1;
    out.push_back({Item::CooldownB, b});
    if (short_micro && last_micro && k + 1 < ops) idle(2 * (P - M));
  }
  return out;
}

}  // namespace

Schedule compute_order(int P, int V, int M, const BodyOptions& options) {
  Schedule s;
  s.name = "interleaved-1f1b";
  s.ranks = P;
  s.stages = P * V;
  s.micro_batches = M;
  s.placement = Placement::loop(P, P * V);
  const Rounds rounds(P, V, M, options.group_size);
  s.programs.reserve(static_cast<size_t>(P));
  for (int i = 0; i < P; ++i) {
    auto items = rank_items(P, V, M, i, rounds, options.less_memory);
    Program prog;
    prog.reserve(items.size());
    for (size_t k = 0; k < items.size(); ++k) {
      const Item& it = items[k];
      if (it.kind == Item::Idle) {
        prog.push_back(std::nullopt);
        continue;
      }
      // overlap_b_f: the steady segment F_first, [B_k|F_k+1]..., B_last (§2.3 Options). A B
      // pairs with the steady F right after it; a bubble between them (short-micro padding)
      // ends a run. The scan gives a composite one column per sub-step, so the columns of
      // every step stay those of the plain layout.
      if (options.overlap_b_f && it.kind == Item::SteadyB && k + 1 < items.size() &&
          items[k + 1].kind == Item::SteadyF) {
        prog.push_back(make_composite(Op::OVERLAP_B_F, {it.step, items[k + 1].step}));
        ++k;
        continue;
      }
      prog.push_back(std::move(items[k].step));
    }
    // Trailing bubbles carry no timing: drop them.
    while (!prog.empty() && !prog.back()) prog.pop_back();
    s.programs.push_back(std::move(prog));
  }
  return s;
}

Schedule body(int P, int V, int M, const BodyOptions& options) {
  Schedule s = insert_p2p(compute_order(P, V, M, options), Alignment::AsGiven);
  // Not `c ? f(std::move(s)) : s`: a conditional's lvalue branch copies the whole schedule.
  if (options.data_steps) return add_data_steps(std::move(s));
  return s;
}

}  // namespace ppsched::interleaved

namespace ppsched {
namespace {

// enable_dxdw_split (§2.3 Options): each [B|F] whose B is not on stage 0 becomes [Bi|F], and
// the matching Bw goes right after the contiguous run of body P2P steps (FWD/BWD sends and
// receives) that follows the composite: a data step ends the run, as in hyper-parallel, whose
// run is its FWD/BWD P2P types. The P2P order is unchanged; stage-0 pairs stay unified
// (there is no dx to ship).
void split_dxdw(Schedule& s) {
  for (auto& prog : s.programs) {
    Program out;
    out.reserve(prog.size() + prog.size() / 4);
    std::optional<Step> pending_w;
    for (auto& slot : prog) {
      if (pending_w && !(slot && is_body_p2p(slot->op))) {
        out.push_back(*pending_w);
        pending_w.reset();
      }
      if (slot && slot->op == Op::OVERLAP_B_F && slot->sub_steps()[0].op == Op::BWD &&
          slot->sub_steps()[0].stage != 0) {
        Step& b = slot->sub_steps_mut()[0];
        b.op = Op::BWD_INPUT;
        pending_w = make_step(Op::BWD_WEIGHT, b.micro, b.stage);
      }
      out.push_back(std::move(slot));
    }
    if (pending_w) out.push_back(*pending_w);
    prog = std::move(out);
  }
}

// --group-size G: what Megatron-LM accepts, with its own rules and words
// (forward_backward_pipelining_with_interleaving: G must range in [P, M]; M % G must be 0 or
// at least P, "otherwise it introduces dependency bubbles"). Megatron's interleaving has
// neither hyper-parallel's shallow warmup nor its overlap pairs, and with one stage per rank
// there are no chunks to group.
void refuse_megatron_groups(const GenerateOptions& o) {
  const int P = o.pp, M = o.micro, G = o.group_size;
  const char* family = "interleaved-1f1b";
  if (o.vpp < 2)
    refuse(family, "--group-size needs --vpp >= 2: it sizes the groups of micro-batches each virtual stage runs "
                   "in turn (Megatron-LM's microbatch_group_size_per_vp_stage); with one stage per rank there is "
                   "nothing to interleave");
  if (o.less_memory || o.overlap_b_f)
    refuse(family, std::string("--group-size gives Megatron-LM's interleaved order, which has no ") +
                       (o.less_memory ? "--less-memory (shallow warmup)" : "--overlap-b-f (overlapped pairs)"));
  if (G < P || G > M)
    refuse(family, "--group-size " + std::to_string(G) + ": the number of contiguous micro-batches in a virtual "
                   "pipeline stage should range in [PP=" + std::to_string(P) + ", M=" + std::to_string(M) +
                   "] (Megatron-LM's rule)");
  const int last = M % G;
  if (last > 0 && last < P)
    refuse(family, "--group-size " + std::to_string(G) + " with --micro " + std::to_string(M) +
                       ": the remainder of M (the total micro-batches) divided by N (number of contiguous "
                       "micro-batches in a virtual pipeline stage) should be 0, or larger than or equal to the "
                       "pipeline-parallel size, but it is " + std::to_string(last) +
                       "; otherwise it introduces dependency bubbles in the pipeline (Megatron-LM's rule)");
}

}  // namespace

Schedule generate_interleaved_1f1b(const GenerateOptions& o) {
  if (o.dxdw_split && !o.overlap_b_f)
    refuse("interleaved-1f1b", "--dxdw-split needs --overlap-b-f (it splits the [B|F] overlap pairs)");
  // The overlap pairs need a warmup that drops by two forwards per rank, as the classic
  // 2(P-1-i) does. In a steady run of two-column [B|F] pairs, let rank i's pairs start at
  // column s(i) and the warmup drop by d per rank. A pair's forward input is made in the
  // second column of a pair on the rank before, so s(i+1) - s(i) >= 2 - 2d; the gradient
  // climbing from rank i+1 needs s(i+1) - s(i) <= -1. Both hold only for d >= 2; the shallow
  // P-1-i warmup has d = 1, so some pair would start before its forward input arrives
  // (insert_p2p refuses the layout). Padding every pair would make the overlap pointless.
  if (o.less_memory && o.overlap_b_f)
    refuse("interleaved-1f1b",
           "--less-memory cannot be combined with --overlap-b-f: the shallow P-1-i warmup leaves no "
           "column for an [B|F] pair's forward input to arrive before the pair starts");
  if (o.group_size != 0) refuse_megatron_groups(o);
  interleaved::BodyOptions body_options;
  body_options.less_memory = o.less_memory;
  body_options.overlap_b_f = o.overlap_b_f;
  body_options.group_size = o.group_size;
  body_options.data_steps = o.data_steps.value_or(false);
  Schedule s = interleaved::body(o.pp, o.vpp, o.micro, body_options);
  if (o.dxdw_split) split_dxdw(s);
  return s;
}

}  // namespace ppsched
