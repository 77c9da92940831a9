#include "sim/tower_on_stage0.hpp"

#include <algorithm>

namespace ppsched {
namespace {

// v with `factor * extra` added on stage 0. The value is first written out per stage (and,
// when either side varies by micro-batch, per micro on every stage, repeating a row's single
// value), so that the other stages keep exactly what they had.
void add_on_stage0(StageValue& v, const StageValue& extra, double factor, int stages) {
  const size_t n = static_cast<size_t>(std::max(stages, 1));
  size_t micros = 1;
  for (const auto& row : v.rows) micros = std::max(micros, row.size());
  for (const auto& row : extra.rows) micros = std::max(micros, row.size());
  std::vector<std::vector<double>> rows(n, std::vector<double>(micros, 0.0));
  for (size_t s = 0; s < n; ++s)
    for (size_t m = 0; m < micros; ++m) rows[s][m] = v.at(static_cast<int>(s), static_cast<int>(m));
  for (size_t m = 0; m < micros; ++m) rows[0][m] += factor * extra.at(0, static_cast<int>(m));
  v.rows = std::move(rows);
}

}  // namespace

CostModel with_tower_on_stage0(const CostModel& c, int stages, Tower tower) {
  if (tower == Tower::None) return c;
  CostModel out = c;
  add_on_stage0(out.fwd, c.tower_fwd, 1.0, stages);
  if (tower == Tower::Trainable) {
    add_on_stage0(out.bwd, c.tower_grad_bwd, 1.0, stages);
    add_on_stage0(out.bwd_input, c.tower_grad_bwd, 0.5, stages);
    add_on_stage0(out.bwd_weight, c.tower_grad_bwd, 0.5, stages);
    add_on_stage0(out.kept_activation_bytes, StageValue::scalar(c.tower_graph_bytes), 1.0, stages);
  }
  out.source = c.source + "; MPipe tower (" + std::string(to_string(tower)) + ") on stage 0";
  return out;
}

Tower network_tower(const std::vector<const Schedule*>& schedules) {
  Tower t = Tower::None;
  for (const Schedule* s : schedules) {
    if (!s->mpipe) continue;
    if (s->mpipe->tower == Tower::Trainable) return Tower::Trainable;
    if (s->mpipe->tower == Tower::Frozen) t = Tower::Frozen;
  }
  return t;
}

}  // namespace ppsched
