// Gradient parity: the pipeline run against a single-process reference of the same model on
// the same micro-batches. Every rank ships its parameters' gradients to rank 0 (through the
// store, outside the schedule's channels); rank 0 runs the reference and compares, per
// tensor, max|g - g_ref| / max|g_ref| <= 1e-5, and the loss of every iteration.
//
// Where the tower's gradients must live (reference hyper_parallel.md §6, distributed test):
//  - stage-0 backward: on rank 0 only; every other rank's tower copy has no gradient;
//  - owner backward: on every rank, equal to the reference after MPIPE_GRAD_REDUCE;
//  - frozen tower: nowhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exec/config.hpp"
#include "exec/model_layout.hpp"
#include "exec/models.hpp"
#include "exec/outcome.hpp"

namespace ppsched::exec {

struct GradRecord {
  std::string name;
  bool defined = false;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

std::vector<uint8_t> pack_grads(const RankModel& model);
std::vector<GradRecord> unpack_grads(const std::vector<uint8_t>& blob);

// `grads_by_rank`: every process's gradients, by global rank. With data parallelism (`mesh.dp`
// replicas) the reference runs all dp x M micro-batches of an iteration, each loss scaled by
// 1 / (dp x M), so its gradients are the average the replicas' FSDP_REDUCE_GRAD must reach,
// and every replica must hold them; `losses` are the replicas' mean.
ParityResult check_parity(const ModelConfig& m, const ModelLayout& l, const Schedule& s, int iterations,
                          const std::vector<std::vector<GradRecord>>& grads_by_rank, const std::vector<double>& losses,
                          const DeviceMesh& mesh);

}  // namespace ppsched::exec
