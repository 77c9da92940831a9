// `ppsched tune`: the best verified schedule for a pipeline shape, a cost model and a memory
// budget (sim/search/tune.hpp). Prints a leaderboard (the best found against every family),
// the lower bound with its formula and the gap; writes the best schedule with its P2P steps.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>

#include "schedule/errors.hpp"
#include "schedule/formats/schedule_io.hpp"
#include "schedule/text_format.hpp"
#include "schedule/validate.hpp"
#include "workload/layout.hpp"
#include "sim/workload_costs.hpp"
#include "sim/search/pareto.hpp"
#include "sim/search/partition.hpp"
#include "sim/search/tune.hpp"
#include "tools/cli/command.hpp"
#include "tools/cli/render.hpp"
#include "traces/chrome_trace.hpp"
#include "traces/svg_timeline.hpp"

namespace ppsched::cli {
namespace {

std::string peaks_text(const std::vector<int64_t>& peaks) {
  std::string out;
  for (size_t i = 0; i < peaks.size(); ++i) out += (i ? "/" : "") + human_bytes(peaks[i]);
  return out;
}

// The peaks the budget was judged by: the rule's under --memory-rule zero-bubble, else the DES's.
std::string peaks_text(const search::Entry& e) {
  if (e.rule_peak.empty()) return peaks_text(e.peak_bytes);
  std::vector<int64_t> p;
  for (double b : e.rule_peak) p.push_back(static_cast<int64_t>(b));
  return peaks_text(p);
}

// Whether an entry's highest peak (the one the budget judged) is within `margin` below the budget.
bool tight(const search::Entry& e, std::optional<double> budget, double margin) {
  if (!budget) return false;
  double peak = 0;
  if (e.rule_peak.empty())
    for (int64_t b : e.peak_bytes) peak = std::max(peak, static_cast<double>(b));
  else
    for (double b : e.rule_peak) peak = std::max(peak, b);
  return within_margin(peak, *budget, margin);
}

std::string placement_name(PlacementKind k) { return std::string(to_string(k)); }

// At most `max` bytes of `text`, cut at a word boundary with " ..." (never inside a word).
std::string clip_words(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  // A clause boundary in the second half reads best ("..., over its budget of 30 GiB ..."),
  // else the last word boundary.
  size_t clause = std::string::npos;
  for (const char* sep : {", ", ": ", "; "}) {
    const size_t at = text.rfind(sep, max - 4);
    if (at != std::string::npos && at >= max / 2 && (clause == std::string::npos || at > clause)) clause = at;
  }
  if (clause != std::string::npos) return text.substr(0, clause) + " ...";
  size_t cut = text.rfind(' ', max - 4);
  if (cut == std::string::npos || cut == 0) cut = max - 4;
  while (cut > 0 && (text[cut - 1] == ' ' || text[cut - 1] == ',' || text[cut - 1] == ';' || text[cut - 1] == ':')) --cut;
  return text.substr(0, cut) + " ...";
}

// Where a leaderboard entry comes from, in a word or two: a family as generated, or an order the
// search found and from what (the "best:" line and --json give the whole origin): its outermost
// improvement, else its wording up to its details (a list scheduler's parameters, a block's peak).
std::string origin_kind(const search::Origin& origin) {
  using Outer = search::Origin::Outer;
  switch (origin.outer()) {
    case Outer::Search: return "search";
    case Outer::DesSearch: return "DES search";
    case Outer::SearchAndDes: return "search + DES";
    case Outer::None:
    case Outer::GapsFilled: break;
  }
  const std::string text = origin.text();
  const size_t cut = std::min(text.find(':'), text.find(" ("));
  return cut == std::string::npos ? clip_words(text, 24) : text.substr(0, cut);
}

// Rows of cells as columns as wide as their widest cell (numbers right-aligned), whatever
// the rank count makes of the peak-memory column; the last column is left unpadded.
std::string aligned(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t k = 0; k < row.size(); ++k) {
      if (width.size() <= k) width.push_back(0);
      width[k] = std::max(width[k], row[k].size());
    }
  std::string out;
  for (const auto& row : rows) {
    std::string line = " ";
    for (size_t k = 0; k < row.size(); ++k) {
      const size_t pad = width[k] - row[k].size();
      const bool last = k + 1 == row.size();
      line += " ";
      if (k < right.size() && right[k]) line += std::string(pad, ' ') + row[k];
      else line += row[k] + (last ? "" : std::string(pad, ' '));
      if (!last) line += " ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

// `tune --pareto`: the frontier, one row per point (ascending memory).
int print_pareto(const search::TuneRequest& rq, const CostModel& shown, const std::string& rule, const std::string& objective,
                 int max_searches, bool json, ProgressLine& progress) {
  const search::ParetoResult r = search::pareto(rq, max_searches);
  progress.done();
  // Memory also in activations: multiples of the largest stage's kept activation (one chunk
  // activation with V placement), the unit of the controllable-memory paper.
  auto activations = [&](const search::ParetoPoint& p) {
    const MemoryModel mm = rq.costs(p.schedule.stages).memory_model(p.schedule.stages);
    int64_t a = 0;
    for (int s = 0; s < p.schedule.stages; ++s) a = std::max(a, mm.activation(s));
    return a > 0 ? p.memory / static_cast<double>(a) : 0.0;
  };
  if (json) {
    nlohmann::json j;
    j["memory_rule"] = rule;
    j["objective"] = objective;
    j["pareto"] = nlohmann::json::array();
    for (const auto& p : r.frontier)
      j["pareto"].push_back({{"memory_bytes", p.memory},
                             {"memory_activations", activations(p)},
                             {"makespan_ms", p.entry.makespan_ms},
                             {"span_ms", p.entry.span_ms},
                             {"name", p.entry.name},
                             {"origin", p.entry.origin.text()},
                             {"peak_memory_bytes", p.entry.peak_bytes},
                             {"rule_peak_bytes", p.entry.rule_peak},
                             {"vpp", p.entry.vpp},
                             {"placement", placement_name(p.entry.placement)}});
    j["searches"] = r.searches;
    j["evaluations"] = r.evaluations;
    j["seconds"] = r.seconds;
    j["stopped_by_time"] = r.stopped_by_time;
    j["truncated"] = r.truncated;
    std::cout << j.dump(2) << "\n";
    return r.frontier.empty() ? kFound : kOk;
  }
  std::cout << "pareto P=" << rq.pp << " M=" << rq.micro << " V=" << rq.vpp_min
            << (rq.vpp_max > rq.vpp_min ? ".." + std::to_string(rq.vpp_max) : "") << " (costs: " << shown.source
            << "; memory rule " << rule << "; best " << objective << " per memory cap)\n";
  if (r.frontier.empty()) {
    std::cerr << "tune --pareto: no candidate verifies under the memory budget\n";
    return kFound;
  }
  std::cout << "  memory        activations  makespan ms    span ms  schedule\n";
  for (const auto& p : r.frontier) {
    std::string line = format_text("  %-12s %12.2f %12.3f %10.3f  %s (%s)\n", human_bytes(static_cast<int64_t>(p.memory)).c_str(),
                  activations(p), p.entry.makespan_ms, p.entry.span_ms, p.entry.name.c_str(), p.entry.origin.text().c_str());
    std::cout << line;
  }
  std::cout << "frontier: " << r.frontier.size() << " points from " << r.searches << " searches, " << r.evaluations
            << " orders evaluated, " << fixed(r.seconds, 1) << " s"
            << (r.stopped_by_time ? " (some stopped by --seconds: the result may depend on timing)" : " (deterministic for --seed)")
            << (r.truncated ? "; stopped at --pareto-searches with candidates still fitting" : "") << "\n";
  return kOk;
}

// What `ppsched tune` was asked, as its flags say.
struct TuneFlags {
  int pp = 0, micro = 0, vpp = 0, vpp_max = 0, threads = 0, rounds = 1;
  long iterations = 20000, des_iterations = 300;
  CostFlags cost;
  DataParallelFlags dp;
  ModeFlags mode;  // --comm, --overlap-p2p, --dyn-shape, --p2p-backend: the DES's runtime mode
  std::string budget, placement = "any", out, trace, svg, objective = "makespan";
  std::string memory_rule = "ppsched";
  std::string partition, layout_out;
  std::vector<std::string> only_families;
  std::vector<int> ep_search;  // --ep-search: the expert-parallel degrees to tune for
  long partition_layouts = 400;
  double seconds = 20;
  uint64_t seed = 1;
  int pareto_searches = 32;
  bool json = false, quiet = false, no_families = false, pareto = false, explain = false;
};

void declare_tune_flags(CLI::App& cmd, TuneFlags& f) {
  cmd.add_option("--pp", f.pp, "pipeline ranks P")->required();
  cmd.add_option("--micro", f.micro, "micro-batches M")->required();
  auto* vpp = cmd.add_option("--vpp", f.vpp, "stages per rank V (default 1)")->check(CLI::Range(1, 64));
  cmd.add_option("--vpp-max", f.vpp_max, "search every V from 1 to this")->excludes(vpp)->check(CLI::Range(1, 64));
  add_cost_flags(cmd, f.cost);
  add_data_parallel_flags(cmd, f.dp);
  cmd.add_option("--memory-budget", f.budget, "per-rank memory cap (e.g. 60GiB); default: the cost model's capacity_bytes");
  cmd.add_option("--seconds", f.seconds, "time limit of the search (the result is deterministic when it finishes first)")
      ->check(CLI::Range(0.0, 86400.0));
  cmd.add_option("--iterations", f.iterations, "local-search moves per job (default 20000)")->check(CLI::Range(0L, 1000000000L));
  cmd.add_option("--rounds", f.rounds,
                  "local-search rounds, each restarted from the best distinct orders of the last (default 1)")
      ->check(CLI::Range(1, 1000));
  cmd.add_option("--des-iterations", f.des_iterations,
                  "moves of the hill climb on the DES after the search (default 300; it also stops when a third of "
                  "--seconds is spent)")
      ->check(CLI::Range(0L, 100000000L));
  cmd.add_option("--seed", f.seed, "random seed of the local search")->check(seed_value());
  cmd.add_option("--threads", f.threads, "worker threads (default: every core)")->check(CLI::Range(0, 1024));
  cmd.add_option("--placement", f.placement, "stage placement for V > 1: loop, v or any")->check(CLI::IsMember({"loop", "v", "any"}));
  cmd.add_option("--objective", f.objective, "what the order search minimises: makespan (default) or span (ZB's longest rank span); the leaderboard is ranked by the DES makespan")
      ->check(CLI::IsMember({"makespan", "span"}));
  add_mode_flags(cmd, f.mode, {.reads_schedules = false, .backend = true});
  cmd.add_option("-o,--output", f.out, "write the best schedule (P2P inserted) here: .json, or .csv (PyTorch compute_comms)");
  cmd.add_option("--trace", f.trace, "write a Chrome/Perfetto trace of the best schedule");
  cmd.add_option("--svg", f.svg, "write an SVG timeline of the best schedule");
  cmd.add_flag("--no-families", f.no_families, "leave the built-in families out (neither candidates nor seeds)");
  cmd.add_option("--memory-rule", f.memory_rule,
                  "how the budget counts activations: ppsched (the cache model, checked by the DES; default) or "
                  "zero-bubble (Zero Bubble's: a forward keeps its activation until its weight pass)")
      ->check(CLI::IsMember({"ppsched", "zero-bubble"}));
  cmd.add_flag("--pareto", f.pareto,
                "print the memory/makespan frontier instead (best --objective per memory cap): search under the "
                "budget, then again just below the best's peak memory, until nothing fits");
  cmd.add_option("--pareto-searches", f.pareto_searches, "--pareto: at most this many searches (default 32)")
      ->check(CLI::Range(1, 10000));
  cmd.add_option("--family", f.only_families,
                  "only this family's orders as candidates and search starts (repeatable; generate's names)");
  cmd.add_option("--partition", f.partition,
                  "with --model: search which layers each stage holds together with the schedule (search), or "
                  "keep torchtitan's even split (even; the default without --layout)")
      ->check(CLI::IsMember({"search", "even"}));
  cmd.add_option("--partition-layouts", f.partition_layouts,
                  "--partition search: at most this many layouts timed per V (default 400)")
      ->check(CLI::Range(1L, 1000000L));
  cmd.add_option("--layout-out", f.layout_out,
                  "with --model: write the best schedule's layout here, as layer counts per stage and as "
                  "Megatron's --pipeline-model-parallel-layout (one per line)");
  cmd.add_option("--ep-search", f.ep_search,
                 "an MoE model: tune for each of these expert-parallel degrees (e.g. 1,4,8) and keep the best verified "
                 "schedule over all of them; each EP prices its own experts' memory and all-to-alls")
      ->delimiter(',')
      ->check(whole_in(1, kMaxExperts));
  cmd.add_flag("--json", f.json, "machine-readable result");
  cmd.add_flag("-q,--quiet", f.quiet, "no progress line on stderr");
  cmd.add_flag("--explain", f.explain, "also print how the lower bounds are computed (their formulas)");
}

// Flags that contradict each other or do not apply, refused before anything is loaded.
void refuse_inapplicable(const TuneFlags& f) {
  if (f.pp < 1 || f.micro < 1) throw InputError({}, "tune: --pp and --micro must be >= 1");
  if (f.pp > kMaxGeneratedRanks || int64_t{f.pp} * std::max(f.vpp, f.vpp_max) > kMaxStages)
    throw InputError({}, "tune: --pp " + std::to_string(f.pp) + " is over the limits of " +
                             std::to_string(kMaxGeneratedRanks) + " ranks and " + std::to_string(kMaxStages) +
                             " stages (P x V)");
  if (f.micro > kMaxCount)
    throw InputError({}, "tune: --micro " + std::to_string(f.micro) + " is over the limit of " + std::to_string(kMaxCount));
  if (f.pareto) {
    for (const auto& [flag, given] : {std::pair<const char*, bool>{"-o", !f.out.empty()}, {"--trace", !f.trace.empty()},
                                      {"--svg", !f.svg.empty()}})
      if (given)
        throw InputError({}, std::string("tune: ") + flag + " does not apply with --pareto (a frontier has a schedule per point; "
                                                           "tune under one of its memories as --memory-budget to write one)");
  }
  if (f.explain && (f.pareto || f.json))
    throw InputError({}, std::string("tune: --explain does not apply with ") + (f.pareto ? "--pareto (a frontier prints no bound)" :
                         "--json (it has the formulas as lower_bound_formula)"));
  if (f.pareto) {
  } else if (f.pareto_searches != 32) {
    throw InputError({}, "tune: --pareto-searches applies only with --pareto");
  }
  if (!f.out.empty()) (void)output_format("", "-o", f.out);  // a bad extension before the search, not after
  const bool with_model = !f.cost.model.empty();
  const bool partition_search = f.partition == "search";
  if (!f.partition.empty() && !with_model)
    throw InputError({}, "tune: --partition needs --model (a cost file has no layers to place)");
  if (!f.layout_out.empty() && !with_model)
    throw InputError({}, "tune: --layout-out needs --model (a cost file has no layers to place)");
  if (!f.partition.empty() && !f.cost.layout.empty())
    throw InputError({}, "tune: --partition " + f.partition + " and --layout both say which layers each stage holds: give one");
  if (f.partition_layouts != 400 && !partition_search)
    throw InputError({}, "tune: --partition-layouts applies only with --partition search");
  if (partition_search && f.pareto)
    throw InputError({}, "tune: --partition search does not apply with --pareto (the frontier is per layout: give --layout)");
  if (!f.ep_search.empty()) {
    if (!with_model) throw InputError({}, "tune: --ep-search needs --model (an MoE model's experts to split)");
    if (f.cost.ep > 0) throw InputError({}, "tune: --ep-search and --ep both set the expert parallelism: give one");
    if (f.pareto) throw InputError({}, "tune: --ep-search does not apply with --pareto (the frontier is per EP: give --ep)");
  }
  if (!f.only_families.empty() && f.no_families)
    throw InputError({}, "tune: --family and --no-families contradict each other");
  const std::vector<std::string> known = search::tunable_families();
  for (const std::string& f : f.only_families)
    if (std::find(known.begin(), known.end(), f) == known.end()) {
      std::string names;
      for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
      throw InputError({}, "tune: --family " + f.substr(0, 60) + ": not a family tune can take (" + names + ")");
    }
}

// The search the flags ask for, with the cost model of the smallest stage count (the header's)
// and the budget the table judges by.
struct TuneSetup {
  search::TuneRequest rq;
  CostModel shown;
  std::optional<double> budget;
  std::string basis;  // where the budget came from
  std::shared_ptr<const CostSource> source;  // the model, read once, the layouts' costs come from
  std::shared_ptr<ProgressLine> progress;    // on a terminal only
};

TuneSetup tune_setup(const std::shared_ptr<TuneFlags>& st) {
  TuneSetup setup;
  search::TuneRequest& rq = setup.rq;
  rq.only_families = st->only_families;
  rq.pp = st->pp;
  rq.micro = st->micro;
  if (st->vpp_max > 0) {
    rq.vpp_min = 1;
    rq.vpp_max = st->vpp_max;
  } else {
    rq.vpp_min = rq.vpp_max = st->vpp > 0 ? st->vpp : 1;
  }
  if (rq.vpp_min < 1) throw InputError({}, "tune: --vpp must be >= 1");
  if (static_cast<long>(rq.pp) * rq.vpp_max * rq.micro > 1'000'000)
    throw InputError({}, "tune: P x V x M = " + std::to_string(static_cast<long>(rq.pp) * rq.vpp_max * rq.micro) +
                             " tasks per kind is more than this search handles (1,000,000)");
  if (st->placement == "loop") rq.placements = {PlacementKind::Loop};
  else if (st->placement == "v") rq.placements = {PlacementKind::V};
  else rq.placements = {PlacementKind::Loop, PlacementKind::V};
  // One cost model per stage count V x P: a model's layout depends on it.
  auto src = std::make_shared<const CostSource>(cost_source(st->cost, st->dp));
  setup.shown = costs_for(*src, rq.pp * rq.vpp_min);
  rq.costs = [src](int stages) { return costs_for(*src, stages); };
  setup.source = src;
  rq.sim.check.dp = data_parallel_options(st->dp, rq.pp, st->cost.model);
  if (!st->budget.empty()) rq.budget = static_cast<double>(parse_bytes(st->budget, "--memory-budget"));
  // The budget the table judges by, and where it came from (for the header and --json).
  setup.budget = rq.budget ? rq.budget : setup.shown.capacity_bytes;
  setup.basis = budget_basis(rq.budget.has_value(), setup.shown);
  apply_mode(st->mode, "tune", false, rq.sim.check);
  rq.families = !st->no_families;
  rq.memory_rule = st->memory_rule == "zero-bubble" ? search::MemoryRule::ZeroBubble : search::MemoryRule::Ppsched;
  rq.settings.objective = st->objective == "span" ? search::Objective::Span : search::Objective::Makespan;
  // The DES hill climb chases the makespan: under --objective span the search's own best
  // (by span) is measured as an entry of its own.
  rq.keep_search_best = rq.settings.objective == search::Objective::Span;
  rq.settings.iterations = st->iterations;
  rq.settings.des_iterations = st->des_iterations;
  rq.settings.rounds = st->rounds;
  rq.settings.seed = st->seed;
  rq.settings.threads = st->threads;
  rq.settings.seconds = st->seconds;
  setup.progress = std::make_shared<ProgressLine>(st->quiet);
  rq.settings.progress = [line = setup.progress](double best, double elapsed) {
    line->show(format_text("tune: %.1f s, best so far %.4f ms by the search's evaluator (the table is timed by the DES)",
                           elapsed, best));
  };
  return setup;
}

// What the search found; with a model, the network whose layers the layouts count.
struct Tuned {
  search::TuneResult r;
  std::optional<search::PartitionResult> part;
  std::optional<Workload> net;
  std::vector<Layer> layers;
};

// The search, with a model over the layouts of each V: searched (--partition search) or given.
Tuned run_search(const std::shared_ptr<TuneFlags>& st, const TuneSetup& setup) {
  const search::TuneRequest& rq = setup.rq;
  const bool with_model = !st->cost.model.empty();
  const bool partition_search = st->partition == "search";
  Tuned t;
  const CostSource& src = *setup.source;
  if (with_model) {
    t.net = *src.workload;
    t.layers = t.net->layers();
    note_rank_times_unused(src, "tune");
  }
  if (partition_search) {
    search::PartitionRequest pr;
    pr.tune = rq;
    pr.max_layouts = st->partition_layouts;
    search::describe_workload(pr, *t.net);
    pr.costs = [&src, &t](const std::vector<int>& counts) {
      const std::vector<int64_t> c(counts.begin(), counts.end());
      return assemble_costs(src, counts_layout(c, t.layers, static_cast<int>(c.size()), "tune --partition search")).costs;
    };
    pr.progress = [line = setup.progress](long n, double best, double elapsed) {
      line->show(best < 1e300 ? format_text("tune --partition search: %.1f s, %ld layouts, best so far %.3f ms (families)",
                                            elapsed, n, best)
                              : format_text("tune --partition search: %.1f s, %ld layouts, none fits the memory budget yet",
                                            elapsed, n));
    };
    t.part = search::search_partition(pr);
    t.r = std::move(t.part->result);
  } else {
    t.r = search::tune(rq);
    if (with_model) {
      std::map<int, std::vector<int64_t>> by_vpp;  // one layout per V, laid out once
      for (auto& e : t.r.leaderboard) {
        auto it = by_vpp.find(e.vpp);
        if (it == by_vpp.end()) {
          const WorkloadCosts nc = assemble_costs(src, rq.pp * e.vpp);
          it = by_vpp.emplace(e.vpp, body_counts(nc.layout, nc.layers)).first;
        }
        e.layout = it->second;
      }
    }
  }
  return t;
}

// One expert-parallel degree --ep-search tuned for: its best verified entry (none: nothing fits).
struct EpCandidate {
  int ep = 1;
  std::optional<search::Entry> best;
};

// The best's layout in both spellings (counts, Megatron's string) and the best family, for both renderings.
struct TuneReport {
  const TuneFlags& flags;
  const TuneSetup& setup;
  const Tuned& tuned;
  const search::Entry& best;
  const search::Entry* best_family = nullptr;
  std::string best_counts, best_megatron;
  const std::vector<EpCandidate>& eps;  // --ep-search: every EP tried (empty without it)
  // What both renderings read most.
  const search::TuneRequest& rq = setup.rq;
  const search::TuneResult& r = tuned.r;
  const CostModel& shown = setup.shown;
  const std::optional<double>& budget = setup.budget;
  const std::string& basis = setup.basis;
  const std::optional<search::PartitionResult>& part = tuned.part;
  bool with_model() const { return tuned.net.has_value(); }
};

void print_tune_json(const TuneReport& rep) {
  nlohmann::json j;
  j["best"] = rep.best.name;
  j["makespan_ms"] = rep.best.makespan_ms;
  j["lower_bound_ms"] = rep.r.bound.makespan;
  j["lower_bound_binding"] = rep.r.bound.makespan_binding;
  j["lower_bound_formula"] = rep.r.bound.formula;
  j["span_ms"] = rep.best.span_ms;
  j["span_lower_bound_ms"] = rep.r.bound.span;
  j["span_lower_bound_binding"] = rep.r.bound.span_binding;
  j["gap"] = rep.r.gap;
  j["best_family"] = rep.best_family ? nlohmann::json(rep.best_family->name) : nlohmann::json(nullptr);
  j["gain_over_best_family"] = rep.best_family ? rep.best_family->makespan_ms / rep.best.makespan_ms - 1 : 0.0;
  j["seconds"] = rep.r.seconds;
  if (!rep.eps.empty()) {
    j["ep"] = rep.shown.moe.ep;
    j["ep_search"] = nlohmann::json::array();
    for (const EpCandidate& c : rep.eps)
      j["ep_search"].push_back({{"ep", c.ep},
                                {"best", c.best ? nlohmann::json(c.best->name) : nlohmann::json(nullptr)},
                                {"makespan_ms", c.best ? nlohmann::json(c.best->makespan_ms) : nlohmann::json(nullptr)},
                                {"peak_bytes", c.best ? nlohmann::json(*std::max_element(c.best->peak_bytes.begin(),
                                                                                         c.best->peak_bytes.end()))
                                                      : nlohmann::json(nullptr)}});
  }
  j["evaluations"] = rep.r.evaluations;
  j["des_moves"] = rep.r.des_moves;
  j["stopped_by_time"] = rep.r.stopped_by_time;
  if (rep.with_model()) {
    j["layout"] = rep.best.layout;
    j["layout_megatron"] = rep.best_megatron;
  }
  if (rep.part) {
    j["partition"] = {{"layouts_evaluated", rep.part->layouts},
                      {"even_layout", rep.part->even_counts},
                      {"even_makespan_ms", rep.part->even_makespan},
                      {"searched_makespan_ms", rep.part->searched_makespan},
                      {"gain_over_even", rep.part->even_makespan > 0 ? rep.part->even_makespan / rep.best.makespan_ms - 1 : 0.0},
                      {"stopped_by_time", rep.part->stopped_by_time}};
  }
  j["assumptions"] = assumptions_json(rep.shown, rep.budget, rep.rq.budget.has_value());
  j["leaderboard"] = nlohmann::json::array();
  for (const auto& e : rep.r.leaderboard)
    j["leaderboard"].push_back({{"name", e.name},
                                {"origin", e.origin.text()},
                                {"verified", e.verified},
                                {"verdict", e.verdict},
                                {"makespan_ms", e.makespan_ms},
                                {"span_ms", e.span_ms},
                                {"bubble", e.bubble},
                                {"peak_memory_bytes", e.peak_bytes},
                                {"rule_peak_bytes", e.rule_peak},
                                {"memory_tight", tight(e, rep.budget, rep.shown.memory_margin)},
                                {"messages", e.messages},
                                {"vpp", e.vpp},
                                {"placement", placement_name(e.placement)}});
  if (rep.with_model())
    for (size_t i = 0; i < rep.r.leaderboard.size(); ++i) j["leaderboard"][i]["layout"] = counts_text(rep.r.leaderboard[i].layout);
  std::cout << j.dump(2) << "\n";
}

int print_leaderboard(const TuneReport& rep) {
  std::cout << "tune P=" << rep.rq.pp << " M=" << rep.rq.micro << " V=" << rep.rq.vpp_min
            << (rep.rq.vpp_max > rep.rq.vpp_min ? ".." + std::to_string(rep.rq.vpp_max) : "") << " (costs: " << rep.shown.source
            << ", budget " << (rep.budget ? human_bytes(static_cast<int64_t>(*rep.budget)) + " (" + rep.basis + ")" : std::string("none"))
            << (rep.flags.memory_rule == "ppsched" ? "" : ", memory rule " + rep.flags.memory_rule)
            << ", overlap_efficiency " << fixed(rep.shown.overlap_efficiency, 2) << ")\n";
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"#", "schedule", "from", "makespan ms", "span ms", "bubble", "messages"});
  if (rep.with_model()) rows.back().push_back("layout");
  rows.back().push_back("peak memory per rank");
  rows.back().push_back("verdict");
  for (size_t i = 0; i < rep.r.leaderboard.size(); ++i) {
    const auto& e = rep.r.leaderboard[i];
    std::vector<std::string> row = {std::to_string(i + 1), e.name, origin_kind(e.origin), fixed(e.makespan_ms, 3),
                                    fixed(e.span_ms, 3),
                                    fixed(100 * e.bubble, 1) + "%", std::to_string(e.messages)};
    if (rep.with_model()) row.push_back(clip_words(counts_text(e.layout), 400));
    row.push_back(peaks_text(e));
    // Whole words only; tune --json has every verdict whole.
    row.push_back(e.verified ? (tight(e, rep.budget, rep.shown.memory_margin) ? "ok, memory tight" : "ok") : clip_words(e.verdict, 100));
    rows.push_back(std::move(row));
  }
  std::vector<bool> right = {true, false, false, true, true, true, true};
  std::cout << aligned(rows, right);
  std::cout << "  " << kBubbleLegend << "\n";
  std::cout << "best: " << rep.best.name << " (" << rep.best.origin.text() << "), makespan " << fixed(rep.best.makespan_ms, 3) << " ms";
  if (rep.best_family)
    std::cout << "; best family " << rep.best_family->name << " " << fixed(rep.best_family->makespan_ms, 3) << " ms (gain "
              << fixed(100 * (rep.best_family->makespan_ms / rep.best.makespan_ms - 1), 2) << "%)";
  std::cout << "\n";
  if (rep.with_model()) std::cout << "layout: " << rep.best_counts << " = Megatron \"" << rep.best_megatron << "\"\n";
  if (!rep.eps.empty()) {
    std::cout << "expert parallelism: EP " << rep.shown.moe.ep << " of";
    for (const EpCandidate& c : rep.eps)
      std::cout << " [EP " << c.ep << ": "
                << (c.best ? c.best->name + " " + fixed(c.best->makespan_ms, 3) + " ms, peak " +
                                 human_bytes(*std::max_element(c.best->peak_bytes.begin(), c.best->peak_bytes.end()))
                           : std::string("nothing verifies under the budget"))
                << "]";
    std::cout << "\n";
  }
  if (rep.part) {
    std::cout << "partition: " << rep.part->layouts << " layouts timed with the families; even split "
              << search::counts_string(rep.part->even_counts) << " "
              << (rep.part->even_makespan > 0 ? fixed(rep.part->even_makespan, 3) + " ms" : std::string("(nothing fits)"))
              << (rep.part->even_makespan > 0 ? ", gain " + fixed(100 * (rep.part->even_makespan / rep.best.makespan_ms - 1), 2) + "%" : "")
              << "\n";
  }
  std::cout << "lower bound: " << fixed(rep.r.bound.makespan, 3) << " ms (binding: " << rep.r.bound.makespan_binding
            << "), gap " << fixed(100 * rep.r.gap, 2) << "%"
            << (rep.r.gap < -1e-9 ? " (below the bound: the bound assumes one compute at a time; this schedule overlaps "
                                "F and B in OVERLAP steps)"
                : rep.r.gap <= 1e-9 ? " (optimal)" : "")
            << "\n";
  const double span_gap = rep.r.bound.span > 0 ? rep.best.span_ms / rep.r.bound.span - 1 : 0;
  std::cout << "span lower bound (ZB's objective, longest rank span): " << fixed(rep.r.bound.span, 3) << " ms (binding: "
            << rep.r.bound.span_binding << "), best's span " << fixed(rep.best.span_ms, 3) << " ms, gap "
            << fixed(100 * span_gap, 2) << "%" << (std::abs(span_gap) <= 1e-9 ? " (optimal)" : "") << "\n";
  if (rep.flags.explain) std::cout << "how the bounds are computed: " << rep.r.bound.formula << "\n";
  else std::cout << "(tune --explain prints how the bounds are computed)\n";
  std::cout << "search: " << fixed(rep.r.seconds, 1) << " s, " << rep.r.evaluations << " orders evaluated, "
            << rep.r.des_moves << " DES hill-climb moves"
            << (rep.r.stopped_by_time ? " (stopped by --seconds: the result may depend on timing)" : " (deterministic for --seed)")
            << "\n";
  if (!rep.flags.out.empty()) {
    std::cout << "wrote " << rep.flags.out << " (P2P steps inserted"
              << (rep.rq.sim.check.dp.degree > 1 ? ", FSDP steps for DP " + std::to_string(rep.rq.sim.check.dp.degree) : "")
              << "; verified";
    if (rep.with_model())
      std::cout << (output_format("", "-o", rep.flags.out) == FileFormat::Json
                        ? "; planned for its model and layout: simulate, compare and check price it so"
                        : "; a CSV carries no plan: price it with --model and --layout " + rep.best_counts);
    std::cout << ")\n";
  }
  if (!rep.flags.layout_out.empty()) std::cout << "wrote " << rep.flags.layout_out << " (layer counts per stage; Megatron's layout)\n";
  return kOk;
}

// Writes what was asked (-o, --trace, --svg, --layout-out) and prints the result.
int report_tune(const TuneFlags& f, const TuneSetup& setup, const Tuned& tuned, const std::vector<EpCandidate>& eps = {}) {
  const search::TuneResult& r = tuned.r;
  const search::TuneRequest& rq = setup.rq;
  const bool with_model = tuned.net.has_value();
  if (setup.progress) setup.progress->done();
  if (r.best < 0) {
    std::cerr << "tune: no candidate verifies under the memory budget (" << r.leaderboard.size()
              << " tried; the first: " << (r.leaderboard.empty() ? "none" : r.leaderboard.front().verdict) << ")\n";
    return kFound;
  }
  TuneReport rep{f, setup, tuned, r.leaderboard[static_cast<size_t>(r.best)], nullptr, "", "", eps};
  const search::Entry& best = rep.best;
  if (with_model) {
    const Layout lay = counts_layout(best.layout, tuned.layers, rq.pp * best.vpp, "tune");
    rep.best_counts = counts_text(lay, tuned.layers);
    rep.best_megatron = megatron_text(lay, tuned.layers);
  }
  if (!f.layout_out.empty()) write_output(f.layout_out, rep.best_counts + "\n" + rep.best_megatron + "\n");
  if (!f.out.empty()) {
    Schedule planned = r.best_schedule;
    // With a model, the file carries what it was planned for: simulate, compare and check price it so.
    if (with_model) planned.planned_for = planned_for(f.cost, rq.sim.check.dp, best.layout, rep.best_megatron);
    write_output(f.out, write_schedule(planned, output_format("", "-o", f.out)));
  }
  if (!f.trace.empty()) write_output(f.trace, chrome_trace_json(r.best_schedule, r.best_sim));
  if (!f.svg.empty()) {
    SvgOptions svg;
    if (setup.budget) svg.memory_budget = static_cast<int64_t>(*setup.budget);
    write_output(f.svg, svg_timeline(r.best_schedule, r.best_sim, svg));
  }
  for (const auto& e : r.leaderboard)
    if (e.origin.is_family() && e.verified) {
      rep.best_family = &e;
      break;
    }
  if (f.json) {
    print_tune_json(rep);
    return kOk;
  }
  return print_leaderboard(rep);
}

// --ep-search: the whole search once per expert-parallel degree (each its own experts' memory
// and all-to-alls), the report of the EP whose best verified schedule is fastest.
int tune_ep_search(const std::shared_ptr<TuneFlags>& st) {
  std::vector<EpCandidate> eps;
  std::optional<TuneSetup> win_setup;
  std::optional<Tuned> win;
  std::shared_ptr<TuneFlags> win_flags;
  for (int ep : st->ep_search) {
    auto one = std::make_shared<TuneFlags>(*st);
    one->cost.ep = ep;
    one->ep_search.clear();
    if (!st->quiet) std::fprintf(stderr, "tune --ep-search: EP %d\n", ep);
    TuneSetup setup = tune_setup(one);
    Tuned t = run_search(one, setup);
    setup.progress->done();
    EpCandidate c{ep, std::nullopt};
    if (t.r.best >= 0) c.best = t.r.leaderboard[static_cast<size_t>(t.r.best)];
    const bool better = c.best && (!win || win->r.best < 0 ||
                                   c.best->makespan_ms < win->r.leaderboard[static_cast<size_t>(win->r.best)].makespan_ms);
    if (!win || better) {
      win_setup = std::move(setup);
      win = std::move(t);
      win_flags = one;
    }
    eps.push_back(std::move(c));
  }
  win_flags->quiet = true;  // the progress lines are done
  return report_tune(*win_flags, *win_setup, *win, eps);
}

}  // namespace

Action add_tune(CLI::App& app) {
  auto* cmd = app.add_subcommand("tune", "search the best verified schedule for a pipeline shape, costs and memory budget");
  auto st = std::make_shared<TuneFlags>();
  declare_tune_flags(*cmd, *st);
  return [st]() {
    refuse_inapplicable(*st);
    if (!st->ep_search.empty()) return tune_ep_search(st);
    const TuneSetup setup = tune_setup(st);
    if (st->pareto)
      return print_pareto(setup.rq, setup.shown, st->memory_rule, st->objective, st->pareto_searches, st->json, *setup.progress);
    return report_tune(*st, setup, run_search(st, setup));
  };
}

}  // namespace ppsched::cli
