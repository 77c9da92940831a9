// What each framework needs to run a plan `ppsched plan` chose (README "Plan a cluster"), in the
// framework's own spelling, with its own rules checked before anything is written:
//   torchtitan (v0.2.2's TOML keys; ConfigManager refuses unknown ones): [training]
//     local_batch_size / global_batch_size / seq_len, [parallelism] degrees, the schedule (a
//     torch class, or the compute_comms CSV for an order torch has no class for) with
//     pipeline_parallel_microbatch_size, module_fqns_per_model_part from the layout, and
//     [activation_checkpoint] mode;
//   Megatron-LM (core_v0.15.3's arguments): the parallel sizes, --pipeline-model-parallel-layout,
//     --microbatch-group-size-per-virtual-pipeline-stage, the batch sizes, recomputation and
//     the distributed optimizer;
//   ppsched-exec: the torchrun line that runs the verified schedule file.
// Each throws InputError when the plan is one the framework cannot run.
#pragma once

#include <string>

#include "sim/search/cluster_plan.hpp"

namespace ppsched::cli {

struct PlanContext {
  const search::PlanRequest& rq;
  const search::Plan& plan;
  std::string schedule_file;  // -o's file ("" when not written)
  std::string csv_file;       // the compute_comms CSV written beside the TOML for torchtitan ("" : none needed)
};

// torchtitan's schedule class for the plan's order ("" when torch has none: the CSV runs it).
std::string torchtitan_schedule_class(const search::Plan& plan);
// The TOML; `csv_name` is the CSV's path as the TOML names it.
std::string torchtitan_toml(const PlanContext& c, const std::string& csv_name);
// The module names of each model part (torchtitan's Llama / Qwen3 / DeepSeek-V3 decoders:
// tok_embeddings, layers.<i>, norm, output), from the plan's layout.
std::vector<std::vector<std::string>> torchtitan_fqns(const search::Plan& plan, const Workload& model);
std::string megatron_script(const PlanContext& c);
std::string exec_script(const PlanContext& c);

}  // namespace ppsched::cli
