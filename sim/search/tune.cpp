// `ppsched tune` (sim/search/tune.hpp): how an order came to be (Origin), the built-in families
// as candidates and seeds, measuring a schedule by the DES, and the driver over shapes. The
// order search is local_search.cpp's, the DES hill climb des_climb.cpp's.
#include "sim/search/tune.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <memory>
#include <optional>

#include "checkers/checks.hpp"
#include "schedule/errors.hpp"
#include "schedule/generators/generator.hpp"
#include "schedule/text_format.hpp"
#include "sim/search/crew.hpp"

namespace ppsched::search {

namespace {

// Origin's wording and outermost improvement, its steps folded in order.
struct OriginWords {
  std::string text, inner;  // inner: the text under an outer "search from"
  Origin::Outer outer = Origin::Outer::None;
};

OriginWords fold(const Origin& o) {
  OriginWords w;
  switch (o.seed) {
    case Origin::Seed::Family: w.text = "family"; break;
    case Origin::Seed::FamilyOrder: w.text = "family " + o.detail; break;
    case Origin::Seed::ListScheduler: w.text = "list: " + o.detail; break;
    case Origin::Seed::BuildingBlock: w.text = "building block (peak " + o.detail + ")"; break;
  }
  using Outer = Origin::Outer;
  for (Improvement i : o.steps) {
    switch (i) {
      case Improvement::Search:
        if (w.outer == Outer::Search || w.outer == Outer::SearchAndDes) break;
        w.inner = w.text;
        w.text = "search from " + w.text;
        w.outer = Outer::Search;
        break;
      case Improvement::DesSearch:
        if (w.outer == Outer::Search) {
          w.text = "search and DES search from " + w.inner;
          w.outer = Outer::SearchAndDes;
        } else if (w.outer != Outer::DesSearch && w.outer != Outer::SearchAndDes) {
          w.text = "DES search from " + w.text;
          w.outer = Outer::DesSearch;
        }
        break;
      case Improvement::GapsFilled:
        w.text = "gaps filled in " + w.text;
        w.outer = Outer::GapsFilled;
        break;
    }
  }
  return w;
}

}  // namespace

Origin Origin::improved(Improvement i) const {
  Origin o = *this;
  o.steps.push_back(i);
  return o;
}

Origin::Outer Origin::outer() const { return fold(*this).outer; }

std::string Origin::text() const { return fold(*this).text; }

// ---- tune ---------------------------------------------------------------------------------

Entry measure(const Schedule& s, const CostModel& costs, const SimOptions& sim, RunRecord* keep) {
  Entry e;
  e.name = s.name;
  e.vpp = s.ranks > 0 ? s.stages / s.ranks : 1;
  e.placement = s.placement.kind;
  SimOptions o = sim;
  o.record_trace = true;
  RunRecord r = simulate(s, costs, o);
  e.verified = r.completed && r.check.ok();
  if (!r.check.ok()) {
    const Violation& v = r.check.violations.front();
    e.verdict = std::string(to_string(v.kind)) + ": " + v.message;
  } else {
    e.verdict = r.completed ? "ok" : "did not complete";
  }
  e.makespan_ms = r.makespan_ms;
  double idle = 0;
  for (const auto& x : r.ranks) {
    e.peak_bytes.push_back(x.peak_memory_bytes);
    idle += x.bubble_fraction;
  }
  e.bubble = r.ranks.empty() ? 0 : idle / static_cast<double>(r.ranks.size());
  for (const auto& l : r.links) e.messages += static_cast<size_t>(l.messages);
  std::vector<double> first(static_cast<size_t>(s.ranks), -1), last(static_cast<size_t>(s.ranks), 0);
  for (const auto& sl : r.slices) {
    if (sl.lane != Lane::Compute) continue;
    auto& f = first[static_cast<size_t>(sl.rank)];
    if (f < 0 || sl.start_ms < f) f = sl.start_ms;
    last[static_cast<size_t>(sl.rank)] = std::max(last[static_cast<size_t>(sl.rank)], sl.end_ms);
  }
  for (int q = 0; q < s.ranks; ++q)
    if (first[static_cast<size_t>(q)] >= 0) e.span_ms = std::max(e.span_ms, last[static_cast<size_t>(q)] - first[static_cast<size_t>(q)]);
  if (keep) *keep = std::move(r);
  return e;
}

std::vector<std::string> tunable_families() {
  std::vector<std::string> out;
  for (const auto& g : generators())
    // MPipe adds a tower's work to the step: not the same workload as the others. Replicated
    // stages (chimera, dualpipe) hold every stage twice: not the same memory, and the search's
    // orders (one copy of each stage) cannot seed from them.
    if (std::string(g.name) != "mpipe-transpose" && std::string(g.name) != "chimera" && std::string(g.name) != "dualpipe")
      out.emplace_back(g.name);
  return out;
}

namespace {

struct FamilyVariant {
  std::string label;
  GenerateOptions options;
  std::string family;
};

// megatron: only what Megatron-LM runs: 1F1B (V = 1) and its interleaved 1F1B (V > 1) in
// micro-batch groups of P, its default microbatch_group_size_per_vp_stage.
std::vector<FamilyVariant> family_variants(int pp, int vpp, int micro, const std::vector<std::string>& only,
                                           bool megatron = false) {
  std::vector<FamilyVariant> out;
  if (megatron) {
    GenerateOptions o;
    o.pp = pp;
    o.vpp = vpp;
    o.micro = micro;
    if (vpp == 1) {
      out.push_back({"1f1b", o, "1f1b"});
    } else {
      o.group_size = pp;
      out.push_back({"interleaved-1f1b --group-size " + std::to_string(pp) + " V=" + std::to_string(vpp), o,
                     "interleaved-1f1b"});
    }
    return out;
  }
  for (const std::string& name : tunable_families()) {
    if (!only.empty() && std::find(only.begin(), only.end(), name) == only.end()) continue;
    GenerateOptions o;
    o.pp = pp;
    o.vpp = vpp;
    o.micro = micro;
    out.push_back({name + (vpp > 1 ? " V=" + std::to_string(vpp) : ""), o, name});
    if (name == "interleaved-1f1b") {
      GenerateOptions lm = o;
      lm.less_memory = true;
      out.push_back({name + " --less-memory" + (vpp > 1 ? " V=" + std::to_string(vpp) : ""), lm, name});
      GenerateOptions ob = o;
      ob.overlap_b_f = true;
      out.push_back({name + " --overlap-b-f" + (vpp > 1 ? " V=" + std::to_string(vpp) : ""), ob, name});
      ob.dxdw_split = true;
      out.push_back({name + " --overlap-b-f --dxdw-split" + (vpp > 1 ? " V=" + std::to_string(vpp) : ""), ob, name});
    }
  }
  return out;
}

}  // namespace

std::vector<Found> family_seeds(const Problem& p) {
  std::vector<Found> out;
  const int vpp = p.ranks > 0 ? p.stages / p.ranks : 1;
  for (const auto& fv : family_variants(p.ranks, vpp, p.micros, {})) {
    try {
      auto o = order_of(generate(fv.family, fv.options), p);
      if (o) out.push_back(Found{std::move(*o), {}, Origin::of(Origin::Seed::FamilyOrder, fv.label)});
    } catch (const std::exception&) {
      // does not fit this shape
    }
  }
  return out;
}

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  int vpp;
  PlacementKind placement;
};

