#include <iostream>

#include "checkers/checks.hpp"
#include "schedule/errors.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "sim/cost_model.hpp"
#include "tools/cli/command.hpp"
#include "tools/cli/render.hpp"

namespace ppsched::cli {

Action add_check(CLI::App& app) {
  auto* cmd = app.add_subcommand("check", "verify schedules: deadlock freedom, P2P matching, caches, collectives, memory");
  struct State {
    std::vector<std::string> files;
    GeneratorFlags gen;
    std::string budget, activation_bytes;
    CostFlags cost;
    ModeFlags mode;
    DataParallelFlags dp;
    bool json = false, suggest = false;
    std::string fix_out;
  };
  auto st = std::make_shared<State>();
  cmd->add_option("files", st->files, "schedule files (.json or .csv)");
  add_generator_flags(*cmd, st->gen, false);
  generator_flags_need_generate(*cmd);
  add_mode_flags(*cmd, st->mode);
  add_data_parallel_flags(*cmd, st->dp);
  add_cost_flags(*cmd, st->cost);
  // check times nothing and marks nothing tight: refused (as unknown) rather than ignored.
  for (const char* flag : {"--overlap-efficiency", "--memory-margin"}) cmd->remove_option(cmd->get_option(flag));
  cmd->add_option("--memory-budget", st->budget,
                  "per-rank budget for everything a rank holds (e.g. 80GiB); default: the capacity of --costs or "
                  "--model, none with the embedded model");
  cmd->add_option("--activation-bytes", st->activation_bytes, "bytes one micro-batch keeps from FWD to BWD per stage (default: from the cost model)");
  cmd->add_flag("--json", st->json, "machine-readable result");
  cmd->add_flag("--suggest", st->suggest, "for a failing schedule, search the smallest edit (steps moved within their rank) that verifies");
  cmd->add_option("--fix-out", st->fix_out, "with --suggest: write the fixed schedule here")->needs("--suggest");
  return [st]() {
    CheckOptions o;
    if (!st->budget.empty()) o.memory_budget = parse_bytes(st->budget, "--memory-budget");
    std::vector<std::pair<std::string, Schedule>> inputs;
    std::vector<bool> comms_csv;  // per input: read from a compute_comms CSV
    if (!st->gen.family.empty()) {
      Schedule s = build_generated(st->gen);
      inputs.emplace_back(st->gen.family + " P=" + std::to_string(st->gen.options.pp) + " V=" +
                              std::to_string(st->gen.options.vpp) + " M=" + std::to_string(st->gen.options.micro),
                          std::move(s));
      comms_csv.push_back(false);
    }
    for (const auto& f : st->files) {
      std::optional<CsvKind> kind;
      inputs.emplace_back(f, read_schedule_input(f, {}, {}, &kind));
      comms_csv.push_back(selects_overlap_p2p(kind));
    }
    if (inputs.empty()) throw InputError({}, "give schedule files or --generate FAMILY --pp P --micro M");
    const CostSource costs_from = cost_source(st->cost, st->dp);  // read once for every input
    bool all_ok = true;
    nlohmann::json files = nlohmann::json::array();
    for (size_t k = 0; k < inputs.size(); ++k) {
      auto& [name, s] = inputs[k];
      apply_mode(st->mode, name, comms_csv[k], o);
      if (overlap_by_csv(st->mode, comms_csv[k]))
        std::cerr << "note: " << name << " is a compute_comms CSV (PyTorch's lowered schedule): checked under "
                  << "--overlap-p2p, PyTorch's runtime semantics; --no-overlap-p2p checks it blocking\n";
      // Bytes per cache entry come from the cost model, so check and simulate count alike.
      CostModel costs = schedule_costs(costs_from, s);
      o.memory = costs.memory_model(s.stages);
      if (!st->activation_bytes.empty()) o.memory.activation_bytes = {parse_bytes(st->activation_bytes, "--activation-bytes")};
      const bool given_costs = !st->cost.costs.empty() || !st->cost.model.empty();
      if (given_costs && costs.capacity_bytes && st->budget.empty()) o.memory_budget = static_cast<int64_t>(*costs.capacity_bytes);
      o.dp = data_parallel_options(st->dp, s.ranks, name);
      CheckReport report = verify(s, o);
      all_ok = all_ok && report.ok();
      if (st->json) {
        auto j = report_json(s, report);
        j["file"] = name;
        j["data_parallel"] = {{"degree", o.dp.degree},
                              {"mesh_order", to_string(o.dp.mesh_order)},
                              {"fsdp", o.dp.fsdp},
                              {"world_ranks", static_cast<int64_t>(s.ranks) * o.dp.degree}};
        j["overlap_p2p"] = o.overlap_p2p;
        j["p2p_backend"] = std::string(to_string(o.backend));
        if (st->suggest && !report.ok()) suggest_fix(name, s, o, st->fix_out, &j);
        files.push_back(std::move(j));
      } else {
        std::cout << report_text(name, s, report);
        if (o.dp.degree > 1)
          std::cout << "  data parallel: " << data_parallel_label(o.dp) << ", world "
                    << static_cast<int64_t>(s.ranks) * o.dp.degree
                    << " ranks; the FSDP_* steps are collectives over each pipeline rank's DP group\n";
        if (st->suggest && !report.ok()) suggest_fix(name, s, o, st->fix_out, nullptr);
      }
    }
    if (st->json) std::cout << (files.size() == 1 ? files[0] : nlohmann::json{{"ok", all_ok}, {"files", files}}).dump(2) << "\n";
    return all_ok ? kOk : kFound;
  };
}

}  // namespace ppsched::cli
