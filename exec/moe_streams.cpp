#include "exec/moe_streams.hpp"

#include <string>

#include "schedule/step_types.hpp"

namespace ppsched::exec {

const char* a2a_name(A2aKind k) {
  switch (k) {
    case A2aKind::DispatchFwd: return "dispatch_fwd";
    case A2aKind::CombineFwd: return "combine_fwd";
    case A2aKind::DispatchBwd: return "dispatch_bwd";
    case A2aKind::CombineBwd: return "combine_bwd";
  }
  return "?";
}

StreamProgram moe_stream_program(const Schedule& s, const ModelConfig& m, const ModelLayout& l, bool ready_order) {
  StreamLowering low;
  low.ep = m.ep;
  for (int st = 0; st < s.stages; ++st) {
    MoeStage ms;
    const auto& units = l.stage_units[static_cast<size_t>(st % l.stages)];
    int blocks = 0;
    for (int u : units) blocks += u != l.embedding_unit && u != l.head_unit;
    // Shares only size the phases for the simulator; any positive split keeps every phase.
    for (int b = 0; b < blocks; ++b) {
      MoeLayerShare layer;
      layer.before.fill(0.5f / static_cast<float>(blocks));
      layer.experts.fill(0.5f / static_cast<float>(blocks));
      layer.a2a_bytes = static_cast<double>(m.micro_batch_size) * m.seq * m.topk * (m.hidden + 1) * 4.0;
      ms.layers.push_back(layer);
    }
    low.stages.push_back(std::move(ms));
  }
  StreamProgram p = lower_streams(s, low);
  if (!ready_order) return p;
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    int moved = -1;
    for (size_t i = 0; i < p.ranks[r].ops.size(); ++i) {
      const StreamOp& op = p.ranks[r].ops[i];
      if (op.kind != StreamOpKind::Collective || op.sub != 1) continue;
      move_to_stream(p, static_cast<int>(r), static_cast<int>(i), moved, "comm (second chain)");
      moved = static_cast<int>(p.ranks[r].streams.size()) - 1;
    }
  }
  return p;
}

StepAllToAlls moe_all_to_alls(const StreamProgram& p, int rank) {
  StepAllToAlls out;
  for (const StreamOp& op : p.ranks.at(static_cast<size_t>(rank)).ops) {
    if (op.kind != StreamOpKind::Collective) continue;
    const std::string head = op.name.substr(0, op.name.find(' '));
    for (const A2aKind k : {A2aKind::DispatchFwd, A2aKind::CombineFwd, A2aKind::DispatchBwd, A2aKind::CombineBwd})
      if (head == a2a_name(k)) out[op.step].emplace_back(op.sub, k);
  }
  return out;
}

}  // namespace ppsched::exec