// What tune prices its candidates with, per stage count P x V: the cost model (when it fits),
// the memory cap, the DES's options, and the verdict of the request's memory rule.
class Pricing {
 public:
  // Every V of the request's range that the cost model describes, each with its placements; an
  // InputError when it describes none.
  explicit Pricing(const TuneRequest& rq);
  const std::vector<Shape>& shapes() const { return shapes_; }
  bool fits(int vpp) const { return fits_[static_cast<size_t>(vpp)]; }
  const CostModel& model_for(int stages) const { return models_[static_cast<size_t>(stages / rq_.pp)]; }
  std::optional<double> cap_for(int stages) const { return rq_.budget ? rq_.budget : model_for(stages).capacity_bytes; }
  SimOptions sim_for(int stages) const;
  // `s` measured by the DES, with its origin, judged by the memory rule.
  // `keep`: the run itself (trace and all), for the winner.
  Entry price(const Schedule& s, const Origin& origin, RunRecord* keep = nullptr) const;

 private:
  void judge_memory(Entry& e, const Schedule& s) const;

  const TuneRequest& rq_;
  std::vector<CostModel> models_;  // per V
  std::vector<bool> fits_;         // per V
  std::vector<Shape> shapes_;
};

Pricing::Pricing(const TuneRequest& rq)
    : rq_(rq), models_(static_cast<size_t>(rq.vpp_max + 1)), fits_(static_cast<size_t>(rq.vpp_max + 1), false) {
  std::string why;
  for (int v = rq.vpp_min; v <= rq.vpp_max; ++v) {
    try {
      models_[static_cast<size_t>(v)] = rq.costs(rq.pp * v);
      models_[static_cast<size_t>(v)].check_fits(rq.pp * v, rq.micro);
      fits_[static_cast<size_t>(v)] = true;
    } catch (const InputError& e) {
      why = e.what();
      continue;  // this V is not described by the cost file
    }
    if (v == 1) {
      shapes_.push_back({1, PlacementKind::Loop});
      continue;
    }
    for (PlacementKind k : rq.placements) shapes_.push_back({v, k});
  }
  if (shapes_.empty()) throw InputError({}, "tune: the cost model fits no V in the range: " + why);
}

