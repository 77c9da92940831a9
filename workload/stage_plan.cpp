#include "workload/stage_plan.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "schedule/errors.hpp"

namespace ppsched {
namespace {

int64_t checked(double v, const std::string& what, size_t stage) {
  if (!std::isfinite(v) || v > kMaxLayerBytes * 64)
    throw InputError({}, "the " + what + " of stage " + std::to_string(stage) + " is over the limit of 2^56 bytes");
  return static_cast<int64_t>(std::llround(v));
}

// The layers of each distinct sequence length, and per micro-batch (in micro order) the list
// its figures come from: one entry when every micro-batch has the same length.
struct Variants {
  std::vector<std::vector<Layer>> lists;
  std::vector<const std::vector<Layer>*> per_micro;
};
// Figures are kept per stage and per micro-batch length: bounded like a generated schedule's
// stages x micro-batches (README "Limits").
Variants variants(const Workload& net, size_t stages) {
  constexpr size_t kMaxFigures = size_t{1} << 21;
  const size_t lengths = net.training.seq_lens.size();
  if (lengths > 1 && lengths * stages > kMaxFigures)
    throw InputError({}, std::to_string(lengths) + " per-micro-batch sequence lengths x " + std::to_string(stages) +
                             " stages is over the limit of 2097152 per-stage figures (README \"Limits\")");
  Variants v;
  std::map<int64_t, size_t> seen;
  std::vector<size_t> which;
  for (int64_t s : net.training.seq_lens) {
    auto it = seen.find(s);
    if (it == seen.end()) {
      it = seen.emplace(s, v.lists.size()).first;
      v.lists.push_back(net.layers(s));
    }
    which.push_back(it->second);
  }
  if (which.size() <= 1) which.resize(1, 0);
  for (size_t k : which) v.per_micro.push_back(&v.lists[k]);
  return v;
}

// Where a stage stands with a table another layer owns (Layer::uses_embedding_params,
// uses_head_params): whether its owner is on the stage, and the copy a user there needs
// (0: none; several users share one copy).
struct TableOnStage {
  bool owner = false;
  double used = 0;
  bool held() const { return owner || used > 0; }
};
constexpr std::pair<LayerKind, int64_t Layer::*> kTables[] = {{LayerKind::Embedding, &Layer::uses_embedding_params},
                                                             {LayerKind::Head, &Layer::uses_head_params}};
TableOnStage table_on_stage(const std::vector<Layer>& layers, const std::vector<std::pair<int32_t, double>>& parts,
                            LayerKind owner, int64_t Layer::*uses) {
  TableOnStage t;
  for (auto [i, w] : parts) {
    const Layer& l = layers[static_cast<size_t>(i)];
    t.owner = t.owner || (l.kind == owner && l.params > 0);
    t.used = std::max(t.used, w * static_cast<double>(l.*uses));
  }
  return t;
}

// The units FSDP2 wraps on a stage of `weight` x each listed layer, as torchtitan's
// apply_fsdp_to_decoder wraps them (torchtitan/distributed/fsdp.py): fully_shard on the
// embedding, on [norm, lm_head] (reshard_after_forward only under the "always" policy: kept
// gathered by default), on each transformer block; a tied embedding and head are one unit
// [tok_embeddings, norm, lm_head], kept gathered too. A table a layer uses whose owner is not on
// the stage is a copy in that layer's unit.
std::vector<WrappedUnit> wrapped_units(const std::vector<Layer>& layers, const std::vector<std::pair<int32_t, double>>& parts) {
  std::vector<WrappedUnit> units;
  std::vector<double> params;
  int embedding = -1, tail = -1;  // the embedding's unit, the norm + head unit
  bool tied = false;              // a head on the stage uses the embedding's table
  std::vector<int> unit_of_part;
  for (auto [i, w] : parts) {
    const Layer& l = layers[static_cast<size_t>(i)];
    int unit = -1;
    if (l.kind == LayerKind::Embedding) unit = embedding;
    else if (pinned_last(l.kind)) unit = tail;
    if (unit < 0) {
      unit = static_cast<int>(units.size());
      units.push_back({{}, 0, pinned_last(l.kind)});
      params.push_back(0);
      if (l.kind == LayerKind::Embedding) embedding = unit;
      else if (pinned_last(l.kind)) tail = unit;
    }
    units[static_cast<size_t>(unit)].layers.push_back(i);
    unit_of_part.push_back(unit);
    params[static_cast<size_t>(unit)] += w * static_cast<double>(l.params);
    tied = tied || (l.kind == LayerKind::Head && l.uses_embedding_params > 0);
  }
  // The copies of tables whose owner is elsewhere, in the unit of the layer that needs the most.
  for (auto [owner, uses] : kTables) {
    if (table_on_stage(layers, parts, owner, uses).owner) continue;
    double most = 0;
    int unit = -1;
    for (size_t k = 0; k < parts.size(); ++k)
      if (const double used = parts[k].second * static_cast<double>(layers[static_cast<size_t>(parts[k].first)].*uses);
          used > most)
        most = used, unit = unit_of_part[k];
    if (unit >= 0) params[static_cast<size_t>(unit)] += most;
  }
  // A tied head with its embedding on the stage: one unit, at the embedding's place, kept.
  if (tied && embedding >= 0 && tail >= 0) {
    WrappedUnit& e = units[static_cast<size_t>(embedding)];
    const WrappedUnit& t = units[static_cast<size_t>(tail)];
    e.layers.insert(e.layers.end(), t.layers.begin(), t.layers.end());
    e.kept_gathered = true;
    params[static_cast<size_t>(embedding)] += params[static_cast<size_t>(tail)];
    units.erase(units.begin() + tail);
    params.erase(params.begin() + tail);
  }
  for (size_t u = 0; u < units.size(); ++u) units[u].params = std::llround(params[u]);
  return units;
}

// Fills one stage from `weight` x each listed layer (a fraction for plan_fraction).
void add_layers(StageFigures& st, const Workload& net, const std::vector<const std::vector<Layer>*>& per_micro,
                const std::vector<std::pair<int32_t, double>>& parts, bool last_stage, size_t index) {
  const BytesPerParam bpp = net.training.bytes_per_param();
  const std::vector<Layer>& first = *per_micro.front();
  double params = 0;
  for (auto [i, w] : parts) params += w * static_cast<double>(first[static_cast<size_t>(i)].params);
  for (auto [owner, uses] : kTables)
    if (const TableOnStage t = table_on_stage(first, parts, owner, uses); !t.owner) params += t.used;
  st.params = checked(params, "parameter count", index);
  st.weight_bytes = checked(params * bpp.weights, "weight bytes", index);
  st.grad_bytes = checked(params * bpp.grads, "gradient bytes", index);
  st.optimizer_bytes = checked(params * bpp.optimizer, "optimizer bytes", index);
  st.fsdp_units = wrapped_units(first, parts);
  for (const std::vector<Layer>* layers : per_micro) {
    double f = 0, bi = 0, bw = 0, act = 0, wg = 0, ws = 0, out = 0;
    for (auto [i, w] : parts) {
      const Layer& l = (*layers)[static_cast<size_t>(i)];
      f += w * l.fwd_flops;
      bi += w * l.bwd_input_flops;
      bw += w * l.bwd_weight_flops;
      act += w * static_cast<double>(l.activation_bytes);
      wg += w * static_cast<double>(l.weight_grad_bytes);
      // One layer is recomputed at a time: the stage's workspace is its largest layer's.
      ws = std::max(ws, w >= 1 ? static_cast<double>(l.workspace_bytes) : w * static_cast<double>(l.workspace_bytes));
      out = static_cast<double>(l.output_bytes);
    }
    st.fwd_flops.push_back(f);
    st.bwd_input_flops.push_back(bi);
    st.bwd_weight_flops.push_back(bw);
    st.fwd_ms.push_back(compute_ms(net.device, f, RateKind::Fwd));
    const double input_ms = compute_ms(net.device, bi, RateKind::BwdInput);
    const double weight_ms = compute_ms(net.device, bw, RateKind::BwdWeight);
    const double whole_ms = std::round((input_ms + weight_ms) * 1e3) / 1e3;
    st.bwd_ms.push_back(whole_ms);
    const auto& split = index == 0 ? net.device.split_first : net.device.split_other;
    st.bwd_input_ms.push_back(split ? std::round(split->input * whole_ms * 1e3) / 1e3 : input_ms);
    st.bwd_weight_ms.push_back(split ? std::round(split->weight * whole_ms * 1e3) / 1e3 : weight_ms);
    st.activation_bytes.push_back(checked(act, "kept activation bytes", index));
    st.weight_grad_bytes.push_back(checked(wg, "weight-gradient bytes", index));
    st.workspace_bytes.push_back(checked(ws, "recomputation workspace", index));
    st.boundary_bytes.push_back(last_stage ? 0 : checked(out, "boundary bytes", index));
  }
}

}  // namespace

double compute_ms(const Device& d, double flops) {
  const double ms = flops / d.effective_flops() * 1e3;
  return std::round(ms * 1e3) / 1e3;
}

double compute_ms(const Device& d, double flops, RateKind kind) {
  const auto& f = d.fitted[static_cast<size_t>(kind)];
  if (!f) return compute_ms(d, flops);
  // A stage without work of this kind takes no step time (no overhead either).
  const double ms = flops > 0 ? f->overhead_ms + flops / f->flops_per_s * 1e3 : 0.0;
  return std::round(ms * 1e3) / 1e3;
}

StagePlan plan_stages(const Workload& net, const Layout& layout) {
  const Variants v = variants(net, layout.stages.size());
  const auto& per_micro = v.per_micro;
  StagePlan plan;
  plan.micro_variants = static_cast<int>(per_micro.size());
  const size_t n = layout.stages.size();
  for (size_t s = 0; s < n; ++s) {
    StageFigures st;
    st.layers = layout.stages[s];
    std::vector<std::pair<int32_t, double>> parts;
    for (int32_t i : st.layers) parts.emplace_back(i, 1.0);
    add_layers(st, net, per_micro, parts, s + 1 == n, s);
    // An empty stage passes its input on unchanged.
    if (st.layers.empty() && s > 0 && s + 1 < n) st.boundary_bytes = plan.stages.back().boundary_bytes;
    plan.stages.push_back(std::move(st));
  }
  // The tables held by more than one stage, for the ranks that hold several of those stages.
  const std::vector<Layer>& first = *per_micro.front();
  for (auto [owner, uses] : kTables) {
    SharedTable table;
    for (size_t s = 0; s < n; ++s) {
      std::vector<std::pair<int32_t, double>> parts;
      for (int32_t i : layout.stages[s]) parts.emplace_back(i, 1.0);
      const TableOnStage t = table_on_stage(first, parts, owner, uses);
      if (t.held()) table.stages.push_back(static_cast<int>(s));
      table.params = std::max(table.params, static_cast<int64_t>(t.used));
    }
    if (table.stages.size() > 1 && table.params > 0) plan.shared.push_back(std::move(table));
  }
  return plan;
}

StagePlan plan_fraction(const Workload& net, int stages) {
  const Variants v = variants(net, static_cast<size_t>(std::max(stages, 1)));
  const auto& per_micro = v.per_micro;
  StagePlan plan;
  plan.micro_variants = static_cast<int>(per_micro.size());
  const size_t count = per_micro.front()->size();
  const double w = 1.0 / stages;
  std::vector<std::pair<int32_t, double>> parts;
  for (size_t i = 0; i < count; ++i) parts.emplace_back(static_cast<int32_t>(i), w);
  // A stage that is not the last (stage 0 stands for all of them), then the last.
  for (int s : stages > 1 ? std::vector<int>{0, stages - 1} : std::vector<int>{0}) {
    StageFigures st;
    for (size_t i = 0; i < count; ++i) st.layers.push_back(static_cast<int32_t>(i));
    add_layers(st, net, per_micro, parts, s + 1 == stages, static_cast<size_t>(s));
    plan.stages.push_back(std::move(st));
  }
  return plan;
}

}  // namespace ppsched
