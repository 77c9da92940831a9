// A planned schedule's model, layout and training settings (the schedule file's "planned_for"):
// written by `tune -o` with a model, taken by the commands that price a schedule.
#include <filesystem>
#include <iostream>

#include "schedule/errors.hpp"
#include "tools/cli/command.hpp"

namespace ppsched::cli {

PlannedFor planned_for(const CostFlags& f, const DataParallelOptions& dp, const std::vector<int64_t>& layout,
                       const std::string& megatron) {
  PlannedFor p;
  p.model = f.model;
  p.layout.assign(layout.begin(), layout.end());
  p.layout_megatron = megatron;
  p.seq_len = f.seq_len;
  p.micro_batch_size = f.micro_batch_size;
  p.tp = f.tp;
  p.ep = f.ep;
  p.etp = f.etp;
  p.recompute = f.recompute;
  p.precision = f.precision;
  p.optimizer = f.optimizer;
  if (dp.degree > 1) p.dp = dp.degree;
  p.fsdp = dp.fsdp;
  p.distributed_optimizer = dp.distributed_optimizer;
  return p;
}

namespace {

bool same_file(const std::string& a, const std::string& b) {
  if (a == b) return true;
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec) && !ec;
}

// The plan's model file as this command can open it: as written (from the working folder), else
// beside the schedule file that carries it.
std::string model_path(const PlannedFor& p, const std::string& schedule_file) {
  std::error_code ec;
  if (std::filesystem::exists(p.model, ec)) return p.model;
  const std::filesystem::path beside = std::filesystem::path(schedule_file).parent_path() / p.model;
  if (std::filesystem::path(p.model).is_relative() && std::filesystem::exists(beside, ec)) return beside.string();
  Location where = in_file(schedule_file);
  where.field = "planned_for.model";
  throw InputError(where, "the schedule was planned for the model '" + clip(p.model) +
                              "', which is found neither from here nor beside the schedule: give --model");
}

}  // namespace

void take_planned_for(const std::vector<std::pair<std::string, const Schedule*>>& inputs, CostFlags& f,
                      DataParallelFlags& dp, const std::string& command) {
  const std::pair<std::string, const Schedule*>* first = nullptr;
  for (const auto& in : inputs) {
    if (!in.second->planned_for) continue;
    if (!first) {
      first = &in;
      continue;
    }
    if (*in.second->planned_for != *first->second->planned_for)
      throw InputError(in_file(in.first), command + ": " + in.first + " and " + first->first +
                                              " were planned for different models, layouts or settings, and one "
                                              "model prices every schedule of a run: give them one at a time");
  }
  if (!first) return;
  const PlannedFor& p = *first->second->planned_for;
  const std::string& file = first->first;
  if (!f.model.empty() && !same_file(f.model, p.model)) {
    std::cerr << "note: " << file << " was planned for " << p.model << "; --model " << f.model
              << " prices it on that model's own layout and settings instead\n";
    return;
  }
  if (f.model.empty()) f.model = model_path(p, file);
  if (!f.layout.empty())
    std::cerr << "note: --layout overrides the layout " << file << " was planned with ("
              << (p.layout_megatron.empty() ? counts_text(std::vector<int64_t>(p.layout.begin(), p.layout.end()))
                                            : p.layout_megatron)
              << ")\n";
  else
    f.planned_layout.assign(p.layout.begin(), p.layout.end());
  // Each setting the command line leaves unset takes the plan's.
  if (f.seq_len == 0) f.seq_len = p.seq_len;
  if (f.micro_batch_size == 0) f.micro_batch_size = p.micro_batch_size;
  if (f.tp == 0) f.tp = p.tp;
  if (f.ep == 0) f.ep = p.ep;
  if (f.etp == 0) f.etp = p.etp;
  if (f.recompute.empty()) f.recompute = p.recompute;
  if (f.precision.empty()) f.precision = p.precision;
  if (f.optimizer.empty()) f.optimizer = p.optimizer;
  const auto given = [](CLI::Option* o) { return o && o->count() > 0; };
  if (!given(dp.degree_opt) && !given(dp.fsdp_opt) && !given(dp.dist_opt)) {
    dp.degree = p.dp > 0 ? p.dp : 1;
    dp.fsdp = p.fsdp;
    dp.distributed_optimizer = p.distributed_optimizer;
    dp.planned = true;
  } else if (given(dp.degree_opt) != (p.dp > 1) || (given(dp.degree_opt) && dp.degree != p.dp) ||
             dp.fsdp != p.fsdp || dp.distributed_optimizer != p.distributed_optimizer) {
    std::cerr << "note: the data-parallel flags override what " << file << " was planned for (DP "
              << std::max<int32_t>(p.dp, 1) << (p.fsdp ? ", FSDP" : "")
              << (p.distributed_optimizer ? ", distributed optimizer" : "") << ")\n";
  }
}

}  // namespace ppsched::cli
