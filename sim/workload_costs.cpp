#include "sim/workload_costs.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "schedule/errors.hpp"
#include "schedule/text_format.hpp"
#include "workload/model_file.hpp"

namespace ppsched {
namespace {

// One value per stage (per micro-batch when the plan has variants), or one number when every
// stage has the same: a file writes it as one number, as a user would.
template <class T>
StageValue stage_value(const StagePlan& plan, std::vector<T> StageFigures::*field) {
  StageValue v;
  v.given = true;
  bool same = true;
  for (const auto& st : plan.stages) {
    const auto& xs = st.*field;
    std::vector<double> row(xs.begin(), xs.end());
    if (row.size() > 1 && std::all_of(row.begin(), row.end(), [&](double x) { return x == row.front(); })) row.resize(1);
    same = same && row == (v.rows.empty() ? row : v.rows.front());
    v.rows.push_back(std::move(row));
  }
  if (same && !v.rows.empty()) v.rows.resize(1);
  return v;
}
StageValue stage_bytes(const StagePlan& plan, int64_t StageFigures::*field) {
  StageValue v;
  v.given = true;
  for (const auto& st : plan.stages) v.rows.push_back({static_cast<double>(st.*field)});
  if (std::all_of(v.rows.begin(), v.rows.end(), [&](const auto& r) { return r == v.rows.front(); })) v.rows.resize(1);
  return v;
}
bool any_positive(const StagePlan& plan, std::vector<int64_t> StageFigures::*field) {
  for (const auto& st : plan.stages)
    for (int64_t x : st.*field)
      if (x > 0) return true;
  return false;
}

// The platform sections a model file gives (its link, collectives, protocol, overlap and meta
// message size), each over the cost model's default.
void apply_platform(const Workload& net, CostModel& c) {
  if (net.links) c.links = *net.links;
  if (net.collectives) c.collectives = *net.collectives;
  if (net.protocol) c.protocol = *net.protocol;
  if (net.overlap_efficiency) c.overlap_efficiency = *net.overlap_efficiency;
  if (net.meta_bytes) c.meta_bytes = *net.meta_bytes;
}

// The MoE side of a laid-out model's costs: its expert parallelism, each stage's routed-expert
// parameter bytes, and each stage's MoE layers as phases (lowering/moe_phases.hpp): a layer's
// attention side (with the dense layers since the previous MoE layer) and its routed experts as
// shares of the stage's FLOPs of each kind, and its all-to-all bytes. The first sequence
// length's figures (shares of a step's time; the all-to-all bytes of that length).
void add_moe(const Workload& net, const StagePlan& plan, const std::vector<Layer>& layers, CostModel& c) {
  c.moe.ep = std::max(net.training.ep, 1);
  const BytesPerParam bpp = net.training.bytes_per_param();
  bool any = false;
  StageValue experts;
  experts.given = true;
  for (const StageFigures& st : plan.stages) {
    double expert_params = 0;
    std::array<double, kPhaseParts> total{};
    const auto parts = [](const Layer& l, bool expert) {
      const double f = expert ? l.expert_fwd_flops : l.fwd_flops - l.expert_fwd_flops;
      const double bi = expert ? l.expert_bwd_input_flops : l.bwd_input_flops - l.expert_bwd_input_flops;
      const double bw = expert ? l.expert_bwd_weight_flops : l.bwd_weight_flops - l.expert_bwd_weight_flops;
      return std::array<double, kPhaseParts>{f, bi + bw, bi, bw};
    };
    for (int32_t i : st.layers) {
      const Layer& l = layers[static_cast<size_t>(i)];
      expert_params += static_cast<double>(l.expert_params);
      const auto a = parts(l, false), b = parts(l, true);
      for (size_t k = 0; k < kPhaseParts; ++k) total[k] += a[k] + b[k];
    }
    MoeStage m;
    std::array<double, kPhaseParts> pending{};  // the compute since the previous MoE layer
    const auto share = [&](const std::array<double, kPhaseParts>& x) {
      std::array<float, kPhaseParts> out{};
      for (size_t k = 0; k < kPhaseParts; ++k) out[k] = total[k] > 0 ? static_cast<float>(x[k] / total[k]) : 0.0f;
      return out;
    };
    for (int32_t i : st.layers) {
      const Layer& l = layers[static_cast<size_t>(i)];
      const auto a = parts(l, false);
      for (size_t k = 0; k < kPhaseParts; ++k) pending[k] += a[k];
      if (!l.moe) continue;
      m.layers.push_back({share(pending), share(parts(l, true)), static_cast<double>(l.a2a_bytes)});
      pending = {};
    }
    m.after = share(pending);
    if (m.layers.empty()) m = MoeStage{};
    any = any || expert_params > 0 || !m.empty();
    experts.rows.push_back({std::round(expert_params * bpp.weights)});
    c.moe.stages.push_back(std::move(m));
  }
  if (!any) {
    c.moe.stages.clear();
    return;
  }
  if (std::all_of(experts.rows.begin(), experts.rows.end(), [&](const auto& r) { return r == experts.rows.front(); }))
    experts.rows.resize(1);
  c.expert_param_bytes = std::move(experts);
}

}  // namespace

CostModel costs_from_plan(const Workload& net, const StagePlan& plan, const std::vector<Layer>& layers, std::string source) {
  CostModel c;
  c.source = std::move(source);
  c.fwd = stage_value(plan, &StageFigures::fwd_ms);
  c.bwd_input = stage_value(plan, &StageFigures::bwd_input_ms);
  c.bwd_weight = stage_value(plan, &StageFigures::bwd_weight_ms);
  c.bwd = stage_value(plan, &StageFigures::bwd_ms);  // the whole backward (a split may cost more)
  const BytesPerParam bpp = net.training.bytes_per_param();
  // The MPipe tower: the first two body layers (a tower of the network's own layers in front
  // of stage 0). Recompute + backward on rank 0, the backward alone on an owner.
  double tower_f = 0, tower_b = 0, tower_params = 0, tower_kept = 0, hidden = 0;
  int taken = 0;
  for (const Layer& l : layers) {
    if (!is_body(l.kind) || taken == 2) continue;
    tower_f += l.fwd_flops;
    tower_b += l.bwd_input_flops + l.bwd_weight_flops;
    tower_params += static_cast<double>(l.params);
    tower_kept += static_cast<double>(l.activation_bytes);
    hidden = static_cast<double>(l.output_bytes);
    ++taken;
  }
  const double tf = compute_ms(net.device, tower_f), tg = compute_ms(net.device, tower_b);
  c.tower_fwd = StageValue::scalar(tf);
  c.tower_grad_bwd = StageValue::scalar(tg);
  c.tower_bwd = StageValue::scalar(std::round((tf + tg) * 1e3) / 1e3);
  c.data_load = StageValue::scalar(0.05);
  c.fsdp = StageValue::scalar(0);
  c.swap = StageValue::scalar(0);
  // Messages: the stage's output (its last layer's), both ways; a micro-batch of token ids.
  c.activation_bytes = stage_value(plan, &StageFigures::boundary_bytes);
  c.gradient_bytes = c.activation_bytes;
  const double tokens = static_cast<double>(net.training.seq_lens.front()) * static_cast<double>(net.training.micro_batch_size);
  c.data_bytes = 8 * tokens;
  c.features_bytes = c.feature_grad_bytes = hidden;
  c.tower_input_bytes = c.data_bytes;
  c.meta_bytes = 64;
  c.tower_param_bytes = std::round(tower_params * bpp.weights);
  // Tied parameters (the ALL_REDUCE of a tied embedding and head): the embedding's weights.
  c.tied_param_bytes = 0;
  for (const Layer& l : layers)
    if (l.kind == LayerKind::Head && l.uses_embedding_params > 0)
      c.tied_param_bytes = static_cast<double>(l.uses_embedding_params) * bpp.weights;
  c.param_bytes = stage_bytes(plan, &StageFigures::weight_bytes);
  c.links.intra_node = Link{0.005, 450.0};
  c.links.inter_node = Link{0.010, 50.0};
  c.links.ranks_per_node = 8;
  c.collectives = CollectiveAlgorithm::Ring;
  c.protocol.eager_threshold_bytes = 4.0 * 1024 * 1024;
  c.overlap_efficiency = 0;
  if (const auto usable = net.device.usable_memory_bytes()) {
    c.capacity_bytes = static_cast<double>(*usable);
    c.capacity_basis = human_bytes(*net.device.memory_bytes) + " device less a " +
                       human_bytes(net.device.memory_reserve_bytes) + " reserve";
  }
  c.kept_activation_bytes = stage_value(plan, &StageFigures::activation_bytes);
  c.weight_grad_bytes = stage_value(plan, &StageFigures::weight_grad_bytes);
  if (any_positive(plan, &StageFigures::workspace_bytes)) c.workspace_bytes = stage_value(plan, &StageFigures::workspace_bytes);
  c.weights_bytes = stage_bytes(plan, &StageFigures::weight_bytes);
  c.grads_bytes = stage_bytes(plan, &StageFigures::grad_bytes);
  c.optimizer_bytes = stage_bytes(plan, &StageFigures::optimizer_bytes);
  for (const SharedTable& t : plan.shared) {
    const double p = static_cast<double>(t.params);
    c.shared_weights.push_back({t.stages, {std::llround(p * bpp.weights), std::llround(p * bpp.grads), std::llround(p * bpp.optimizer)}});
  }
  // Without a pipeline FSDP2 gathers the model unit by unit (MemoryModel::fsdp_units).
  // Its layers' compute, in forward order, times how long FSDP2's collectives add to a forward
  // and a backward (sim/fsdp2_timing.hpp).
  if (plan.stages.size() == 1) {
    const std::vector<WrappedUnit>& units = plan.stages.front().fsdp_units;
    for (const WrappedUnit& u : units) {
      const double p = static_cast<double>(u.params);
      c.fsdp_units.push_back({std::llround(p * bpp.weights), u.kept_gathered, std::llround(p * bpp.grads)});
    }
    std::vector<std::pair<int32_t, int32_t>> layer_unit;  // (layer index, unit)
    for (size_t k = 0; k < units.size(); ++k)
      for (int32_t i : units[k].layers) layer_unit.emplace_back(i, static_cast<int32_t>(k));
    std::sort(layer_unit.begin(), layer_unit.end());
    for (auto [i, unit] : layer_unit) {
      const Layer& l = layers[static_cast<size_t>(i)];
      c.fsdp_layers.push_back({unit, compute_ms(net.device, l.fwd_flops, RateKind::Fwd),
                               compute_ms(net.device, l.bwd_input_flops, RateKind::BwdInput),
                               compute_ms(net.device, l.bwd_weight_flops, RateKind::BwdWeight)});
    }
  }
  c.tower_graph_bytes = tower_kept;
  c.tower_copy_bytes = c.tower_param_bytes;
  apply_platform(net, c);
  return c;
}

void price_tensor_parallel(WorkloadCosts& nc, const Links& links) {
  TensorParallelTime& out = nc.tensor_parallel;
  out = {};
  const int t = std::max(nc.workload.training.tp, 1);
  if (t <= 1) return;
  const Link& link = t <= links.ranks_per_node ? links.intra_node : links.inter_node;
  const auto one_ms = [&](double bytes) {
    return (t - 1) / static_cast<double>(t) * (link.transfer_ms(bytes) - link.latency_ms) + (t - 1) * link.latency_ms;
  };
  const auto round_us = [](double ms) { return std::round(ms * 1e3) / 1e3; };
  const std::vector<int64_t>& lens = nc.workload.training.seq_lens;
  bool any = false;
  for (StageFigures& st : nc.plan.stages) {
    // A stage's collectives each way at a sequence length `scale` times the first: the bytes in
    // proportion, the latency once per collective.
    const auto stage_ms = [&](double scale) {
      double f = 0, b = 0;
      for (int32_t i : st.layers) {
        const Layer& l = nc.layers[static_cast<size_t>(i)];
        f += l.tp_fwd_collectives * one_ms(scale * static_cast<double>(l.tp_collective_bytes));
        b += l.tp_bwd_collectives * one_ms(scale * static_cast<double>(l.tp_collective_bytes));
      }
      return std::pair{f, b};
    };
    const auto [f, b] = stage_ms(1.0);
    out.fwd_ms.push_back(f);
    out.bwd_ms.push_back(b);
    any = any || f > 0 || b > 0;
    for (size_t m = 0; m < st.fwd_ms.size(); ++m) {
      const double scale = st.fwd_ms.size() == lens.size() ? static_cast<double>(lens[m]) / static_cast<double>(lens[0]) : 1.0;
      const auto [fm, bm] = scale == 1.0 ? std::pair{f, b} : stage_ms(scale);
      st.fwd_ms[m] = round_us(st.fwd_ms[m] + fm);
      st.bwd_input_ms[m] = round_us(st.bwd_input_ms[m] + bm);
      st.bwd_ms[m] = round_us(st.bwd_ms[m] + bm);
    }
  }
  if (!any) return;
  nc.costs.fwd = stage_value(nc.plan, &StageFigures::fwd_ms);
  nc.costs.bwd_input = stage_value(nc.plan, &StageFigures::bwd_input_ms);
  nc.costs.bwd = stage_value(nc.plan, &StageFigures::bwd_ms);
}

bool apply_rank_time(CostModel& c, const Device& d, const Schedule& s) {
  if (d.rank_time.empty()) return true;
  if (d.rank_time.size() != static_cast<size_t>(s.ranks)) return false;
  const size_t stages = static_cast<size_t>(s.stages);
  // Every stage's row (a shorter table's last row stands for the rest), times factor(stage, micro).
  auto scale = [&](StageValue& v, auto factor) {
    if (v.rows.empty()) return;
    std::vector<std::vector<double>> rows(stages);
    for (size_t st = 0; st < stages; ++st) {
      rows[st] = v.rows[std::min(st, v.rows.size() - 1)];
      for (size_t m = 0; m < rows[st].size(); ++m) rows[st][m] = std::round(rows[st][m] * factor(st, m) * 1e6) / 1e6;
    }
    v.rows = std::move(rows);
  };
  auto of_rank = [&](size_t st) -> const std::array<double, 3>& {
    return d.rank_time[static_cast<size_t>(s.rank_of(static_cast<int>(st)))];
  };
  auto kind = [&](RateKind k) { return [&, k](size_t st, size_t) { return of_rank(st)[static_cast<size_t>(k)]; }; };
  // A whole backward: its halves' factors weighted by the halves' times (read before they scale).
  scale(c.bwd, [&](size_t st, size_t m) {
    const double i = c.bwd_input.at(static_cast<int>(st), static_cast<int>(m));
    const double w = c.bwd_weight.at(static_cast<int>(st), static_cast<int>(m));
    const auto& f = of_rank(st);
    return i + w > 0 ? (i * f[1] + w * f[2]) / (i + w) : f[1];
  });
  scale(c.fwd, kind(RateKind::Fwd));
  scale(c.bwd_input, kind(RateKind::BwdInput));
  scale(c.bwd_weight, kind(RateKind::BwdWeight));
  return true;
}

namespace {

// Per-stage per-micro tables: stages x sequence-length variants, bounded like the schedules.
void check_micro_tables(const Workload& net, int stages) {
  if (net.training.seq_lens.size() > 1 &&
      static_cast<int64_t>(stages) * static_cast<int64_t>(net.training.seq_lens.size()) > (int64_t{1} << 22))
    throw InputError(in_file(net.source), "per-micro sequence lengths over " + std::to_string(stages) +
                                              " stages make more than 2^22 per-stage values (README \"Limits\")");
}

WorkloadCosts laid_out(const Workload& net, std::vector<Layer> layers, Layout layout) {
  WorkloadCosts out;
  out.workload = net;
  out.layers = std::move(layers);
  out.layout = std::move(layout);
  out.plan = plan_stages(net, out.layout);
  out.costs = costs_from_plan(net, out.plan, out.layers, net.source.empty() ? net.name : net.source);
  add_moe(net, out.plan, out.layers, out.costs);
  return out;
}

}  // namespace

WorkloadCosts workload_costs(const Workload& net, int stages, const std::string& layout_text, const std::string& layout_where) {
  check_micro_tables(net, stages);
  std::vector<Layer> layers = net.layers();
  Layout layout = workload_layout(net, layers, stages, layout_text, layout_where);
  return laid_out(net, std::move(layers), std::move(layout));
}

WorkloadCosts workload_costs(const Workload& net, Layout layout) {
  check_micro_tables(net, static_cast<int>(layout.stages.size()));
  return laid_out(net, net.layers(), std::move(layout));
}

WorkloadCosts workload_costs(const Workload& net, const std::vector<int>& body_counts, const std::string& where) {
  const int stages = static_cast<int>(body_counts.size());
  check_micro_tables(net, stages);
  std::vector<Layer> layers = net.layers();
  Layout layout = counts_layout(std::vector<int64_t>(body_counts.begin(), body_counts.end()), layers, stages, where);
  return laid_out(net, std::move(layers), std::move(layout));
}

// ---- the embedded default ---------------------------------------------------------------------
// The default network (workload/default_workload.cpp) split over any stage count as equal
// fractions of its 32 layers; a 32000 x 4096 bf16 embedding (250 MiB) for the tied-parameter
// ALL_REDUCE, though the layers leave the embedding out; NVLink 4 inside a node of 8 GPUs
// (~450 GB/s per direction effective, ~5 us), 400 Gb/s InfiniBand NDR between nodes (~50 GB/s,
// ~10 us); ring collectives; eager threshold 4 MiB (NCCL's per-peer buffer); overlap
// efficiency 0 (two computes on one device take turns); DATA_LOAD 0.05 ms (a prefetched 32 KiB batch: one pinned host-to-device copy
// and launch overhead); FSDP and SWAP 0 (compute.FSDP is a fixed overhead each FSDP_* step adds
// to its data-parallel collective).

CostModel default_cost_model() { return default_cost_model(kDefaultCostStages); }

CostModel default_cost_model(int stages) {
  const int p = stages > 0 ? stages : kDefaultCostStages;
  const Workload net = default_workload();
  const StagePlan plan = plan_fraction(net, p);
  std::string source = format_text("default (7B-class transformer, %g of 32 layers per stage on %d stages, H100-class GPUs)",
                32.0 / p, p);
  CostModel c = costs_from_plan(net, plan, net.explicit_layers, source);
  // The plan holds one stage for all but the last; the messages differ on the last stage (it
  // sends nothing forward), so they get a row per stage: a few bytes a stage, where a plan of
  // every stage took ~1.5 KB each (2^20 declared stages ran out of memory).
  if (p > 2)
    for (StageValue* v : {&c.activation_bytes, &c.gradient_bytes})
      if (v->rows.size() == 2) {
        std::vector<std::vector<double>> rows(static_cast<size_t>(p), v->rows.front());
        rows.back() = v->rows.back();
        v->rows = std::move(rows);
      }
  c.tied_param_bytes = 32000.0 * 4096 * 2;
  return c;
}

}  // namespace ppsched
