// combined-1f1b: Megatron-Core's combined 1F1B (`--overlap-moe-expert-parallel-comm`,
// NVIDIA/Megatron-LM #2719, #2730): interleaved 1F1B in which each steady step merges the
// forward of one micro-batch with the backward of another, layer by layer, so that one's expert
// all-to-alls run beside the other's compute on a second stream (the per-layer phase order is
// the lowering's: lowering/stream_program.cpp, the engine's: sim/engine_streams.cpp).
//
// The order, as Megatron-LM's code at d98e8a64 runs it (run under stubs:
// tests/data/peers/megatron/combined_1f1b_order.json.gz, compared step by step in
// tests/test_peer_orders.cpp):
//  - P > 1 needs virtual stages (V >= 2); P = 1 is the no-pipelining schedule (V = 1).
//  - The table is interleaved 1F1B's: micro-batches in groups of G (default P, G in [P, M],
//    M mod G = 0 or >= P); for each group, for each chunk c, for each micro-batch m of the group,
//    entry (m, c). Forward k runs table[k] (stage c * P + r); backward k runs micro-batch m_k on
//    chunk V - 1 - c_k, (m_k, c_k) = table[k].
//  - Rank r's warm-up runs W_r = min(M V, 2 (P - 1 - r) + (V - 1) G + 1) forwards alone: one more
//    than plain interleaving, so that the forward and the backward merged in a step never
//    depend on each other. Then each steady step merges forward k + W_r with backward k (an
//    OVERLAP_F_B, forward first); the cool-down runs the remaining backwards alone.
//  - P = 1: F0, then the forward of i + 1 merged with the backward of i, then the last backward.
// P2P steps come from the column scan (insert_p2p, Alignment::Auto).
#include <algorithm>
#include <string>
#include <vector>

#include "schedule/comm_insertion.hpp"
#include "schedule/errors.hpp"
#include "schedule/generators/generator.hpp"

namespace ppsched {

Schedule generate_combined_1f1b(const GenerateOptions& o) {
  const int P = o.pp, V = o.vpp, M = o.micro;
  auto refuse = [](const std::string& why) { throw InputError({}, "combined-1f1b: " + why); };
  if (P > 1 && V < 2)
    refuse("Megatron-LM refuses it: \"If enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be "
           "specified when pipeline_model_parallel_size > 1\" (give --vpp 2 or more)");
  if (P == 1 && V != 1) refuse("with --pp 1 (no pipelining) there are no virtual stages: give --vpp 1");
  if (P == 1 && o.group_size != 0) refuse("--group-size needs a pipeline (--pp 2 or more)");
  const int G = o.group_size != 0 ? o.group_size : P;
  if (P > 1 && (G < P || G > M))
    refuse("micro-batch groups of G = " + std::to_string(G) + (o.group_size == 0 ? " (the default, P)" : "") +
           ": the number of contiguous micro-batches in a virtual pipeline stage should range in [PP=" + std::to_string(P) +
           ", M=" + std::to_string(M) + "] (Megatron-LM's rule)");
  if (P > 1 && M % G != 0 && M % G < P)
    refuse("micro-batch groups of G = " + std::to_string(G) + " with --micro " + std::to_string(M) +
           ": the remainder of M (the total micro-batches) divided by N (number of contiguous micro-batches in a "
           "virtual pipeline stage) should be 0, or larger than or equal to the pipeline-parallel size, but it is " +
           std::to_string(M % G) + "; otherwise it introduces dependency bubbles in the pipeline (Megatron-LM's rule)");

  Schedule s;
  s.name = "combined-1f1b";
  s.ranks = P;
  s.stages = P * V;
  s.micro_batches = M;
  s.placement = Placement::loop(P, P * V);
  // The table: (micro, chunk) per virtual micro-batch.
  std::vector<std::pair<int, int>> table;
  table.reserve(static_cast<size_t>(M) * static_cast<size_t>(V));
  for (int first = 0; first < M; first += G) {
    const int n = std::min(G, M - first);
    for (int c = 0; c < V; ++c)
      for (int m = first; m < first + n; ++m) table.emplace_back(m, c);
  }
  const int T = static_cast<int>(table.size());
  for (int r = 0; r < P; ++r) {
    auto fwd = [&](int k) { return make_step(Op::FWD, table[static_cast<size_t>(k)].first, table[static_cast<size_t>(k)].second * P + r); };
    auto bwd = [&](int k) {
      return make_step(Op::BWD, table[static_cast<size_t>(k)].first, (V - 1 - table[static_cast<size_t>(k)].second) * P + r);
    };
    const int W = P == 1 ? 1 : std::min(T, 2 * (P - 1 - r) + (V - 1) * G + 1);
    Program prog;
    prog.reserve(static_cast<size_t>(2 * T));
    for (int k = 0; k < W; ++k) prog.push_back(fwd(k));
    for (int k = 0; k + W < T; ++k) prog.push_back(make_composite(Op::OVERLAP_F_B, {fwd(k + W), bwd(k)}));
    for (int k = std::max(0, T - W); k < T; ++k) prog.push_back(bwd(k));
    s.programs.push_back(std::move(prog));
  }
  return insert_p2p(std::move(s), Alignment::Auto);
}

}  // namespace ppsched
