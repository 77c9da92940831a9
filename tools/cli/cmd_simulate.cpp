#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <set>

#include "schedule/errors.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/text_format.hpp"
#include "sim/cost_model.hpp"
#include "sim/engine.hpp"
#include "sim/tower_on_stage0.hpp"
#include "tools/cli/command.hpp"
#include "tools/cli/render.hpp"
#include "traces/chrome_trace.hpp"
#include "traces/svg_timeline.hpp"

namespace ppsched::cli {
namespace {

double max_dp_ms(const RunRecord& r) {
  double m = 0;
  for (const auto& x : r.ranks) m = std::max(m, x.dp_collective_ms);
  return m;
}

double mean_bubble(const RunRecord& r) {
  double b = 0;
  for (const auto& x : r.ranks) b += x.bubble_fraction;
  return r.ranks.empty() ? 0 : b / static_cast<double>(r.ranks.size());
}
int64_t max_peak(const RunRecord& r) {
  int64_t p = 0;
  for (const auto& x : r.ranks) p = std::max(p, x.peak_memory_bytes);
  return p;
}

// A step of the critical path: "FS0s0@r0", a batch's sub-step by its own label, and a P2P
// entry named as its meta message or its payload (one step is on the path twice when both are).
std::string critical_label(const Schedule& s, const CriticalStep& cp) {
  const auto& slot = s.programs[static_cast<size_t>(cp.rank)][static_cast<size_t>(cp.step_index)];
  if (!slot) return ".@r" + std::to_string(cp.rank);
  const Step& st = cp.sub >= 0 && static_cast<size_t>(cp.sub) < slot->sub_steps().size() ? slot->sub_steps()[static_cast<size_t>(cp.sub)]
                                                                                      : *slot;
  std::string out = short_label(st) + "@r" + std::to_string(cp.rank);
  if (cp.lane == Lane::Send || cp.lane == Lane::Recv) out += cp.meta ? " (meta)" : " (payload)";
  return out;
}

std::string lane_label(Lane l) {
  switch (l) {
    case Lane::Compute: return "compute";
    case Lane::Send: return "send";
    case Lane::Recv: return "recv";
    case Lane::Collective: return "collective";
    case Lane::Comm: return "comm stream";
  }
  return "?";
}

// What each rank holds: for the whole step (weights, gradients, optimizer state), the peak of
// its kept activations alone, and its peak with what it is made of (README "Model and memory").
nlohmann::json memory_json(const Schedule& s, const RunRecord& r) {
  nlohmann::json per_rank = nlohmann::json::array();
  for (const auto& x : r.ranks) {
    const RankMemory& m = x.memory;
    const auto& slot = x.peak_memory_step >= 0 && static_cast<size_t>(x.peak_memory_step) < s.programs[static_cast<size_t>(x.rank)].size()
                           ? s.programs[static_cast<size_t>(x.rank)][static_cast<size_t>(x.peak_memory_step)]
                           : std::optional<Step>{};
    per_rank.push_back({{"rank", x.rank},
                        {"params_bytes", m.weights_bytes},
                        {"grads_bytes", m.grads_bytes},
                        {"optimizer_bytes", m.optimizer_bytes},
                        {"resident_bytes", m.resident_bytes()},
                        {"activations_peak_bytes", m.activations_peak_bytes},
                        {"activations_peak_time_ms", m.activations_peak_time_ms},
                        {"peak_bytes", x.peak_memory_bytes},
                        {"peak_time_ms", x.peak_memory_time_ms},
                        {"peak_step", x.peak_memory_step},
                        {"peak_step_label", slot ? short_label(*slot) : ""},
                        {"at_peak",
                         {{"activations_bytes", m.at_peak_activations_bytes},
                          {"buffers_bytes", m.at_peak_buffers_bytes},
                          {"gathered_params_bytes", m.at_peak_gathered_bytes},
                          {"workspace_bytes", m.at_peak_workspace_bytes}}}});
  }
  return {{"per_rank", std::move(per_rank)}};
}

// The ranks whose peak is within the margin below the budget (tight).
std::vector<int> tight_ranks(const RunRecord& r, std::optional<int64_t> budget, double margin) {
  std::vector<int> out;
  if (!budget) return out;
  for (const auto& x : r.ranks)
    if (within_margin(static_cast<double>(x.peak_memory_bytes), static_cast<double>(*budget), margin)) out.push_back(x.rank);
  return out;
}

// Whether the schedule runs two computes as one step (OVERLAP_*), which overlap_efficiency prices.
bool has_overlap(const Schedule& s) {
  for (const auto& prog : s.programs)
    for (const auto& slot : prog)
      if (slot && is_composite(slot->op)) return true;
  return false;
}

// The breakdown table, when a rank holds more than live activations and buffers.
std::string memory_text(const RunRecord& r, std::optional<int64_t> budget, const std::string& basis, double margin) {
  bool detailed = false;
  for (const auto& x : r.ranks)
    detailed = detailed || x.memory.resident_bytes() > 0 || x.memory.at_peak_workspace_bytes > 0 || x.memory.at_peak_gathered_bytes > 0;
  if (!detailed) return "";
  std::string out = "  memory at each rank's peak: held for the whole step (weights, grads, optimizer) + live then\n"
                    "  rank     weights       grads   optimizer  activations     buffers    gathered   workspace        peak"
                    "   act. peak\n";
  for (const auto& x : r.ranks) {
    const RankMemory& m = x.memory;
    std::string line = format_text("  r%-3d %11s %11s %11s  %11s %11s %11s %11s %11s %11s\n", x.rank,
                  human_bytes(m.weights_bytes).c_str(), human_bytes(m.grads_bytes).c_str(),
                  human_bytes(m.optimizer_bytes).c_str(), human_bytes(m.at_peak_activations_bytes).c_str(),
                  human_bytes(m.at_peak_buffers_bytes).c_str(), human_bytes(m.at_peak_gathered_bytes).c_str(),
                  human_bytes(m.at_peak_workspace_bytes).c_str(), human_bytes(x.peak_memory_bytes).c_str(),
                  human_bytes(m.activations_peak_bytes).c_str());
    out += line;
  }
  if (budget) {
    int over = 0;
    for (const auto& x : r.ranks) over += x.peak_memory_bytes > *budget;
    out += "  budget " + human_bytes(*budget) + " per rank (" + basis + "): " +
           (over ? std::to_string(over) + " of " + std::to_string(r.ranks.size()) + " ranks over it"
                 : std::string("every rank fits"));
    const std::vector<int> tight = tight_ranks(r, budget, margin);
    if (!tight.empty()) {
      std::string names;
      for (int q : tight) names += (names.empty() ? "r" : ", r") + std::to_string(q);
      out += "; tight (within " + fixed(100 * margin, 0) + " % of it, where the estimate's error lies): " + names;
    }
    out += "\n";
  }
  return out;
}

// The MoE side of a run: expert parallelism, the streams' assumption, and the all-to-all time
// over all ranks, hidden and exposed (null without MoE layers).
nlohmann::json moe_json(const CostModel& c, const RunRecord& r) {
  if (c.moe.stages.empty()) return nullptr;
  int layers = 0;
  for (const MoeStage& m : c.moe.stages) layers += static_cast<int>(m.layers.size());
  return {{"ep", c.moe.ep},
          {"moe_layers", layers},
          {"expanded_phases", r.phases},
          {"contention", c.moe.contention},
          {"a2a_algorithm", "pairwise (NCCL all-to-all: a grouped send and receive per peer, intra- and inter-node at once)"},
          {"a2a_ms", r.a2a_ms},
          {"a2a_exposed_ms", r.a2a_exposed_ms},
          {"a2a_hidden_ms", std::max(0.0, r.a2a_ms - r.a2a_exposed_ms)}};
}

nlohmann::json result_json(const Schedule& s, const RunRecord& r, const CostModel& c, const DataParallelOptions& dp,
                           std::optional<int64_t> budget, bool budget_flag_given) {
  nlohmann::json j;
  j["completed"] = r.completed;
  j["makespan_ms"] = r.makespan_ms;
  j["costs"] = c.source;
  // The figures the prices assume, each settable (--overlap-efficiency, --memory-reserve,
  // --memory-margin, --memory-budget).
  j["assumptions"] = assumptions_json(c, budget ? std::optional<double>(static_cast<double>(*budget)) : std::nullopt,
                                      budget_flag_given);
  j["data_parallel"] = {{"degree", r.dp_degree},
                        {"mesh_order", to_string(dp.mesh_order)},
                        {"fsdp", dp.fsdp},
                        {"gather_rule", gather_rule_label(c.memory_model(s.stages), dp)},
                        {"world_ranks", static_cast<int64_t>(s.ranks) * r.dp_degree},
                        {"collective_timing", fsdp2_per_unit(s, c, dp) ? "fsdp2_per_unit" : "per_fsdp_step"},
                        {"collective_ms", r.dp_collective_ms},
                        {"exposed_ms", r.dp_exposed_ms},
                        {"max_rank_collective_ms", max_dp_ms(r)}};
  j["moe"] = moe_json(c, r);
  j["ranks"] = nlohmann::json::array();
  for (const auto& x : r.ranks)
    j["ranks"].push_back({{"rank", x.rank},
                          {"busy_ms", x.busy_ms},
                          {"idle_ms", x.idle_ms},
                          {"bubble_fraction", x.bubble_fraction},
                          {"peak_memory_bytes", x.peak_memory_bytes},
                          {"peak_memory_time_ms", x.peak_memory_time_ms},
                          {"peak_memory_step", x.peak_memory_step},
                          {"dp_collective_ms", x.dp_collective_ms},
                          {"dp_exposed_ms", x.dp_exposed_ms},
                          {"dp_ring", x.dp_ring_inter_node ? "inter_node" : "intra_node"},
                          {"a2a_ms", x.a2a_ms},
                          {"a2a_exposed_ms", x.a2a_exposed_ms},
                          {"a2a_contention_ms", x.contention_ms}});
  j["memory"] = memory_json(s, r);
  j["memory"]["tight_ranks"] = tight_ranks(r, budget, c.memory_margin);
  j["critical_path"] = nlohmann::json::array();
  for (const auto& cp : r.critical_path) {
    const auto& slot = s.programs[static_cast<size_t>(cp.rank)][static_cast<size_t>(cp.step_index)];
    j["critical_path"].push_back({{"rank", cp.rank},
                                  {"index", cp.step_index},
                                  {"step", slot ? short_label(*slot) : "."},
                                  {"lane", lane_label(cp.lane)},
                                  {"message", cp.lane == Lane::Send || cp.lane == Lane::Recv
                                                  ? nlohmann::json(cp.meta ? "meta" : "payload")
                                                  : nlohmann::json(nullptr)},
                                  {"start_ms", cp.start_ms},
                                  {"end_ms", cp.end_ms}});
  }
  j["links"] = nlohmann::json::array();
  for (const auto& l : r.links) j["links"].push_back({{"src", l.src}, {"dst", l.dst}, {"bytes", l.bytes}, {"messages", l.messages}});
  auto check = report_json(s, r.check);
  j["violations"] = check["violations"];
  j["notes"] = check["notes"];
  j["steps"] = r.steps;
  return j;
}

std::string result_text(const std::string& what, const Schedule& s, const RunRecord& r, const CostModel& c,
                        const DataParallelOptions& dp, std::optional<int64_t> budget, const std::string& basis) {
  std::string out = what + ": makespan " + fixed(r.makespan_ms, 3) + " ms" + (r.completed ? "" : " (STOPPED: deadlock)") +
                    ", mean bubble " + fixed(100 * mean_bubble(r), 1) + "% (costs: " + c.source + ")\n";
  if (has_overlap(s) && !c.moe.stages.empty())
    out += "  OVERLAP steps on MoE stages run their sub-steps' phases on two streams: attention and experts on the "
           "compute stream, one at a time, each sub-step's all-to-alls beside the other's compute\n";
  else if (has_overlap(s))
    out += "  OVERLAP steps priced with overlap_efficiency " + fixed(c.overlap_efficiency, 2) +
           (c.overlap_efficiency == 0 ? " (serial: two computes on one device take turns)" : "") +
           "; --overlap-efficiency sets it\n";
  if (dp.degree > 1) {
    int inter = 0, fsdp_steps = 0;
    for (const auto& x : r.ranks) inter += x.dp_ring_inter_node;
    for (const auto& prog : s.programs)
      for (const auto& slot : prog) fsdp_steps += slot && info(slot->op).collective == CollectiveScope::DataParallel;
    out += "  data parallel: " + data_parallel_label(dp) + ", world " + std::to_string(static_cast<int64_t>(s.ranks) * dp.degree) +
           " ranks; DP collectives " + fixed(r.dp_collective_ms, 3) + " ms over all ranks, " + fixed(max_dp_ms(r), 3) +
           " ms on the busiest; ring " +
           (inter == 0 ? "intra-node" : inter == static_cast<int>(r.ranks.size()) ? "inter-node" : "inter-node on " + std::to_string(inter) + " ranks") +
           "\n";
    if (const std::string rule = gather_rule_label(c.memory_model(s.stages), dp); !rule.empty() && fsdp_steps > 0)
      out += "  gathered parameters: " + rule + "\n";
    if (fsdp2_per_unit(s, c, dp)) {
      int kept = 0;
      for (const FsdpUnit& u : c.fsdp_units) kept += u.kept_gathered;
      out += "  FSDP2 collectives: every forward all-gathers the " + std::to_string(c.fsdp_units.size()) +
             " units one by one, every backward gathers the " + std::to_string(c.fsdp_units.size() - static_cast<size_t>(kept)) +
             " not kept and reduce-scatters each, one at a time beside the compute; " + fixed(r.dp_exposed_ms, 3) +
             " ms of the " + fixed(r.dp_collective_ms, 3) + " ms not hidden by it\n";
    }
    // (A schedule without FSDP steps gets the checks' note.)
    if (fsdp_steps > 0 && !c.param_bytes.given)
      out += "  note: the cost model gives no bytes.params: the DP collectives move 0 bytes (latency only)\n";
  }
  if (!c.moe.stages.empty()) {
    double contention = 0;
    for (const auto& x : r.ranks) contention += x.contention_ms;
    out += "  MoE: EP " + std::to_string(c.moe.ep) + ", all-to-all " + fixed(r.a2a_ms, 3) + " ms over all ranks, " +
           fixed(r.a2a_exposed_ms, 3) + " ms exposed, " + fixed(std::max(0.0, r.a2a_ms - r.a2a_exposed_ms), 3) +
           " ms hidden beside compute (which it slowed by " + fixed(contention, 3) + " ms at contention " +
           fixed(c.moe.contention, 3) + "; --comm-contention sets it)\n";
  }
  out += "  rank   busy ms    idle ms  bubble   peak memory  at ms\n";
  for (const auto& x : r.ranks) {
    std::string line = format_text("  r%-3d %9.3f  %9.3f  %5.1f%%  %12s  %.3f\n", x.rank, x.busy_ms, x.idle_ms,
                  100 * x.bubble_fraction, human_bytes(x.peak_memory_bytes).c_str(), x.peak_memory_time_ms);
    out += line;
  }
  out += "  " + std::string(kBubbleLegend) + "\n";
  out += memory_text(r, budget, basis, c.memory_margin);
  if (!r.critical_path.empty()) {
    std::set<int> ranks;
    for (const auto& cp : r.critical_path) ranks.insert(cp.rank);
    out += "  critical path: " + std::to_string(r.critical_path.size()) + " steps over rank" + (ranks.size() > 1 ? "s" : "");
    bool first = true;
    for (int q : ranks) out += std::string(first ? " " : ",") + std::to_string(q), first = false;
    out += ":";
    const size_t n = r.critical_path.size();
    bool meta_on_path = false;
    for (const auto& cp : r.critical_path) meta_on_path = meta_on_path || cp.meta;
    for (size_t k = 0; k < n; ++k) {
      if (n > 16 && k == 8) {
        out += " ... (" + std::to_string(n - 16) + " more)";
        k = n - 8;
      }
      out += std::string(k ? " -> " : " ") + critical_label(s, r.critical_path[k]);
    }
    out += "\n";
    if (meta_on_path)
      out += "  (meta: a P2P step's shape/dtype message, sent before its payload; payload: the tensor itself)\n";
  }
  if (!r.links.empty()) {
    out += "  comm volume:";
    for (const auto& l : r.links)
      out += " r" + std::to_string(l.src) + "->r" + std::to_string(l.dst) + " " + human_bytes(static_cast<int64_t>(std::min(l.bytes, 9.0e18))) +
             " (" + std::to_string(l.messages) + ")";
    out += "\n";
  }
  if (!r.check.ok()) out += report_text("  verification", s, r.check);
  else for (const auto& n : r.check.notes) out += "  note: " + n + "\n";
  return out;
}

}  // namespace

Action add_simulate(CLI::App& app) {
  auto* cmd = app.add_subcommand("simulate", "simulate schedules with a cost model: makespan, bubbles, memory, traces");
  struct State {
    std::vector<std::string> files;
    GeneratorFlags gen;
    SimFlags sim;
    std::string trace, trace_dir, svg;
    bool json = false;
  };
  auto st = std::make_shared<State>();
  cmd->add_option("files", st->files, "schedule files (.json or .csv)");
  add_generator_flags(*cmd, st->gen, false);
  generator_flags_need_generate(*cmd);
  add_sim_flags(*cmd, st->sim);
  cmd->add_option("--trace", st->trace, "write a Chrome/Perfetto trace (JSON) of the simulation");
  cmd->add_option("--trace-per-rank", st->trace_dir, "write one trace per rank (with distributedInfo, for HTA) into DIR");
  cmd->add_option("--svg", st->svg, "write an SVG timeline");
  cmd->add_flag("--json", st->json, "machine-readable result");
  return [st]() {
    refuse_overwriting_input(st->trace, st->files, "--trace");
    refuse_overwriting_input(st->svg, st->files, "--svg");
    std::vector<std::pair<std::string, Schedule>> inputs;
    std::vector<bool> comms_csv;
    if (!st->gen.family.empty()) {
      inputs.emplace_back(st->gen.family, build_generated(st->gen));
      comms_csv.push_back(false);
    }
    for (const auto& f : st->files) {
      std::optional<CsvKind> kind;
      inputs.emplace_back(f, read_schedule_input(f, {}, {}, &kind));
      comms_csv.push_back(selects_overlap_p2p(kind));
    }
    if (inputs.empty()) throw InputError({}, "give schedule files or --generate FAMILY --pp P --micro M");
    if (inputs.size() > 1 && (!st->trace.empty() || !st->svg.empty() || !st->trace_dir.empty()))
      throw InputError({}, "--trace/--svg/--trace-per-rank take one schedule");
    bool ok = true;
    nlohmann::json all = nlohmann::json::array();
    // A trace or SVG that cannot be written does not lose the result: it is printed, and the
    // failed writes are reported after it (exit 2).
    std::vector<std::string> write_errors;
    const auto try_write = [&](const std::string& path, const std::string& text) {
      try {
        write_output(path, text);
      } catch (const InputError& e) {
        write_errors.push_back(e.what());
      }
    };
    {
      std::vector<std::pair<std::string, const Schedule*>> planned;
      for (const auto& [name, s] : inputs) planned.emplace_back(name, &s);
      take_planned_for(planned, st->sim.cost, st->sim.dp, "simulate");
    }
    const CostSource costs_from = cost_source(st->sim.cost, st->sim.dp);  // read once for every input
    for (size_t k = 0; k < inputs.size(); ++k) {
      auto& [name, s] = inputs[k];
      CostModel c = schedule_costs(costs_from, s);
      c.check_fits(s.stages, s.micro_batches);
      bool trace = !st->trace.empty() || !st->svg.empty() || !st->trace_dir.empty();
      const SimOptions so = sim_options(st->sim, c, s, name, trace, comms_csv[k]);
      if (overlap_by_csv(st->sim.mode, comms_csv[k]))
        std::cerr << "note: " << name << " is a compute_comms CSV (PyTorch's lowered schedule): simulated under "
                  << "--overlap-p2p, PyTorch's runtime semantics; --no-overlap-p2p runs it blocking\n";
      RunRecord r = simulate(s, c, so);
      ok = ok && r.check.ok() && r.completed;
      if (st->json) {
        auto j = result_json(s, r, c, so.check.dp, so.check.memory_budget, !st->sim.budget.empty());
        j["file"] = name;
        j["overlap_p2p"] = so.check.overlap_p2p;
        all.push_back(std::move(j));
      } else {
        std::cout << result_text(name, s, r, c, so.check.dp, so.check.memory_budget, budget_basis(!st->sim.budget.empty(), c)) << std::flush;
      }
      // Labelled, so a simulated and a measured trace (ppsched-exec --trace) tell themselves apart.
      if (!st->trace.empty()) {
        try_write(st->trace, chrome_trace_json(s, r));
      }
      if (!st->trace_dir.empty()) {
        if (const std::string why = make_folder(st->trace_dir); !why.empty())
          write_errors.push_back("--trace-per-rank: cannot create the folder '" + clip(st->trace_dir) + "': " + why);
        else
          for (int rank = 0; rank < s.ranks; ++rank) {
            TraceOptions to;
            to.only_rank = rank;
            const std::string path = st->trace_dir + "/rank" + std::to_string(rank) + ".json";
            refuse_overwriting_input(path, st->files, "--trace-per-rank");
            try_write(path, chrome_trace_json(s, r, to));
          }
      }
      if (!st->svg.empty()) {
        SvgOptions svg;
        svg.memory_budget = so.check.memory_budget;
        try_write(st->svg, svg_timeline(s, r, svg));
      }
    }
    if (st->json) std::cout << (all.size() == 1 ? all[0] : all).dump(2) << "\n";
    if (!write_errors.empty()) {
      std::cout.flush();
      for (const auto& e : write_errors) std::cerr << "error: " << e << "\n";
      return kBadInput;
    }
    return ok ? kOk : kFound;
  };
}

Action add_compare(CLI::App& app) {
  auto* cmd = app.add_subcommand("compare", "simulate schedules side by side: makespan, bubble, peak memory, messages");
  struct State {
    std::vector<std::string> files;
    SimFlags sim;
    bool json = false, body_only = false;
  };
  auto st = std::make_shared<State>();
  cmd->add_option("files", st->files, "schedule files (.json or .csv)")->required();
  add_sim_flags(*cmd, st->sim);
  cmd->add_flag("--body-only", st->body_only,
                "price each schedule as written: a schedule without an MPipe layer runs no tower (by default it "
                "runs the MPipe tower on stage 0, so that every schedule trains the same network)");
  cmd->add_flag("--json", st->json, "machine-readable table");
  return [st]() {
    std::vector<Schedule> schedules;
    std::vector<bool> comms_csv;
    for (const auto& f : st->files) {
      std::optional<CsvKind> kind;
      schedules.push_back(read_schedule_input(f, {}, {}, &kind));
      comms_csv.push_back(selects_overlap_p2p(kind));
    }
    // One network for all: when a compared schedule has an MPipe tower, the others run it
    // on stage 0 (sim/tower_on_stage0.hpp), priced from the same cost model.
    std::vector<const Schedule*> all;
    for (const auto& s : schedules) all.push_back(&s);
    const Tower tower = st->body_only ? Tower::None : network_tower(all);
    nlohmann::json rows = nlohmann::json::array();
    std::string table;
    if (tower != Tower::None)
      table += "network: the body plus the MPipe tower (" + std::string(to_string(tower)) +
               "); a schedule without an MPipe layer runs the tower on stage 0 (TOWER_FWD with each stage-0 FWD" +
               (tower == Tower::Trainable ? std::string(", TOWER_GRAD_BWD with its backward") : std::string()) +
               "), marked *; --body-only prices each schedule as written\n";
    table += "schedule                                   makespan ms   bubble   peak memory   messages   steps  verdict\n";
    bool ok = true;
    {
      std::vector<std::pair<std::string, const Schedule*>> planned;
      for (size_t k = 0; k < schedules.size(); ++k) planned.emplace_back(st->files[k], &schedules[k]);
      take_planned_for(planned, st->sim.cost, st->sim.dp, "compare");
    }
    const CostSource costs_from = cost_source(st->sim.cost, st->sim.dp);  // read once for every schedule
    for (size_t k = 0; k < schedules.size(); ++k) {
      const std::string& f = st->files[k];
      const Schedule& s = schedules[k];
      CostModel c = schedule_costs(costs_from, s);
      c.check_fits(s.stages, s.micro_batches);
      const bool tower_on_stage0 = tower != Tower::None && !s.mpipe;
      if (tower_on_stage0) c = with_tower_on_stage0(c, s.stages, tower);
      const SimOptions so = sim_options(st->sim, c, s, f, false, comms_csv[k]);
      RunRecord r = simulate(s, c, so);
      // Tight: fits, near the budget. A row the checks refused (its memory bound over the budget
      // while the DES peak is under it, say) is a violation, not tight.
      const bool tight = r.check.ok() && r.completed && !tight_ranks(r, so.check.memory_budget, c.memory_margin).empty();
      int messages = 0;
      for (const auto& l : r.links) messages += l.messages;
      bool good = r.check.ok() && r.completed;
      ok = ok && good;
      std::string name = f.substr(f.find_last_of('/') + 1) + (tower_on_stage0 ? " *" : "");
      std::string line = format_text("%-42s %11.3f  %6.1f%%  %12s  %9d  %6zu  %s\n", name.substr(0, 42).c_str(), r.makespan_ms,
                    100 * mean_bubble(r), human_bytes(max_peak(r)).c_str(), messages, r.steps,
                    good ? (tight ? "ok, memory tight" : "ok") : (std::to_string(r.check.violations.size()) + " violations").c_str());
      table += line;
      rows.push_back({{"file", f},
                      {"name", s.name},
                      {"makespan_ms", r.makespan_ms},
                      {"mean_bubble_fraction", mean_bubble(r)},
                      {"peak_memory_bytes", max_peak(r)},
                      {"messages", messages},
                      {"steps", r.steps},
                      {"tower_on_stage0", tower_on_stage0},
                      {"dp_degree", r.dp_degree},
                      {"dp_collective_ms", r.dp_collective_ms},
                      {"costs", c.source},
                      {"overlap_efficiency", c.overlap_efficiency},
                      {"memory_tight", tight},
                      {"ok", good}});
    }
    if (st->json) std::cout << rows.dump(2) << "\n";
    else std::cout << table << kBubbleLegend << "\n";
    return ok ? kOk : kFound;
  };
}

}  // namespace ppsched::cli
