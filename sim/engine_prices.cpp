// What an action costs in the engine: compute durations, and the ring and tree formulas of the
// pipeline's and the data-parallel group's collectives (sim/engine_prices.hpp).
#include "sim/engine_prices.hpp"

#include <algorithm>
#include <cmath>

namespace ppsched::des {

ActionPrices::ActionPrices(const Schedule& s, const CostModel& c, const CheckOptions& check, bool tables)
    : s_(s), c_(c), check_(check), fsdp2_units_(fsdp2_per_unit(s, c, check.dp)), by_micro_(c.varies_by_micro()) {
  if (tables && !by_micro_) {
    const size_t stages = static_cast<size_t>(std::max(s.stages, 0));
    compute_table_.assign((stages + 1) * kOpCount, -1.0);
    payload_table_.assign((stages + 1) * kOpCount, -1.0);
  }
}

double ActionPrices::duration(const Step& st) {
  if (is_overlap(st.op)) {
    double a = st.sub_steps().size() > 0 ? duration(st.sub_steps()[0]) : 0.0;
    double b = st.sub_steps().size() > 1 ? duration(st.sub_steps()[1]) : 0.0;
    // Both run together: the shorter one is hidden by `overlap_efficiency` (1 = fully).
    return std::max(a, b) + (1.0 - c_.overlap_efficiency) * std::min(a, b);
  }
  return duration(leaf_of(st));
}

// ---- MoE phases -------------------------------------------------------------------------------
const StreamTimeline* ActionPrices::streams(const Step& st, int r) {
  if (c_.moe.stages.empty()) return nullptr;
  const bool overlap = is_overlap(st.op);
  const Step* subs[2] = {&st, nullptr};
  if (overlap) {
    if (st.sub_steps().empty()) return nullptr;
    subs[0] = &st.sub_steps()[0];
    subs[1] = st.sub_steps().size() > 1 ? &st.sub_steps()[1] : nullptr;
  }
  bool any = false;
  for (const Step* x : subs) any = any || (x && c_.moe.stage(x->stage) && phase_part(info(x->op).compute) >= 0);
  if (!any) return nullptr;
  std::array<int32_t, 7> key{r, -1, -1, -1, -1, -1, -1};
  for (int k = 0; k < 2; ++k)
    if (subs[k]) {
      key[static_cast<size_t>(1 + 3 * k)] = static_cast<int32_t>(subs[k]->op);
      key[static_cast<size_t>(2 + 3 * k)] = subs[k]->stage;
      key[static_cast<size_t>(3 + 3 * k)] = by_micro_ ? subs[k]->micro : -1;
    }
  if (const auto it = timelines_.find(key); it != timelines_.end()) return &it->second;
  std::vector<std::vector<TimedPhase>> chains;
  for (const Step* x : subs) {
    if (!x) continue;
    const double ms = duration(leaf_of(*x));
    std::vector<TimedPhase>& chain = chains.emplace_back();
    phase_scratch_.clear();
    if (const MoeStage* m = c_.moe.stage(x->stage)) expand_phases(x->op, *m, phase_scratch_, c_.moe.delay_wgrad);
    if (phase_scratch_.empty()) {
      // A step without phases (a dense stage's) runs whole on the compute stream.
      if (ms > 0) chain.push_back({whole_step_phase(x->op), ms});
      continue;
    }
    for (const PhaseItem& it : phase_scratch_) {
      // A delayed weight gradient's phases are priced as the split backward's halves.
      const double of = it.part < 0 ? ms : c_.compute(part_kind(static_cast<PhasePart>(it.part))).at(x->stage, x->micro);
      chain.push_back({it, it.phase.stream == Stream::Comm ? a2a_ms(it.bytes, r) : it.share * of});
    }
  }
  return &timelines_.emplace(key, run_streams(chains, c_.moe.contention)).first->second;
}

double ActionPrices::a2a_ms(double bytes, int r) const {
  const int ep = std::max(c_.moe.ep, 1);
  if (ep <= 1 || !(bytes > 0)) return 0.0;
  if (c_.moe.a2a) return c_.moe.a2a->transfer_ms(bytes);
  const DeviceMesh mesh = check_.dp.mesh(s_.ranks);
  const int per_node = std::max(c_.links.ranks_per_node, 1);
  // The first min(ep, dp) replicas of pipeline rank r; past the data-parallel degree the group
  // takes tensor-parallel peers, which share r's node (Megatron puts TP innermost).
  const int replicas = std::min(ep, std::max(check_.dp.degree, 1));
  const int node = mesh.global_rank(0, r) / per_node;
  int inside = ep - replicas;  // the tensor-parallel peers
  for (int k = 0; k < replicas; ++k) inside += mesh.global_rank(k, r) / per_node == node;
  const int outside = ep - inside;
  const double per_peer = bytes / (ep - 1);
  const auto over = [&](const Link& l, int peers) {
    if (peers <= 0) return 0.0;
    const double bw = l.bandwidth_GBps && *l.bandwidth_GBps > 0 ? *l.bandwidth_GBps * 1e9 : 0.0;
    return (bw > 0 ? peers * per_peer / bw * 1e3 : 0.0) + l.latency_ms;
  };
  return std::max(over(c_.links.intra_node, inside - 1), over(c_.links.inter_node, outside));
}

// ---- pipeline collectives ---------------------------------------------------------------------
double ActionPrices::collective_bytes(Op op, int stage) const {
  switch (info(op).collective_bytes) {
    case CollectiveBytes::TiedParams: return c_.tied_param_bytes;
    case CollectiveBytes::TowerParams: return c_.tower_param_bytes;
    // A replica sync adds up the stage's gradients, as many bytes as its parameters.
    case CollectiveBytes::StageGrads: return stage >= 0 ? c_.param_bytes.at(stage, 0) : 0.0;
    case CollectiveBytes::None: break;
  }
  return 0;
}

// Ring formulas over the group's slowest link: all-reduce 2(n-1)/n * B/bw + 2(n-1) * lat;
// broadcast (pipelined ring) B/bw + (n-1) * lat. Tree: log2(n) rounds of B/bw + lat.
double ActionPrices::collective_ms(Op op, int stage, const std::vector<int32_t>& members) const {
  const size_t n = members.size();
  if (n <= 1) return 0.0;
  double lat = 0, inv_bw = 0;
  for (size_t i = 0; i < n; ++i) {
    const Link& l = c_.link(global(members[i]), global(members[(i + 1) % n]));
    lat = std::max(lat, l.latency_ms);
    if (l.bandwidth_GBps && *l.bandwidth_GBps > 0) inv_bw = std::max(inv_bw, 1e3 / (*l.bandwidth_GBps * 1e9));
  }
  const double B = collective_bytes(op, stage);
  const bool reduce = info(op).collective_kind == CollectiveKind::AllReduce;
  const double dn = static_cast<double>(n);
  if (c_.collectives == CollectiveAlgorithm::Tree) {
    double rounds = std::ceil(std::log2(dn)) * (reduce ? 2.0 : 1.0);
    return rounds * (B * inv_bw + lat);
  }
  if (reduce) return 2.0 * (dn - 1) / dn * B * inv_bw + 2.0 * (dn - 1) * lat;
  return B * inv_bw + (dn - 1) * lat;
}

// ---- data parallelism ---------------------------------------------------------------------
// Pipeline rank r's DP group is {mesh.global_rank(k, r) : k < N}, ascending in k in either mesh
// order; ranks_per_node consecutive global ranks share a node, so the ring stays inside one
// node exactly when its first and last member do. Any hop across nodes runs the whole ring
// at the inter-node link.
bool ActionPrices::dp_ring_inter_node(int r) const {
  const DataParallelOptions& dp = check_.dp;
  if (dp.degree <= 1) return false;
  const int per_node = std::max(c_.links.ranks_per_node, 1);
  const DeviceMesh mesh = dp.mesh(s_.ranks);
  return mesh.global_rank(0, r) / per_node != mesh.global_rank(dp.degree - 1, r) / per_node;
}

// The DP-group collective of an FSDP_* step (0 for any other step, and for one replica):
// B = the stage's bytes.params, n = the DP degree, over the ring's link (ring_ms). Without
// a pipeline, from a model's FSDP2 units, the forwards and backwards move the parameters
// unit by unit instead (fsdp2_pass) and the FSDP_* steps move nothing.
double ActionPrices::dp_collective_ms(const Leaf& st) const {
  const StepTypeInfo& i = info(st.op);
  if (i.collective != CollectiveScope::DataParallel || st.stage < 0 || st.stage >= s_.stages || fsdp2_units_) return 0.0;
  return ring_ms(check_.dp.effective(i.collective_kind), c_.payload_bytes(st.op, st.stage, st.micro), s_.rank_of(st.stage));
}

// A collective of `kind` moving B bytes over the DP group of rank r (n = the DP degree), over
// the ring's link:
//   all-reduce (REDUCE_GRAD without --fsdp)  2(n-1)/n B/bw + 2(n-1) lat (tree: 2 ceil(log2 n)
//                                            rounds of B/bw + lat, as NCCL's tree all-reduce)
//   reduce-scatter (REDUCE_GRAD, --fsdp) and all-gather (UNSHARD, --fsdp)
//                                            (n-1)/n B/bw + (n-1) lat (NCCL runs both as rings)
//   UNSHARD and RESHARD without --fsdp, RESHARD with it: nothing to move.
double ActionPrices::ring_ms(CollectiveKind kind, double B, int r) const {
  if (kind == CollectiveKind::None || kind == CollectiveKind::Release) return 0.0;
  const Link& l = dp_ring_inter_node(r) ? c_.links.inter_node : c_.links.intra_node;
  const double inv_bw = l.bandwidth_GBps && *l.bandwidth_GBps > 0 ? 1e3 / (*l.bandwidth_GBps * 1e9) : 0.0;
  const double n = static_cast<double>(check_.dp.degree);
  if (kind == CollectiveKind::AllReduce) {
    if (c_.collectives == CollectiveAlgorithm::Tree) return 2.0 * std::ceil(std::log2(n)) * (B * inv_bw + l.latency_ms);
    return 2.0 * (n - 1) / n * B * inv_bw + 2.0 * (n - 1) * l.latency_ms;
  }
  return (n - 1) / n * B * inv_bw + (n - 1) * l.latency_ms;
}

// FSDP2 without a pipeline (fsdp2_units_): what a forward, a backward or a half of a split
// one runs on the communication lane beside its compute (sim/fsdp2_timing.hpp); for any
// other step, nothing.
// Walked once per (compute kind, priced time): a pass costs O(layers).
Fsdp2Pass ActionPrices::fsdp2_pass(const Leaf& st) const {
  if (!fsdp2_units_ || st.stage != 0) return {};
  const ComputeKind kind = info(st.op).compute;
  if (kind != ComputeKind::Forward && kind != ComputeKind::Backward && kind != ComputeKind::BackwardInput &&
      kind != ComputeKind::BackwardWeight)
    return {};
  const double ms = c_.compute_ms(st.op, st.stage, st.micro);
  const auto key = std::make_pair(static_cast<uint8_t>(kind), ms);
  if (const auto it = fsdp2_passes_.find(key); it != fsdp2_passes_.end()) return it->second;
  const int r = s_.rank_of(0);
  const auto gather = [&](int64_t b) { return ring_ms(CollectiveKind::AllGather, static_cast<double>(b), r); };
  const auto reduce = [&](int64_t b) { return ring_ms(CollectiveKind::ReduceScatter, static_cast<double>(b), r); };
  const auto& units = c_.fsdp_units;
  const auto& layers = c_.fsdp_layers;
  const Fsdp2Pass pass =
      kind == ComputeKind::Forward ? fsdp2_forward(units, layers, ms, gather)
      : kind == ComputeKind::Backward ? fsdp2_backward(units, layers, ms, Fsdp2BackwardPart::Whole, gather, reduce)
      : kind == ComputeKind::BackwardInput ? fsdp2_backward(units, layers, ms, Fsdp2BackwardPart::Input, gather, reduce)
                                           : fsdp2_backward(units, layers, ms, Fsdp2BackwardPart::Weight, gather, reduce);
  return fsdp2_passes_.emplace(key, pass).first->second;
}

}  // namespace ppsched::des
