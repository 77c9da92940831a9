// The tables every cost-model reader, writer and pricing function goes through (internal to
// sim/: cost_model.cpp prices with them, cost_file.cpp reads and writes them).
#pragma once

#include <algorithm>
#include <string_view>
#include <vector>

#include "sim/cost_model.hpp"

namespace ppsched::cost_fields {

struct ComputeField {
  std::string_view key;
  ComputeKind kind;
  StageValue CostModel::*value;
};
inline const ComputeField kComputeFields[] = {
    {"FWD", ComputeKind::Forward, &CostModel::fwd},
    {"BWD", ComputeKind::Backward, &CostModel::bwd},
    {"BWD_INPUT", ComputeKind::BackwardInput, &CostModel::bwd_input},
    {"BWD_WEIGHT", ComputeKind::BackwardWeight, &CostModel::bwd_weight},
    {"TOWER_FWD", ComputeKind::TowerForward, &CostModel::tower_fwd},
    {"TOWER_BWD", ComputeKind::TowerBackward, &CostModel::tower_bwd},
    {"TOWER_GRAD_BWD", ComputeKind::TowerGradBackward, &CostModel::tower_grad_bwd},
    {"DATA_LOAD", ComputeKind::DataLoad, &CostModel::data_load},
    {"FSDP", ComputeKind::Fsdp, &CostModel::fsdp},
    {"SWAP", ComputeKind::Swap, &CostModel::swap},
};

// One "bytes" key: a per-stage message (activation, gradient) or a scalar one; priced for a
// P2P payload kind or for a collective scope.
struct ByteField {
  std::string_view key;
  Payload payload;
  CollectiveScope collective;
  StageValue CostModel::*per_stage;
  double CostModel::*scalar;
};
inline const ByteField kByteFields[] = {
    {"activation", Payload::Activation, CollectiveScope::None, &CostModel::activation_bytes, nullptr},
    {"gradient", Payload::Gradient, CollectiveScope::None, &CostModel::gradient_bytes, nullptr},
    {"data", Payload::Data, CollectiveScope::None, nullptr, &CostModel::data_bytes},
    {"features", Payload::Features, CollectiveScope::None, nullptr, &CostModel::features_bytes},
    {"tower_inputs", Payload::TowerInputs, CollectiveScope::None, nullptr, &CostModel::tower_input_bytes},
    {"feature_grads", Payload::FeatureGrads, CollectiveScope::None, nullptr, &CostModel::feature_grad_bytes},
    {"meta", Payload::None, CollectiveScope::None, nullptr, &CostModel::meta_bytes},
    {"tower_params", Payload::None, CollectiveScope::AllPipelineRanks, nullptr, &CostModel::tower_param_bytes},
    {"tied_params", Payload::None, CollectiveScope::ExplicitGroup, nullptr, &CostModel::tied_param_bytes},
    {"params", Payload::None, CollectiveScope::DataParallel, &CostModel::param_bytes, nullptr},
};


// The largest value of a stage's row (the checkers count one value per stage: a per-micro row
// counts its largest micro-batch, so that a memory verdict is never optimistic).
inline double max_over_micros(const StageValue& v, int stage) {
  if (v.rows.empty()) return 0.0;
  double m = 0.0;
  const auto& row = v.rows[static_cast<size_t>(std::clamp(stage, 0, static_cast<int>(v.rows.size()) - 1))];
  for (double x : row) m = std::max(m, x);
  return m;
}

// Element-wise f(a, b) over the larger shape (shapes are 1 or the file's common length).
template <class F>
inline StageValue combine(const StageValue& a, const StageValue& b, F f) {
  StageValue out;
  const size_t stages = std::max<size_t>({a.rows.size(), b.rows.size(), 1});
  for (size_t s = 0; s < stages; ++s) {
    const auto width = [&](const StageValue& v) {
      return v.rows.empty() ? size_t{1} : v.rows[std::min(s, v.rows.size() - 1)].size();
    };
    std::vector<double> row;
    for (size_t m = 0; m < std::max(width(a), width(b)); ++m) {
      const int si = static_cast<int>(s), mi = static_cast<int>(m);
      row.push_back(f(a.at(si, mi), b.at(si, mi)));
    }
    out.rows.push_back(std::move(row));
  }
  return out;
}


}  // namespace ppsched::cost_fields
