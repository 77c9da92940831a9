#include "schedule/errors.hpp"
#include "schedule/validate.hpp"
#include "tools/cli/command.hpp"

namespace ppsched::cli {

void add_data_parallel_flags(CLI::App& cmd, DataParallelFlags& f, bool with_distributed_optimizer) {
  f.degree_opt = cmd.add_option("--dp", f.degree,
                 "data-parallel replicas N of every pipeline rank (default 1): the FSDP_* steps become collectives "
                 "over each pipeline rank's DP group of N ranks")
      ->check(whole_in(1, kMaxCount));
  f.fsdp_opt = cmd.add_flag("--fsdp", f.fsdp,
               "parameters sharded over the DP group: FSDP_UNSHARD all-gathers, FSDP_REDUCE_GRAD reduce-scatters "
               "(without it REDUCE_GRAD all-reduces and UNSHARD/RESHARD move nothing)");
  if (with_distributed_optimizer)
    f.dist_opt = cmd.add_flag("--distributed-optimizer", f.distributed_optimizer,
                              "optimizer state sharded over the DP group (Megatron's distributed optimizer, ZeRO-1): "
                              "6 + 12/N bytes per parameter instead of 18")
                     ->excludes(f.fsdp_opt);
  cmd.add_option("--mesh-order", f.mesh_order,
                 "global rank layout, as torch's 2-D DeviceMesh: dp,pp (default; rank g is pipeline rank g % PP of "
                 "replica g / PP) or pp,dp (rank g is pipeline rank g / N of replica g % N)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            if (mesh_order_named(text)) return {};
            return "expected dp,pp (torch's DeviceMesh (\"dp\", \"pp\"), the default) or pp,dp, got '" +
                   text.substr(0, 40) + "'";
          },
          "dp,pp|pp,dp"));
}

DataParallelOptions data_parallel_options(const DataParallelFlags& f, int pipeline_ranks, const std::string& input) {
  DataParallelOptions dp;
  dp.degree = f.degree;
  dp.fsdp = f.fsdp;
  dp.distributed_optimizer = f.distributed_optimizer;
  dp.mesh_order = *mesh_order_named(f.mesh_order);  // checked by the flag
  if (const std::string why = data_parallel_problem(dp, pipeline_ranks); !why.empty()) {
    Location where = in_file(input);
    where.field = "--dp";
    throw InputError(where, why + ": give a smaller --dp");
  }
  return dp;
}

std::string data_parallel_label(const DataParallelOptions& dp) {
  return "DP " + std::to_string(dp.degree) + " (mesh " + to_string(dp.mesh_order) +
         (dp.fsdp ? ", FSDP" : "") + (dp.distributed_optimizer ? ", distributed optimizer" : "") + ")";
}

std::string gather_rule_label(const MemoryModel& mm, const DataParallelOptions& dp) {
  if (!dp.fsdp || dp.degree <= 1) return "";
  if (mm.fsdp_units.empty()) return "whole stage gathered per FSDP_UNSHARD";
  const FsdpGatherPeak peak = mm.fsdp_gather_peak(dp);
  return "FSDP2 per-block gather (" + std::to_string(peak.units.size()) + " block" + (peak.units.size() == 1 ? "" : "s") +
         " of " + std::to_string(mm.fsdp_units.size()) + ")";
}

}  // namespace ppsched::cli
