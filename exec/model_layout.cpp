#include "exec/model_layout.hpp"

#include <algorithm>

#include "model/errors.hpp"

namespace ppsched::exec {

int default_layers(ModelKind kind, int stages, int tower_layers) {
  int layers = std::max(4, stages);
  // Stage 0 holds ceil(L / S) blocks (+ the embedding for gpt); the tower takes its first T
  // units and must leave one: ceil(L / S) >= T + 1 - embedding, i.e. L >= (T - embedding) S + 1.
  const int embedding = kind == ModelKind::Gpt ? 1 : 0;
  if (tower_layers > embedding) layers = std::max(layers, (tower_layers - embedding) * stages + 1);
  return layers;
}

ModelLayout make_layout(const ModelConfig& given, int stages, int tower_layers) {
  if (stages < 1) throw InputError({}, "the model needs at least one stage");
  ModelConfig m = given;
  if (!m.stage_blocks.empty()) {
    // --layout: the blocks of each virtual stage, every stage at least one.
    if (m.kind == ModelKind::StageModules)
      throw InputError({}, "--layout: the stage modules (--stage-module) already say what each stage holds");
    if (static_cast<int>(m.stage_blocks.size()) != stages)
      throw InputError({}, "--layout gives the blocks of " + std::to_string(m.stage_blocks.size()) +
                               " stages, but the schedule has " + std::to_string(stages) + " virtual stages");
    long long sum = 0;
    for (size_t s = 0; s < m.stage_blocks.size(); ++s) {
      if (m.stage_blocks[s] < 1)
        throw InputError({}, "--layout: stage " + std::to_string(s) + " gets " + std::to_string(m.stage_blocks[s]) +
                                 " blocks; every stage needs at least one");
      sum += m.stage_blocks[s];
    }
    if (m.layers == 0 && sum <= 1 << 20) m.layers = static_cast<int>(sum);
    if (sum != m.layers)
      throw InputError({}, "--layout puts " + std::to_string(sum) + " blocks on the stages, but --layers is " +
                               std::to_string(m.layers));
  }
  if (m.layers == 0 && m.kind != ModelKind::StageModules) m.layers = default_layers(m.kind, stages, std::max(0, tower_layers));
  if (m.kind == ModelKind::StageModules) {
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
  if (m.layers < stages)
    throw InputError({}, "--layers " + std::to_string(m.layers) + " cannot be split over " + std::to_string(stages) +
                             " virtual stages: every stage needs at least one block");
  ModelLayout l;
  l.stages = stages;
  const bool gpt = m.kind == ModelKind::Gpt;
  const int first_block = gpt ? 1 : 0;
  l.units = m.layers + (gpt ? 2 : 0);
  l.stage_units.resize(static_cast<size_t>(stages));
  int next = 0;
  for (int s = 0; s < stages; ++s) {
    const int count = m.stage_blocks.empty() ? m.layers / stages + (s < m.layers % stages ? 1 : 0)
                                             : m.stage_blocks[static_cast<size_t>(s)];
    auto& units = l.stage_units[static_cast<size_t>(s)];
    if (gpt && s == 0) units.push_back(0);
    for (int k = 0; k < count; ++k) units.push_back(first_block + next++);
    if (gpt && s == stages - 1) units.push_back(m.layers + 1);
  }
  if (gpt) {
    l.embedding_unit = 0;
    l.head_unit = m.layers + 1;
  }
  if (tower_layers < 0) throw InputError({}, "--tower-layers must be >= 0");
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
