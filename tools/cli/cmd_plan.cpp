// `ppsched plan MODEL --gpus N --global-batch-size B`: the best verified plans for a model on a
// cluster (sim/search/cluster_plan.hpp), each with why, the PP = 1 baseline, and what each
// framework needs to launch the best (tools/cli/plan_exports.hpp).
#include <algorithm>
#include <cmath>
#include <iostream>

#include "schedule/errors.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/text_format.hpp"
#include "sim/search/cluster_plan.hpp"
#include "tools/cli/command.hpp"
#include "tools/cli/plan_exports.hpp"
#include "tools/cli/render.hpp"
#include "traces/svg_timeline.hpp"
#include "workload/model_file.hpp"

namespace ppsched::cli {
namespace {

struct PlanFlags {
  std::string model;
  int gpus = 0, gpus_per_node = 0, vpp_max = 2, top = 5, refine = 3;
  long long global_batch = 0, seq_len = 0;
  std::vector<int> pp, tp, ep;
  std::vector<long long> mbs;
  std::vector<std::string> recompute, sharding, families;
  std::string device_memory, memory_reserve, framework;
  std::optional<double> memory_margin;
  bool tp_across_nodes = false, json = false, quiet = false;
  double seconds = 30;
  uint64_t seed = 1;
  std::string out, svg, torchtitan, megatron, exec_cmd;
  CLI::Option* framework_opt = nullptr;
};

void declare(CLI::App& cmd, PlanFlags& f) {
  cmd.add_option("model", f.model, "model: a ppsched-model file or a Hugging Face config.json")->required();
  cmd.add_option("--gpus", f.gpus, "GPUs of the job (TP x PP x DP)")->required()->check(whole_in(1, 1 << 20));
  cmd.add_option("--global-batch-size", f.global_batch, "sequences per optimizer step (all replicas together)")
      ->required()
      ->check(whole_in(1, 1LL << 30));
  cmd.add_option("--gpus-per-node", f.gpus_per_node,
                 "GPUs that share a node (the intra-node link TP stays within; default: the model's link.ranks_per_node, else 8)")
      ->check(whole_in(1, 65536));
  cmd.add_option("--seq-len", f.seq_len, "sequence length (default: the model file's, else 4096)")->check(whole_in(1, kMaxSeqLen));
  cmd.add_option("--device-memory", f.device_memory,
                 "each GPU's memory with its unit, as its driver reports it (default: the model file's, else an H100 80 GB's 79.6 GiB)");
  cmd.add_option("--memory-reserve", f.memory_reserve,
                 "device memory a training process cannot use (default: the model file's, else 4GiB)");
  cmd.add_option("--memory-margin", f.memory_margin, "the share of the usable memory every plan leaves free (default 0.05)")
      ->check(CLI::Range(0.0, 0.5));
  cmd.add_option("--pp", f.pp, "pipeline sizes to try (default: every divisor of GPUs / TP up to the layers)")
      ->delimiter(',')->check(whole_in(1, 16384));
  cmd.add_option("--tp", f.tp, "tensor-parallel sizes to try (default: powers of two within a node dividing the heads)")
      ->delimiter(',')->check(whole_in(1, 65536));
  cmd.add_option("--ep", f.ep, "expert-parallel sizes to try, MoE models (default: powers of two up to DP x TP dividing the experts)")
      ->delimiter(',')->check(whole_in(1, kMaxExperts));
  cmd.add_option("--micro-batch-size", f.mbs, "micro-batch sizes to try (default 1,2,4)")->delimiter(',')->check(whole_in(1, kMaxMicroBatchSize));
  cmd.add_option("--recompute", f.recompute, "recomputation modes to try: none, selective, full (default: all that differ)")
      ->delimiter(',')->check(CLI::IsMember({"none", "selective", "full"}));
  cmd.add_option("--sharding", f.sharding,
                 "data-parallel shardings to try: ddp (replicas), zero1 (Megatron's distributed optimizer), fsdp (default: "
                 "the framework's: fsdp for torchtitan, zero1 for Megatron, both otherwise)")
      ->delimiter(',')->check(CLI::IsMember({"ddp", "zero1", "fsdp"}));
  cmd.add_option("--vpp-max", f.vpp_max, "stages per rank to try up to (default 2)")->check(whole_in(1, 64));
  cmd.add_flag("--tp-across-nodes", f.tp_across_nodes, "let TP span nodes (its collectives over the inter-node link)");
  f.framework_opt = cmd.add_option("--framework", f.framework,
                                   "what will run the plan: torchtitan (FSDP, any order through its CSV runtime), megatron "
                                   "(its 1F1B and interleaved 1F1B, replicas or its distributed optimizer) or any (default; "
                                   "--torchtitan / --megatron set it)")
                        ->check(CLI::IsMember({"any", "torchtitan", "megatron"}));
  cmd.add_option("--family", f.families, "only these schedule families (repeatable; generate's names)");
  cmd.add_option("--top", f.top, "plans to print (default 5)")->check(whole_in(1, 100));
  cmd.add_option("--refine", f.refine, "best plans refined with the layer-layout and order searches (default 3)")->check(whole_in(0, 100));
  cmd.add_option("--seconds", f.seconds, "time limit (default 30; 0: none)")->check(CLI::Range(0.0, 86400.0));
  cmd.add_option("--seed", f.seed, "random seed of the searches")->check(seed_value());
  cmd.add_option("-o,--output", f.out, "write the best plan's schedule (.json, planned for its model, layout and flags)");
  cmd.add_option("--svg", f.svg, "write the best plan's timeline, every rank's memory on one scale with the usable memory drawn");
  cmd.add_option("--torchtitan", f.torchtitan,
                 "write torchtitan's job settings (TOML) for the best plan (and the CSV of an order torch has no class for)");
  cmd.add_option("--megatron", f.megatron, "write Megatron-LM's arguments (a shell file) for the best plan");
  cmd.add_option("--exec-cmd", f.exec_cmd, "write the torchrun line that runs the best plan's schedule under ppsched-exec (needs -o; plans for what it runs: TP 1, FSDP, unless --tp / --sharding say otherwise)");
  cmd.add_flag("--json", f.json, "machine-readable result");
  cmd.add_flag("-q,--quiet", f.quiet, "no progress line on stderr");
}

Recompute recompute_of(const std::string& s) {
  return s == "full" ? Recompute::Full : s == "selective" ? Recompute::Selective : Recompute::None;
}

search::PlanRequest request(const PlanFlags& f) {
  if (!f.torchtitan.empty() && !f.megatron.empty())
    throw InputError({}, "plan: --torchtitan and --megatron ask for plans two frameworks run differently: give one");
  std::string framework = f.framework.empty() ? "any" : f.framework;
  if (!f.torchtitan.empty()) {
    if (framework == "megatron") throw InputError({}, "plan: --torchtitan with --framework megatron: give one framework");
    framework = "torchtitan";
  }
  if (!f.megatron.empty()) {
    if (framework == "torchtitan") throw InputError({}, "plan: --megatron with --framework torchtitan: give one framework");
    framework = "megatron";
  }
  if (!f.exec_cmd.empty() && f.out.empty()) throw InputError({}, "plan: --exec-cmd needs -o (the schedule file ppsched-exec runs)");
  if (!f.out.empty() && output_format("", "-o", f.out) != FileFormat::Json)
    throw InputError({}, "plan: -o writes a .json schedule (a CSV cannot carry the plan's model and layout)");
  search::PlanRequest rq;
  rq.model = read_model_file(f.model);
  rq.model_file = f.model;
  TrainingOverrides o;
  if (f.seq_len > 0) o.seq_len = f.seq_len;
  if (!f.memory_reserve.empty()) {
    o.memory_reserve_bytes = parse_bytes(f.memory_reserve, "--memory-reserve");
    o.memory_reserve_text = f.memory_reserve;
  }
  if (!f.device_memory.empty()) rq.model.device.memory_bytes = parse_bytes(f.device_memory, "--device-memory");
  for (const std::string& n : apply_training(rq.model, o, f.model)) std::cerr << "note: " << n << "\n";
  if (!rq.model.device.memory_bytes)
    throw InputError(in_file(f.model), "plan: the model file's device has no memory size: give --device-memory");
  rq.gpus = f.gpus;
  rq.gpus_per_node = f.gpus_per_node > 0 ? f.gpus_per_node : rq.model.links ? rq.model.links->ranks_per_node : 8;
  rq.global_batch = f.global_batch;
  rq.tp = f.tp;
  rq.pp = f.pp;
  rq.ep = f.ep;
  if (!f.ep.empty() && (!rq.model.arch || rq.model.arch->experts == 0))
    throw InputError({}, "plan: --ep applies to an MoE model, and " + f.model + " has no experts");
  for (long long b : f.mbs) rq.micro_batch_sizes.push_back(b);
  for (const std::string& r : f.recompute) rq.recompute.push_back(recompute_of(r));
  for (const std::string& s : f.sharding)
    rq.sharding.push_back(s == "fsdp" ? search::Sharding::Fsdp : s == "zero1" ? search::Sharding::DistributedOptimizer
                                                                            : search::Sharding::Replicas);
  rq.tp_across_nodes = f.tp_across_nodes;
  rq.vpp_max = f.vpp_max;
  rq.framework = framework == "torchtitan" ? search::Framework::Torchtitan
                 : framework == "megatron" ? search::Framework::Megatron
                                           : search::Framework::Any;
  if (rq.framework == search::Framework::Megatron) {
    for (const auto& s : rq.sharding)
      if (s == search::Sharding::Fsdp) throw InputError({}, "plan: --sharding fsdp is not what Megatron-LM runs (zero1 or ddp)");
    if (!f.families.empty()) throw InputError({}, "plan: --family does not apply to Megatron-LM (it runs its 1F1B and interleaved 1F1B)");
  }
  if (rq.framework == search::Framework::Torchtitan)
    for (const auto& s : rq.sharding)
      if (s == search::Sharding::DistributedOptimizer)
        throw InputError({}, "plan: --sharding zero1 is Megatron's distributed optimizer, which torchtitan does not run (fsdp or ddp)");
  const std::vector<std::string> known = search::tunable_families();
  for (const std::string& fam : f.families)
    if (std::find(known.begin(), known.end(), fam) == known.end())
      throw InputError({}, "plan: --family " + fam.substr(0, 60) + ": not a family plan can take");
  rq.families = f.families;
  // ppsched-exec runs pipeline x data parallel with FSDP or replicas: --exec-cmd plans for it
  // unless the flags say otherwise (then the export refuses a plan it cannot run).
  if (!f.exec_cmd.empty()) {
    if (rq.tp.empty()) rq.tp = {1};
    if (rq.sharding.empty()) rq.sharding = {search::Sharding::Fsdp};
  }
  rq.assumptions.memory_margin = f.memory_margin;
  rq.top = f.top;
  rq.refine = f.refine;
  rq.seconds = f.seconds;
  rq.seed = f.seed;
  return rq;
}

std::string gib(int64_t b) { return fixed(static_cast<double>(b) / (1 << 30), 1); }

nlohmann::json plan_json(const search::Plan& p) {
  return {{"tp", p.shape.tp},
          {"pp", p.shape.pp},
          {"vpp", p.vpp()},
          {"dp", p.shape.dp},
          {"ep", p.shape.ep},
          {"micro_batch_size", p.shape.micro_batch_size},
          {"micro_batches", p.shape.micro},
          {"recompute", ppsched::to_string(p.shape.recompute)},
          {"sharding", search::to_string(p.shape.sharding)},
          {"schedule", p.best.name},
          {"origin", p.best.origin.text()},
          {"placement", std::string(to_string(p.schedule.placement.kind))},
          {"layout", p.layout},
          {"layout_megatron", p.layout_megatron},
          {"layout_even", p.layout_even},
          {"refined", p.refined},
          {"step_ms", p.step_ms},
          {"tokens_per_s_per_gpu", p.tokens_per_s_per_gpu},
          {"mfu", p.mfu},
          {"bubble", p.best.bubble},
          {"tp_comm_ms", p.tp_ms},
          {"dp_exposed_ms", p.dp_exposed_ms},
          {"a2a_exposed_ms", p.a2a_exposed_ms},
          {"peak_bytes", p.peak_bytes},
          {"peak_rank", p.peak_rank},
          {"peak_memory_bytes", p.best.peak_bytes},
          {"largest_part", p.largest_part},
          {"largest_part_bytes", p.largest_part_bytes},
          {"budget_bytes", p.budget_bytes}};
}

// Why the best plan is the best, in a few clauses a user can act on.
std::string why(const search::PlanResult& r) {
  const search::Plan& b = r.plans.front();
  std::string w = "fastest of " + std::to_string(r.timed) + " shapes timed (each verified: no deadlock, matched P2P, memory)";
  if (r.baseline && r.baseline->shape.text() != b.shape.text())
    w += "; " + fixed(100 * (r.baseline->step_ms / b.step_ms - 1), 1) + "% faster than the best without a pipeline (" +
         r.baseline->shape.text() + ", " + fixed(r.baseline->step_ms, 1) + " ms)";
  else if (!r.baseline)
    w += "; no plan without a pipeline fits the memory";
  if (r.plans.size() > 1) {
    const search::Plan& n = r.plans[1];
    w += "; the next (" + n.shape.text() + ", " + n.best.name + ") is " + fixed(100 * (n.step_ms / b.step_ms - 1), 1) + "% slower";
  }
  w += "; its step loses " + fixed(100 * b.best.bubble, 1) + "% to the bubble";
  if (b.tp_ms > 0) w += ", " + fixed(b.tp_ms, 1) + " ms to TP collectives";
  if (b.dp_exposed_ms > 0) w += ", " + fixed(b.dp_exposed_ms, 1) + " ms to the exposed gradient sync";
  if (b.a2a_exposed_ms > 0) w += ", " + fixed(b.a2a_exposed_ms, 1) + " ms to exposed all-to-alls";
  if (b.budget_bytes > 0)
    w += "; its highest peak is " + fixed(100.0 * static_cast<double>(b.peak_bytes) / static_cast<double>(b.budget_bytes), 0) +
         "% of what it is held to (rank " + std::to_string(b.peak_rank) + ", largest part " + b.largest_part + " " +
         gib(b.largest_part_bytes) + " GiB)";
  return w;
}

void print_text(const PlanFlags& f, const search::PlanRequest& rq, const search::PlanResult& r) {
  const int nodes = (rq.gpus + rq.gpus_per_node - 1) / rq.gpus_per_node;
  const auto usable = rq.model.device.usable_memory_bytes();
  std::cout << "plan: " << f.model << " on " << rq.gpus << " GPUs (" << nodes << " node" << (nodes == 1 ? "" : "s") << " of "
            << rq.gpus_per_node << ", "
            << (usable ? gib(*usable) + " GiB usable each, plans held to " +
                             gib(static_cast<int64_t>(static_cast<double>(*usable) *
                                                      (1 - rq.assumptions.memory_margin.value_or(search::kPlanMemoryMargin)))) +
                             " GiB"
                       : std::string("no memory limit"))
            << "), global batch " << rq.global_batch << " x " << rq.model.training.seq_lens.front() << " tokens"
            << (rq.framework == search::Framework::Any ? ""
                : rq.framework == search::Framework::Torchtitan ? ", for torchtitan" : ", for Megatron-LM")
            << "\n";
  std::string refused;
  long refused_n = 0;
  for (const auto& [why, n] : r.refused) {
    refused += (refused.empty() ? "" : ", ") + why + " " + std::to_string(n);
    refused_n += n;
  }
  std::cout << "swept " << r.enumerated << " shapes in " << fixed(r.seconds, 1) << " s: " << r.timed << " timed, "
            << r.pruned_by_bound << " pruned by their bounds, " << r.over_memory << " over memory in weights and optimizer state, "
            << r.no_schedule << " with no schedule that fits" << (r.stopped_by_time ? " (stopped by --seconds)" : "")
            << (refused_n > 0 ? "; refused: " + refused : "") << "\n";
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"#", "TP", "PP", "V", "DP", "EP", "mbs", "M", "recompute", "sharding", "schedule", "step ms", "tokens/s/GPU",
                  "MFU", "peak GiB", "largest part", "bubble", "TP ms", "DP exposed ms"});
  auto row = [&](const std::string& label, const search::Plan& p) {
    rows.push_back({label, std::to_string(p.shape.tp), std::to_string(p.shape.pp), std::to_string(p.vpp()),
                    std::to_string(p.shape.dp), std::to_string(p.shape.ep), std::to_string(p.shape.micro_batch_size),
                    std::to_string(p.shape.micro), ppsched::to_string(p.shape.recompute), search::to_string(p.shape.sharding),
                    p.best.name, fixed(p.step_ms, 1), fixed(p.tokens_per_s_per_gpu, 0), fixed(100 * p.mfu, 1) + "%",
                    gib(p.peak_bytes), p.largest_part, fixed(100 * p.best.bubble, 1) + "%", fixed(p.tp_ms, 1),
                    fixed(p.dp_exposed_ms, 1)});
  };
  for (size_t i = 0; i < r.plans.size(); ++i) row(std::to_string(i + 1), r.plans[i]);
  if (r.baseline) row("PP=1", *r.baseline);
  std::vector<size_t> width(rows.front().size(), 0);
  for (const auto& rw : rows)
    for (size_t k = 0; k < rw.size(); ++k) width[k] = std::max(width[k], rw[k].size());
  for (const auto& rw : rows) {
    std::string line = " ";
    for (size_t k = 0; k < rw.size(); ++k) {
      const bool left = k == 8 || k == 9 || k == 10 || k == 15;
      const std::string pad(width[k] - rw[k].size(), ' ');
      line += " " + (left ? rw[k] + pad : pad + rw[k]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::cout << line << "\n";
  }
  if (!r.baseline) std::cout << "  PP=1: no plan without a pipeline fits the memory\n";
  const search::Plan& b = r.plans.front();
  std::cout << "best: " << b.shape.text() << ", " << b.best.name << " (" << b.best.origin.text() << ")\n";
  std::cout << "why: " << why(r) << "\n";
  if (b.shape.pp > 1)
    std::cout << "layout: " << counts_text(b.layout) << " = Megatron \"" << b.layout_megatron << "\""
              << (counts_text(b.layout) == b.layout_even ? " (the even split)" : " (even split: " + b.layout_even + ")") << "\n";
  std::cout << "MFU counts the model's FLOPs without recomputation (" << general(r.model_flops_per_step, 4)
            << " per step) against " << general(r.peak_flops, 4) << " FLOP/s per GPU\n";
}

void print_json(const PlanFlags& f, const search::PlanRequest& rq, const search::PlanResult& r) {
  nlohmann::json j;
  j["model"] = f.model;
  j["gpus"] = rq.gpus;
  j["gpus_per_node"] = rq.gpus_per_node;
  j["global_batch_size"] = rq.global_batch;
  j["seq_len"] = rq.model.training.seq_lens.front();
  j["usable_memory_bytes"] = rq.model.device.usable_memory_bytes() ? nlohmann::json(*rq.model.device.usable_memory_bytes())
                                                                   : nlohmann::json(nullptr);
  j["framework"] = rq.framework == search::Framework::Any ? "any"
                   : rq.framework == search::Framework::Torchtitan ? "torchtitan" : "megatron";
  j["plans"] = nlohmann::json::array();
  for (const auto& p : r.plans) j["plans"].push_back(plan_json(p));
  j["baseline_pp1"] = r.baseline ? plan_json(*r.baseline) : nlohmann::json(nullptr);
  j["why"] = why(r);
  nlohmann::json refused = nlohmann::json::object();
  for (const auto& [why, n] : r.refused) refused[why] = n;
  j["shapes"] = {{"enumerated", r.enumerated}, {"timed", r.timed},         {"pruned_by_bound", r.pruned_by_bound},
                 {"over_memory", r.over_memory}, {"no_schedule", r.no_schedule}, {"refused", refused}};
  j["seconds"] = r.seconds;
  j["stopped_by_time"] = r.stopped_by_time;
  j["shapes_timed_per_second"] = r.seconds > 0 ? static_cast<double>(r.timed) / r.seconds : 0.0;
  j["trajectory"] = nlohmann::json::array();
  for (const auto& [t, ms] : r.trajectory) j["trajectory"].push_back({{"seconds", t}, {"best_step_ms", ms}});
  j["model_flops_per_step"] = r.model_flops_per_step;
  j["peak_flops_per_gpu"] = r.peak_flops;
  std::cout << j.dump(2) << "\n";
}

// Writes -o, --svg and the frameworks' files for the best plan.
std::vector<std::string> write_outputs(const PlanFlags& f, const search::PlanRequest& rq, const search::Plan& b) {
  std::vector<std::string> wrote;
  // The frameworks' files first: a plan a framework cannot run is refused before anything is written.
  PlanContext ctx{rq, b, f.out, ""};
  std::string toml, megatron, exec;
  const bool csv_needed = !f.torchtitan.empty() && b.shape.pp > 1 && torchtitan_schedule_class(b).empty();
  const std::string csv_path = csv_needed ? f.torchtitan.substr(0, f.torchtitan.rfind('.')) + "_schedule.csv" : "";
  if (!f.torchtitan.empty()) toml = torchtitan_toml(ctx, csv_path);
  if (!f.megatron.empty()) megatron = megatron_script(ctx);
  if (!f.exec_cmd.empty()) exec = exec_script(ctx);
  if (!f.out.empty()) {
    Schedule s = b.schedule;
    CostFlags cf;
    cf.model = f.model;
    cf.seq_len = f.seq_len;
    cf.micro_batch_size = b.shape.micro_batch_size;
    cf.tp = b.shape.tp;
    if (rq.model.arch && rq.model.arch->experts > 0) cf.ep = b.shape.ep;
    cf.recompute = ppsched::to_string(b.shape.recompute);
    s.planned_for = planned_for(cf, b.shape.data_parallel(), b.layout, b.layout_megatron);
    write_output(f.out, write_schedule(s, FileFormat::Json));
    wrote.push_back(f.out + " (the best plan's schedule, verified, planned for its model, layout and flags)");
  }
  if (!f.svg.empty()) {
    SvgOptions o;
    if (b.budget_bytes > 0) o.memory_budget = b.budget_bytes;
    write_output(f.svg, svg_timeline(b.schedule, b.sim, o));
    wrote.push_back(f.svg + " (timeline; memory on one scale with the usable memory)");
  }
  if (!f.torchtitan.empty()) {
    if (csv_needed) {
      // torchtitan's build_pipeline_schedule loads it with _load_csv's default format, compute_only
      // (a communication action is refused there; the runtime adds the sends and FSDP steps itself).
      write_output(csv_path, write_schedule(b.schedule, FileFormat::Csv, CsvKind::ComputeOnly));
      wrote.push_back(csv_path + " (the order as a compute-only CSV, for pipeline_parallel_schedule_csv)");
    }
    write_output(f.torchtitan, toml);
    wrote.push_back(f.torchtitan + " (torchtitan [training], [parallelism], [activation_checkpoint])");
  }
  if (!f.megatron.empty()) {
    write_output(f.megatron, megatron);
    wrote.push_back(f.megatron + " (Megatron-LM arguments: source it in bash, then pass \"${MEGATRON_PLAN_ARGS[@]}\")");
  }
  if (!f.exec_cmd.empty()) {
    write_output(f.exec_cmd, exec);
    wrote.push_back(f.exec_cmd + " (the torchrun line of ppsched-exec)");
  }
  return wrote;
}

}  // namespace

Action add_plan(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "the best verified plans for a model on a cluster: TP x PP x DP (x EP) x V x schedule x "
                                         "layout x micro-batch size x recomputation, with what frameworks need to launch it");
  auto st = std::make_shared<PlanFlags>();
  declare(*cmd, *st);
  return [st]() {
    const PlanFlags& f = *st;
    search::PlanRequest rq = request(f);
    ProgressLine progress(f.quiet);
    rq.progress = [&progress](long timed, long total, double best, double elapsed) {
      progress.show(best > 0 ? format_text("plan: %.1f s, %ld of %ld shapes timed, best %.1f ms per step", elapsed, timed, total, best)
                             : format_text("plan: %.1f s, %ld of %ld shapes timed, none fits yet", elapsed, timed, total));
    };
    const search::PlanResult r = search::plan_cluster(rq);
    progress.done();
    if (r.plans.empty()) {
      std::cerr << "plan: no shape has a schedule that fits the usable memory (" << r.timed << " timed, " << r.over_memory
                << " over memory in weights, gradients and optimizer state alone"
                << (r.stopped_by_time ? "; stopped by --seconds" : "") << ")\n";
      return kFound;
    }
    const std::vector<std::string> wrote = write_outputs(f, rq, r.plans.front());
    if (f.json) print_json(f, rq, r);
    else {
      print_text(f, rq, r);
      for (const std::string& w : wrote) std::cout << "wrote " << w << "\n";
    }
    return kOk;
  };
}

}  // namespace ppsched::cli
