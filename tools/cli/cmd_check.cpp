#include <iostream>

#include <fstream>

#include "checkers/checks.hpp"
#include "lowering/stream_program.hpp"
#include "lowering/stream_program_json.hpp"
#include "schedule/formats/json_support.hpp"
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
    std::string fix_out, emit_streams;
  };
  auto st = std::make_shared<State>();
  cmd->add_option("files", st->files,
                  "schedule files (.json or .csv), or multi-stream programs (ppsched-streams .json, docs/streams.md)");
  add_generator_flags(*cmd, st->gen, false);
  generator_flags_need_generate(*cmd);
  add_mode_flags(*cmd, st->mode);
  add_data_parallel_flags(*cmd, st->dp);
  add_cost_flags(*cmd, st->cost, true, false, true);
  // check times nothing and marks nothing tight: refused (as unknown) rather than ignored.
  for (const char* flag : {"--overlap-efficiency", "--memory-margin"}) cmd->remove_option(cmd->get_option(flag));
  cmd->add_option("--memory-budget", st->budget,
                  "per-rank budget for everything a rank holds (e.g. 80GiB); default: the capacity of --costs or "
                  "--model, none with the embedded model");
  cmd->add_option("--activation-bytes", st->activation_bytes, "bytes one micro-batch keeps from FWD to BWD per stage (default: from the cost model)");
  cmd->add_flag("--json", st->json, "machine-readable result");
  cmd->add_flag("--suggest", st->suggest, "for a failing schedule, search the smallest edit (steps moved within their rank) that verifies");
  cmd->add_option("--fix-out", st->fix_out, "with --suggest: write the fixed schedule here")->needs("--suggest");
  cmd->add_option("--emit-streams", st->emit_streams,
                  "with --model of an MoE model and --ep > 1: write the schedule's multi-stream program (the expert "
                  "all-to-alls on the comm stream) as a ppsched-streams file");
  return [st, cmd]() {
    // Multi-stream programs are checked on their own: the schedule flags do not apply to them.
    std::vector<std::pair<std::string, StreamProgram>> programs;
    std::vector<std::string> schedule_files;
    for (const auto& f : st->files) {
      bool streams = false;
      if (f.size() > 5 && f.compare(f.size() - 5, 5, ".json") == 0) {
        std::string text = read_input_file(f);
        if (text.find(kStreamProgramFormat) != std::string::npos) {
          nlohmann::json j = parse_json_strict(text, f, false);
          if (is_stream_program(j)) {
            programs.emplace_back(f, read_stream_program(j, f));
            streams = true;
          }
        }
      }
      if (!streams) schedule_files.push_back(f);
    }
    if (!programs.empty()) {
      for (const CLI::Option* opt : cmd->get_options()) {
        const std::string name = opt->get_name();
        if (opt->count() == 0 || name == "files" || name == "--json" || name == "--help") continue;
        throw InputError({}, name + " does not apply to a multi-stream program (" + programs.front().first +
                         "): it sets how a schedule is generated, lowered or priced; check the program alone");
      }
    }
    bool streams_ok = true;
    nlohmann::json stream_results = nlohmann::json::array();
    for (const auto& [name, prog] : programs) {
      CheckReport report = verify_streams(prog);
      streams_ok = streams_ok && report.ok();
      if (st->json) {
        auto j = stream_report_json(prog, report);
        j["file"] = name;
        stream_results.push_back(std::move(j));
      } else {
        std::cout << stream_report_text(name, prog, report);
      }
    }
    if (schedule_files.empty() && st->gen.family.empty() && !programs.empty()) {
      if (st->json)
        std::cout << (stream_results.size() == 1 ? stream_results[0]
                                                 : nlohmann::json{{"ok", streams_ok}, {"files", stream_results}})
                         .dump(2)
                  << "\n";
      return streams_ok ? kOk : kFound;
    }
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
    for (const auto& f : schedule_files) {
      std::optional<CsvKind> kind;
      inputs.emplace_back(f, read_schedule_input(f, {}, {}, &kind));
      comms_csv.push_back(selects_overlap_p2p(kind));
    }
    if (inputs.empty()) throw InputError({}, "give schedule files or --generate FAMILY --pp P --micro M");
    {
      std::vector<std::pair<std::string, const Schedule*>> planned;
      for (const auto& [name, s] : inputs) planned.emplace_back(name, &s);
      take_planned_for(planned, st->cost, st->dp, "check");
    }
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
      // An MoE model over EP > 1: the expert all-to-alls on the comm stream, proven too.
      if (costs.moe.ep > 1 && !costs.moe.stages.empty()) {
        StreamLowering l{costs.moe.ep, costs.moe.stages, costs.moe.delay_wgrad};
        l.stages.resize(static_cast<size_t>(std::max<int>(s.stages, static_cast<int>(l.stages.size()))));
        StreamProgram prog = lower_streams(s, l);
        CheckReport sr = verify_streams(prog);
        size_t ops = 0;
        for (const auto& r : prog.ranks) ops += r.ops.size();
        report.notes.push_back("streams: the expert all-to-alls on a comm stream beside compute (" + std::to_string(ops) +
                               " operations on " + std::to_string(prog.ranks.size()) + " ranks, EP " +
                               std::to_string(costs.moe.ep) + "): " +
                               (sr.ok() ? "every communicator's calls ordered by happens-before, no rendezvous cycle"
                                        : std::to_string(sr.violations.size()) + " violation(s)"));
        for (auto& v : sr.violations) {
          // Located in the schedule too: the step (and sub-step) each operation comes from, on
          // its pipeline rank (an EP replica r + k P runs rank r's program).
          for (const auto& o : v.ops) {
            const StreamOp& op = prog.ranks[static_cast<size_t>(o.rank)].ops[static_cast<size_t>(o.op)];
            if (op.step >= 0) v.steps.push_back(step_ref(s, o.rank % s.ranks, op.step, op.sub));
          }
          report.violations.push_back(std::move(v));
        }
        if (!st->emit_streams.empty() && k == 0) {
          std::ofstream f(st->emit_streams);
          f << stream_program_json(prog).dump(1) << "\n";
          if (!f) throw InputError(in_file(st->emit_streams), "cannot write the multi-stream program");
        }
      } else if (!st->emit_streams.empty()) {
        throw InputError({}, "--emit-streams needs --model of an MoE model with --ep > 1 (" + name +
                         " has no expert all-to-all to put on a stream)");
      }
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
    for (auto& j : stream_results) files.push_back(std::move(j));
    all_ok = all_ok && streams_ok;
    if (st->json) std::cout << (files.size() == 1 ? files[0] : nlohmann::json{{"ok", all_ok}, {"files", files}}).dump(2) << "\n";
    return all_ok ? kOk : kFound;
  };
}

}  // namespace ppsched::cli
