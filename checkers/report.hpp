// What several checkers build their findings with (checkers/data_parallel.cpp,
// checkers/replicas.cpp): a violation located at steps of one rank, and the step-table question
// both ask of a step (does it accumulate weight gradients).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "lowering/diagnostics.hpp"
#include "schedule/schedule.hpp"
#include "schedule/step_types.hpp"

namespace ppsched {

// A violation of `kind` on rank `r` at its steps (index, sub-step; -1: the whole step).
inline Violation located(ViolationKind kind, const Schedule& s, int r, std::vector<std::pair<int, int>> steps, std::string msg) {
  Violation v;
  v.kind = kind;
  v.ranks = {r};
  for (auto [index, sub] : steps) v.steps.push_back(step_ref(s, r, index, sub));
  v.message = std::move(msg);
  return v;
}

// Whether a step adds to its stage's weight gradients (a whole backward or its weight half).
inline bool accumulates_weight_grads(Op op) {
  const ComputeKind k = info(op).compute;
  return k == ComputeKind::Backward || k == ComputeKind::BackwardWeight;
}

}  // namespace ppsched