SimOptions Pricing::sim_for(int stages) const {
  SimOptions o = rq_.sim;
  o.check.memory = model_for(stages).memory_model(stages);
  // Under another rule than ppsched's the cap is judged by that rule (judge_memory below).
  if (auto cap = cap_for(stages); cap && rq_.memory_rule == MemoryRule::Ppsched) o.check.memory_budget = static_cast<int64_t>(*cap);
  return o;
}

Entry Pricing::price(const Schedule& s, const Origin& origin, RunRecord* keep) const {
  Entry e = measure(s, model_for(s.stages), sim_for(s.stages), keep);
  e.origin = origin;
  judge_memory(e, s);
  return e;
}

// Under --memory-rule zero-bubble: each rank's peak by ZB's accounting, against the cap.
void Pricing::judge_memory(Entry& e, const Schedule& s) const {
  if (rq_.memory_rule == MemoryRule::Ppsched) return;
  const MemoryModel mm = model_for(s.stages).memory_model(s.stages);
  e.rule_peak = memory_peaks(s, mm, rq_.memory_rule);
  // What each rank holds for the whole step comes on top of the rule's activations.
  const auto held = mm.resident_by_rank(static_cast<int>(e.rule_peak.size()), s.stages, [&](int st) { return s.rank_of(st); },
                                        rq_.sim.check.dp);
  for (size_t r = 0; r < held.size(); ++r) e.rule_peak[r] += static_cast<double>(held[r].total());
  const auto cap = cap_for(s.stages);
  if (!cap || !e.verified) return;
  for (size_t r = 0; r < e.rule_peak.size(); ++r)
    if (e.rule_peak[r] > *cap * (1 + 1e-12) + 1e-9) {
      e.verified = false;
      e.verdict = "memory: rank " + std::to_string(r) + " keeps " + human_bytes(e.rule_peak[r]) +
                  " by the zero-bubble rule (activations and what it holds for the whole step), over the budget of " +
                  human_bytes(*cap);
      return;
    }
}

// One tune(): the families measured, a search per shape and backward kind, the leaderboard.
class TuneRun {
 public:
  explicit TuneRun(const TuneRequest& rq) : rq_(rq), pricing_(rq) {}
  TuneResult run();

 private:
  void add_families();
  void search_shape(const Shape& sh, bool split);
  void search_orders(const Problem& p, const Shape& sh, bool split);
  SearchSettings settings_for_search();
  void add_found(const Problem& p, const Order& order, const std::string& name, const Origin& origin);
  void add_entry(const Schedule& s, const Origin& origin);
  void rank_leaderboard();
  void describe_best();

  const TuneRequest& rq_;
  const Clock::time_point t0_ = Clock::now();
  const Pricing pricing_;
  // The search's time limit: what is left of --seconds shared out evenly over the shapes and
  // backward kinds still to search (set before each; 0: no limit).
  double deadline_share_ = 0;
  double global_best_ = -1;  // the progress line's best over every shape so far
  std::vector<Schedule> family_schedules_;  // each fitting a shape; named by its label
  std::vector<std::unique_ptr<Schedule>> found_schedules_;  // the searches' candidates
  std::vector<Entry> entries_;
  std::vector<const Schedule*> entry_schedules_;  // entries_[i]'s schedule
  // The leader so far (the leaderboard's first row) and its run, kept as it is measured: the
  // winner is never simulated again.
  std::optional<size_t> leader_;
  RunRecord leader_run_;
  std::vector<LowerBound> bounds_;                // per shape searched
  TuneResult res_;
};

