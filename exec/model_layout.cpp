#include "exec/model_layout.hpp"

#include <algorithm>

#include "exec/model_description.hpp"
#include "schedule/errors.hpp"
#include "workload/layout.hpp"

namespace ppsched::exec {

int default_layers(ModelKind kind, int stages, int tower_layers) {
  int layers = std::max(4, stages);
  // The even split gives stage 0 ceil(E / S) of the E = L (+ 2 for gpt: the embedding and the
  // head count one each) effective layers, the embedding among them; the tower takes its first
  // T units and must leave one: ceil(E / S) >= T + 1, i.e. E >= T S + 1.
  const int pinned = kind == ModelKind::Gpt ? 2 : 0;
  if (tower_layers > 0) layers = std::max(layers, tower_layers * stages + 1 - pinned);
  return layers;
}

ModelLayout make_layout(const ModelConfig& given, int stages, int tower_layers) {
  if (stages < 1) throw InputError({}, "the model needs at least one stage");
  ModelConfig m = given;
  if (m.kind == ModelKind::StageModules) {
    if (!m.layout.empty())
      throw InputError({}, "--layout: the stage modules (--stage-module) already say what each stage holds");
    // One unit per stage: the stage's TorchScript module; no tower (agreement refuses one).
    if (tower_layers != 0)
      throw InputError({}, "--stage-module: an MPipe tower cannot be cut out of TorchScript stages (--tower-layers " +
                               std::to_string(tower_layers) + "); generate mpipe-transpose with --tower none");
    ModelLayout l;
    l.stages = stages;
    l.units = stages;
    for (int s = 0; s < stages; ++s) l.stage_units.push_back({s});
    return l;
  }
  if (tower_layers < 0) throw InputError({}, "--tower-layers must be >= 0");
  if (!m.layout.empty()) {
    // With --layout and no --layers, the layout's blocks are the model's.
    const int64_t placed = layout_body_layers(m.layout, int64_t{1} << 20, "--layout");
    if (m.layers == 0) m.layers = static_cast<int>(placed);
    if (placed != m.layers)
      throw InputError({}, "--layout puts " + std::to_string(placed) + " blocks on the stages, but --layers is " +
                               std::to_string(m.layers));
  }
  if (m.layers == 0) m.layers = default_layers(m.kind, stages, tower_layers);
  if (m.layers < stages)
    throw InputError({}, "--layers " + std::to_string(m.layers) + " cannot be split over " + std::to_string(stages) +
                             " virtual stages: every stage needs at least one block");
  // The built-in model as a model description, laid out by the planner's choice
  // (workload/layout.hpp), so that the executor runs the layout that `ppsched simulate` and
  // `calibrate` price: torchtitan's even split, or --layout.
  const Workload net = builtin_workload(m, m.layers);
  const std::vector<Layer> layers = net.layers();
  const Layout split = workload_layout(net, layers, stages, m.layout, "--layout");
  ModelLayout l;
  l.stages = stages;
  l.units = static_cast<int>(layers.size());
  for (size_t s = 0; s < split.stages.size(); ++s) {
    if (split.stages[s].empty())
      throw InputError({}, "--layout: stage " + std::to_string(s) + " holds no layer; the executor runs every stage, "
                               "so each needs at least one");
    l.stage_units.emplace_back(split.stages[s].begin(), split.stages[s].end());
  }
  if (m.kind == ModelKind::Gpt) {
    l.embedding_unit = 0;
    l.head_unit = m.layers + 1;
  }
  auto& s0 = l.stage_units[0];
  if (tower_layers >= static_cast<int>(s0.size())) {
    std::string names;
    for (int u : s0) names += (names.empty() ? "" : ", ") + unit_name(m, l, u);
    throw InputError({}, "--tower-layers " + std::to_string(tower_layers) + " would take every unit of stage 0 (" +
                             names + "); stage 0 must keep at least one. Use more --layers or fewer tower layers.");
  }
  l.tower_units.assign(s0.begin(), s0.begin() + tower_layers);
  s0.erase(s0.begin(), s0.begin() + tower_layers);
  return l;
}

std::string unit_name(const ModelConfig& m, const ModelLayout& l, int unit) {
  if (m.kind == ModelKind::StageModules) return "stage" + std::to_string(unit);
  if (m.kind == ModelKind::Gpt) {
    if (unit == l.embedding_unit) return "embedding";
    if (unit == l.head_unit) return "head";
    return "block" + std::to_string(unit - 1);
  }
  return "block" + std::to_string(unit);
}

}  // namespace ppsched::exec
