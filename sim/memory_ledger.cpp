// The engine's memory ledger: the effects of composite steps, the resolver's answers, gathered
// parameters, workspaces and each rank's summary (sim/memory_ledger.hpp).
#include "sim/memory_ledger.hpp"

#include <algorithm>

namespace ppsched::des {

MemoryLedger::MemoryLedger(const Schedule& s, const CostModel& c, const DataParallelOptions& dp, bool tables,
                           bool timing_only, RunRecorder& rec)
    : s_(s), dp_(dp), rec_(rec), timing_only_(timing_only), gathers_(dp.fsdp && dp.degree > 1),
      memory_(c.memory_model(s.stages)) {
  const size_t R = static_cast<size_t>(s.ranks);
  mem_now_.assign(R, 0);
  act_now_.assign(R, 0);
  gathered_now_.assign(R, 0);
  workspace_now_.assign(R, 0);
  act_peaks_.resize(R);
  resident_ = memory_.resident_by_rank(s.ranks, s.stages, [&](int st) { return s.rank_of(st); }, dp);
  pending_produce_.assign(R, Delta{});
  released_step_.assign(R, -1);
  peaks_.resize(R);
  const size_t stages = static_cast<size_t>(std::max(s.stages, 0));
  if (tables) effects_table_.assign(stages * kOpCount * 2, Delta{-1, 0});
  if (gathers_) gathered_.resize(R);
}

Delta MemoryLedger::effects_of(int r, const Step& st) {
  if (!is_composite(st.op)) return leaf_effects(r, leaf_of(st));
  Delta d;
  for (const auto& sub : st.sub_steps()) d += leaf_effects(r, leaf_of(sub));
  return d;
}

Delta MemoryLedger::resolve(int r, const Leaf& st) {
  // The resolver reads only these three fields of a step.
  const auto& res = resolver_.of(r, make_step(st.op, st.micro, st.stage));
  return Delta{res.consumed_bytes, res.produced_bytes, res.consumed_activation, res.produced_activation};
}

int64_t MemoryLedger::largest_workspace(int r, const Action& a) const {
  const auto one = [&](Op op, int stage) -> int64_t {
    return is_backward_input_side(op) && stage >= 0 ? memory_.workspace(stage) : 0;
  };
  if (!a.composite()) return one(a.op, step_at(s_, r, a.step_index).stage);
  int64_t w = 0;
  for (const auto& sub : step_at(s_, r, a.step_index).sub_steps()) w = std::max(w, one(sub.op, sub.stage));
  return w;
}

// --fsdp over N > 1 replicas: an FSDP_UNSHARD's gathered parameters (the (N-1)/N of the
// stage's bytes.params the rank does not hold; of a one-stage schedule from a network, the
// FSDP2 peak of two wrapped units, MemoryModel::gathered) are live from its end to the start
// of the stage's FSDP_RESHARD, as the checks count them (checkers/caches.cpp).
void MemoryLedger::gather(int r, const Leaf& st, Delta& mem) {
  const StepTypeInfo& i = info(st.op);
  if (i.collective != CollectiveScope::DataParallel || st.stage < 0) return;
  auto& held = gathered_[static_cast<size_t>(r)];
  const int64_t bytes = memory_.gathered(st.stage, dp_);
  if (i.collective_kind == CollectiveKind::AllGather && held.insert(st.stage).second) {
    mem.produced += bytes;
    gathered_now_[static_cast<size_t>(r)] += bytes;
  }
  if (i.collective_kind == CollectiveKind::Release && held.erase(st.stage)) {
    mem.consumed += bytes;
    gathered_now_[static_cast<size_t>(r)] -= bytes;
  }
}

void MemoryLedger::summarize(int r, RankSummary& rs) const {
  const size_t ri = static_cast<size_t>(r);
  const Peak& pk = peaks_[ri];
  rs.peak_memory_bytes = resident_[ri].total() + pk.bytes;
  rs.peak_memory_time_ms = pk.time;
  rs.peak_memory_step = pk.step;
  rs.memory.weights_bytes = resident_[ri].weights;
  rs.memory.grads_bytes = resident_[ri].grads;
  rs.memory.optimizer_bytes = resident_[ri].optimizer;
  rs.memory.activations_peak_bytes = act_peaks_[ri].bytes;
  rs.memory.activations_peak_time_ms = act_peaks_[ri].time;
  rs.memory.at_peak_activations_bytes = pk.activations - pk.workspace;
  rs.memory.at_peak_gathered_bytes = pk.gathered;
  rs.memory.at_peak_workspace_bytes = pk.workspace;
  rs.memory.at_peak_buffers_bytes = pk.bytes - pk.activations - pk.gathered;
}

}  // namespace ppsched::des
