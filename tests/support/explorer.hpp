// Exhaustive explorer (tests only): every interleaving of the ranks' actions over the lowered
// communication model, for schedules small enough (~40 steps). It answers whether some
// reachable state is stuck (not finished, nothing can move) and whether some path completes.
// The replay in checkers/ claims one deterministic run decides this; the explorer checks it.
#pragma once

#include <cstddef>

#include "lowering/comm_model.hpp"

namespace ppsched::testing {

struct Exploration {
  bool some_path_completes = false;
  bool some_state_stuck = false;
  size_t states = 0;
  bool exhausted = true;  // false when the state limit was hit
};

Exploration explore(const CommModel& m, CommMode mode, size_t state_limit = 2000000);

}  // namespace ppsched::testing