TuneResult TuneRun::run() {
  add_families();
  const size_t searches = pricing_.shapes().size() * 2;
  size_t done = 0;
  for (const Shape& sh : pricing_.shapes())
    for (bool split : {true, false}) {
      if (rq_.settings.seconds > 0) {
        // The families' DES runs and the earlier searches came out of the same --seconds: a
        // search that finds none left still runs its seeds (a limit of a millisecond).
        const double left = rq_.settings.seconds - std::chrono::duration<double>(Clock::now() - t0_).count();
        deadline_share_ = std::max(1e-3, left / static_cast<double>(searches - done));
      }
      ++done;
      search_shape(sh, split);
    }
  rank_leaderboard();
  describe_best();
  res_.seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
  return std::move(res_);
}

// Families: each one fitting a shape is measured once and seeds the search of that shape.
void TuneRun::add_families() {
  for (int v = rq_.vpp_min; v <= rq_.vpp_max && rq_.families; ++v) {
    if (!pricing_.fits(v)) continue;
    for (const auto& fv : family_variants(rq_.pp, v, rq_.micro, rq_.only_families, rq_.megatron_orders)) {
      Schedule s;
      try {
        s = generate(fv.family, fv.options);
      } catch (const std::exception&) {
        continue;  // does not fit this shape
      }
      if (v > 1 && std::none_of(rq_.placements.begin(), rq_.placements.end(),
                                [&](PlacementKind k) { return k == s.placement.kind; }))
        continue;
      s.name = fv.label;
      // A data-parallel run executes the FSDP steps PyTorch's lowering (and ppsched-exec) adds:
      // the gradient sync after each stage's last backward, FSDP's gathers around its steps.
      if (rq_.sim.check.dp.degree > 1) s = add_fsdp_steps(s);
      family_schedules_.push_back(std::move(s));
    }
  }
  for (const Schedule& s : family_schedules_)  // (no longer grows: entries point into it)
    add_entry(s, Origin::of(Origin::Seed::Family));
}

void TuneRun::search_shape(const Shape& sh, bool split) {
  const int stages = rq_.pp * sh.vpp;
  const Problem p = problem_from_costs(pricing_.model_for(stages), rq_.pp, sh.vpp, rq_.micro, sh.placement, split,
                                       rq_.memory_rule, pricing_.cap_for(stages), rq_.sim.check.dp);
  if (rq_.search_orders) search_orders(p, sh, split);
  if (split) bounds_.push_back(lower_bound(p));  // F/B has the same work, fewer freedoms
}

// The order search, then the DES decides: the evaluator's best few and the families' orders are
// timed by it, and a short hill climb on the DES itself starts from the fastest (the evaluator
// does not see rendezvous waits; the DES does).
void TuneRun::search_orders(const Problem& p, const Shape& sh, bool split) {
  std::vector<Found> seeds;
  for (const Schedule& s : family_schedules_) {
    auto o = order_of(s, p);
    if (o) seeds.push_back(Found{std::move(*o), {}, Origin::of(Origin::Seed::FamilyOrder, s.name)});
  }
  SearchOutcome so = search(p, seeds, settings_for_search());
  res_.evaluations += so.evaluations;
  res_.stopped_by_time = res_.stopped_by_time || so.stopped_by_time;
  std::vector<Found> starts(so.finalists.begin(), so.finalists.begin() + std::min<size_t>(5, so.finalists.size()));
  for (const Found& f : seeds) starts.push_back(f);
  const std::string name = "found V=" + std::to_string(sh.vpp) +
                           (sh.vpp > 1 ? (sh.placement == PlacementKind::V ? " v" : " loop") : "") +
                           (split ? " F/I/W" : " F/B");
  DesClimb climb;
  const int stages = rq_.pp * sh.vpp;
  Found refined = des_refine(p, starts, pricing_.model_for(stages), pricing_.sim_for(stages), rq_.settings.des_iterations,
                             deadline_share_ > 0 ? deadline_share_ / 3 : 0, rq_.settings.seed,
                             thread_count(rq_.settings.threads), &climb);
  res_.evaluations += climb.evaluations;
  res_.des_moves += climb.moves;
  res_.stopped_by_time = res_.stopped_by_time || climb.stopped_by_time;
  if (!refined.order.empty()) add_found(p, refined.order, name, refined.origin);
  // The search's own best under its objective, as the evaluator ranks it (the DES hill climb
  // above chases the makespan): what `--pareto --objective span` needs.
  if (rq_.keep_search_best && !so.finalists.empty() && (refined.order.empty() || so.best.order != refined.order))
    add_found(p, so.best.order, name + " (best " + (rq_.settings.objective == Objective::Span ? "span" : "makespan") + ")",
              so.best.origin);
}

