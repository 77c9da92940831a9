// One network for every schedule: a schedule without an MPipe layer still trains the MPipe
// tower, on stage 0, in front of the body (the way a plain pipeline holds an embedding or
// vision tower), so `ppsched compare` sets MPipe Transpose against the baselines on the same
// model and the same cost model.
#pragma once

#include <vector>

#include "schedule/schedule.hpp"
#include "sim/cost_model.hpp"

namespace ppsched {

// The cost model with the tower priced into stage 0, for a schedule of `stages` stages
// without an MPipe layer: stage 0's FWD also runs the tower's forward (TOWER_FWD); with a
// trainable tower its backward also backprops the tower (TOWER_GRAD_BWD: the backward alone,
// its graph is kept, nothing is recomputed), a BWD all of it, BWD_INPUT and BWD_WEIGHT half
// each (the body's own split), and stage 0 keeps the tower's activations from its FWD to its
// backward (memory.tower_graph_bytes). Tower::None returns the model unchanged.
CostModel with_tower_on_stage0(const CostModel& c, int stages, Tower tower);

// The tower the compared network has: the most a schedule's MPipe layer runs (trainable >
// frozen > none); Tower::None when no schedule has an MPipe layer.
Tower network_tower(const std::vector<const Schedule*>& schedules);

}  // namespace ppsched