// The request's search settings with the search's part of the time (the last third of each
// share is the DES hill climb's) and one progress line for the whole tune.
SearchSettings TuneRun::settings_for_search() {
  SearchSettings st = rq_.settings;
  st.seconds = deadline_share_ * 2 / 3;
  if (rq_.settings.progress)
    st.progress = [this](double best, double) {
      if (global_best_ < 0 || best < global_best_) global_best_ = best;
      rq_.settings.progress(global_best_, std::chrono::duration<double>(Clock::now() - t0_).count());
    };
  return st;
}

void TuneRun::add_found(const Problem& p, const Order& order, const std::string& name, const Origin& origin) {
  found_schedules_.push_back(std::make_unique<Schedule>(to_schedule(p, order, name)));
  add_entry(*found_schedules_.back(), origin);
}

// The leaderboard's order: verified first, then DES makespan; among equal makespans the found
// one first only when strictly better (a family that ties keeps its place ahead).
bool ranks_before(const Entry& x, const Entry& y) {
  if (x.verified != y.verified) return x.verified;
  if (std::abs(x.makespan_ms - y.makespan_ms) > 1e-9 * std::max(1.0, x.makespan_ms)) return x.makespan_ms < y.makespan_ms;
  return x.origin.is_family() > y.origin.is_family();
}

void TuneRun::add_entry(const Schedule& s, const Origin& origin) {
  RunRecord run;
  entries_.push_back(pricing_.price(s, origin, &run));
  entry_schedules_.push_back(&s);
  // The first of the best stays the leader, as the stable sort below keeps it first.
  if (entries_.back().verified && (!leader_ || ranks_before(entries_.back(), entries_[*leader_]))) {
    leader_ = entries_.size() - 1;
    leader_run_ = std::move(run);
  }
}

// Rank (ranks_before). One row per distinct name (the best of each), families and found alike.
void TuneRun::rank_leaderboard() {
  std::vector<size_t> idx(entries_.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return ranks_before(entries_[a], entries_[b]); });
  std::vector<std::string> seen;
  for (size_t i : idx) {
    if (std::find(seen.begin(), seen.end(), entries_[i].name) != seen.end()) continue;
    seen.push_back(entries_[i].name);
    res_.leaderboard.push_back(entries_[i]);
    if (rq_.keep_schedules) res_.schedules.push_back(*entry_schedules_[i]);
  }
}

// The best verified entry's schedule, its DES run (with trace, kept when it was measured), its
// bound and its gap.
void TuneRun::describe_best() {
  if (res_.leaderboard.empty() || !res_.leaderboard.front().verified || !leader_) return;
  res_.best = 0;
  const Entry& b = res_.leaderboard.front();
  res_.best_schedule = *entry_schedules_[*leader_];
  res_.best_sim = std::move(leader_run_);
  // The bound: the weakest over the shapes searched (every candidate is one of them).
  for (size_t k = 0; k < bounds_.size(); ++k)
    if (k == 0 || bounds_[k].makespan < res_.bound.makespan) res_.bound = bounds_[k];
  res_.gap = res_.bound.makespan > 0 ? b.makespan_ms / res_.bound.makespan - 1 : 0;
}

}  // namespace

TuneResult tune(const TuneRequest& rq) {
  if (rq.pp < 1 || rq.micro < 1) throw InputError({}, "tune: --pp and --micro must be >= 1");
  if (rq.vpp_min < 1 || rq.vpp_max < rq.vpp_min) throw InputError({}, "tune: --vpp must be >= 1");
  return TuneRun(rq).run();
}

}  // namespace ppsched::search
