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
#include "model/errors.hpp"
#include "model/generators/generator.hpp"
#include "model/text_format.hpp"
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

std::vector<FamilyVariant> family_variants(int pp, int vpp, int micro, const std::vector<std::string>& only) {
  std::vector<FamilyVariant> out;
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

}  // namespace

TuneResult tune(const TuneRequest& rq) {
  TuneResult res;
  const auto t0 = Clock::now();
  if (rq.pp < 1 || rq.micro < 1) throw InputError({}, "tune: --pp and --micro must be >= 1");
  if (rq.vpp_min < 1 || rq.vpp_max < rq.vpp_min) throw InputError({}, "tune: --vpp must be >= 1");
  struct Shape {
    int vpp;
    PlacementKind placement;
  };
  std::vector<Shape> shapes;
  std::vector<CostModel> models(static_cast<size_t>(rq.vpp_max + 1));
  std::vector<bool> fits(static_cast<size_t>(rq.vpp_max + 1), false);
  std::string why;
  for (int v = rq.vpp_min; v <= rq.vpp_max; ++v) {
    try {
      models[static_cast<size_t>(v)] = rq.costs(rq.pp * v);
      models[static_cast<size_t>(v)].check_fits(rq.pp * v, rq.micro);
      fits[static_cast<size_t>(v)] = true;
    } catch (const InputError& e) {
      why = e.what();
      continue;  // this V is not described by the cost file
    }
    if (v == 1) {
      shapes.push_back({1, PlacementKind::Loop});
      continue;
    }
    for (PlacementKind k : rq.placements) shapes.push_back({v, k});
  }
  if (shapes.empty()) throw InputError({}, "tune: the cost model fits no V in the range: " + why);
  auto model_for = [&](int stages) -> const CostModel& { return models[static_cast<size_t>(stages / rq.pp)]; };
  auto cap_for = [&](int stages) { return rq.budget ? rq.budget : model_for(stages).capacity_bytes; };
  auto sim_for = [&](int stages) {
    SimOptions o = rq.sim;
    o.check.memory = model_for(stages).memory_model(stages);
    // Under another rule than ppsched's the cap is judged by that rule (judge_memory below).
    if (auto cap = cap_for(stages); cap && rq.memory_rule == MemoryRule::Ppsched) o.check.memory_budget = static_cast<int64_t>(*cap);
    return o;
  };
  // Under --memory-rule zero-bubble: each rank's peak by ZB's accounting, against the cap.
  auto judge_memory = [&](Entry& e, const Schedule& s) {
    if (rq.memory_rule == MemoryRule::Ppsched) return;
    const MemoryModel mm = model_for(s.stages).memory_model(s.stages);
    e.rule_peak = memory_peaks(s, mm, rq.memory_rule);
    // What each rank holds for the whole step comes on top of the rule's activations.
    const auto held = mm.resident_by_rank(static_cast<int>(e.rule_peak.size()), s.stages, [&](int st) { return s.rank_of(st); },
                                          rq.sim.check.dp);
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
  };
  // Families: each one fitting a shape is measured once and seeds the search of that shape.
  std::vector<std::pair<Schedule, std::string>> family_schedules;
  std::vector<int> family_vpp;
  for (int v = rq.vpp_min; v <= rq.vpp_max && rq.families; ++v)
    if (fits[static_cast<size_t>(v)])
    for (const auto& fv : family_variants(rq.pp, v, rq.micro, rq.only_families)) {
      Schedule s;
      try {
        s = generate(fv.family, fv.options);
      } catch (const std::exception&) {
        continue;  // does not fit this shape
      }
      if (v > 1 && std::none_of(rq.placements.begin(), rq.placements.end(),
                                [&](PlacementKind k) { return k == s.placement.kind; }))
        continue;
      s.name = fv.label;
      family_schedules.emplace_back(std::move(s), fv.label);
    }
  std::vector<Entry> entries;
  std::vector<const Schedule*> entry_schedules;  // entries[i]'s schedule
  std::vector<std::unique_ptr<Schedule>> found_schedules;
  for (const auto& [s, label] : family_schedules) {
    Entry e = measure(s, model_for(s.stages), sim_for(s.stages));
    e.origin = Origin::of(Origin::Seed::Family);
    judge_memory(e, s);
    entries.push_back(std::move(e));
    entry_schedules.push_back(&s);
  }
  // The search, per shape and backward kind; the time limit is shared out evenly.
  const double deadline_share = rq.settings.seconds > 0 ? rq.settings.seconds / static_cast<double>(shapes.size() * 2) : 0;
  std::vector<std::pair<Schedule, std::string>> found;
  double global_best = -1;
  std::vector<LowerBound> bounds;
  for (const Shape& sh : shapes)
    for (bool split : {true, false}) {
      const int stages = rq.pp * sh.vpp;
      Problem p = problem_from_costs(model_for(stages), rq.pp, sh.vpp, rq.micro, sh.placement, split, rq.memory_rule,
                                     cap_for(stages), rq.sim.check.dp);
      if (!rq.search_orders) {
        if (split) bounds.push_back(lower_bound(p));
        continue;
      }
      std::vector<Found> seeds;
      for (const auto& [s, label] : family_schedules) {
        auto o = order_of(s, p);
        if (o) seeds.push_back(Found{std::move(*o), {}, Origin::of(Origin::Seed::FamilyOrder, label)});
      }
      SearchSettings st = rq.settings;
      st.seconds = deadline_share * 2 / 3;  // the last third for the DES hill climb
      if (rq.settings.progress)  // one line for the whole tune: the best over every shape so far
        st.progress = [&](double best, double) {
          if (global_best < 0 || best < global_best) global_best = best;
          rq.settings.progress(global_best, std::chrono::duration<double>(Clock::now() - t0).count());
        };
      SearchOutcome so = search(p, seeds, st);
      res.evaluations += so.evaluations;
      res.stopped_by_time = res.stopped_by_time || so.stopped_by_time;
      // The DES decides: the evaluator's best few and the families' orders are timed by it,
      // and a short hill climb on the DES itself starts from the fastest (the evaluator does
      // not see rendezvous waits; the DES does).
      std::vector<Found> starts(so.finalists.begin(), so.finalists.begin() + std::min<size_t>(5, so.finalists.size()));
      for (const Found& f : seeds) starts.push_back(f);
      const std::string name = "found V=" + std::to_string(sh.vpp) +
                               (sh.vpp > 1 ? (sh.placement == PlacementKind::V ? " v" : " loop") : "") +
                               (split ? " F/I/W" : " F/B");
      DesClimb climb;
      Found refined = des_refine(p, starts, model_for(stages), sim_for(stages), rq.settings.des_iterations,
                                 deadline_share > 0 ? deadline_share / 3 : 0, rq.settings.seed,
                                 thread_count(rq.settings.threads), &climb);
      res.evaluations += climb.evaluations;
      res.des_moves += climb.moves;
      res.stopped_by_time = res.stopped_by_time || climb.stopped_by_time;
      if (!refined.order.empty()) {
        Schedule s = to_schedule(p, refined.order, name);
        Entry e = measure(s, model_for(s.stages), sim_for(s.stages));
        e.origin = refined.origin;
        judge_memory(e, s);
        entries.push_back(e);
        found_schedules.push_back(std::make_unique<Schedule>(s));
        entry_schedules.push_back(found_schedules.back().get());
        found.emplace_back(std::move(s), name);
      }
      // The search's own best under its objective, as the evaluator ranks it (the DES hill climb
      // above chases the makespan): what `--pareto --objective span` needs.
      if (rq.keep_search_best && !so.finalists.empty() && (refined.order.empty() || so.best.order != refined.order)) {
        const std::string own = name + " (best " + (rq.settings.objective == Objective::Span ? "span" : "makespan") + ")";
        Schedule s = to_schedule(p, so.best.order, own);
        Entry e = measure(s, model_for(s.stages), sim_for(s.stages));
        e.origin = so.best.origin;
        judge_memory(e, s);
        entries.push_back(e);
        found_schedules.push_back(std::make_unique<Schedule>(s));
        entry_schedules.push_back(found_schedules.back().get());
        found.emplace_back(std::move(s), own);
      }
      if (split) bounds.push_back(lower_bound(p));  // F/B has the same work, fewer freedoms
    }
  // Rank: verified first, then DES makespan; among equal makespans the found one first only
  // when strictly better (a family that ties keeps its place ahead).
  std::vector<size_t> idx(entries.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    const Entry &x = entries[a], &y = entries[b];
    if (x.verified != y.verified) return x.verified;
    if (std::abs(x.makespan_ms - y.makespan_ms) > 1e-9 * std::max(1.0, x.makespan_ms)) return x.makespan_ms < y.makespan_ms;
    return x.origin.is_family() > y.origin.is_family();
  });
  // Keep one row per distinct name (the best of each), families and found alike.
  std::vector<std::string> seen;
  for (size_t i : idx) {
    if (std::find(seen.begin(), seen.end(), entries[i].name) != seen.end()) continue;
    seen.push_back(entries[i].name);
    res.leaderboard.push_back(entries[i]);
    if (rq.keep_schedules) res.schedules.push_back(*entry_schedules[i]);
  }
  if (!res.leaderboard.empty() && res.leaderboard.front().verified) {
    res.best = 0;
    const Entry& b = res.leaderboard.front();
    bool done = false;
    for (auto& [s, label] : found)
      if (!done && s.name == b.name) {
        Entry again = measure(s, model_for(s.stages), sim_for(s.stages), &res.best_sim);
        if (std::abs(again.makespan_ms - b.makespan_ms) <= 1e-9 * std::max(1.0, b.makespan_ms)) {
          res.best_schedule = s;
          done = true;
        }
      }
    for (auto& [s, label] : family_schedules)
      if (!done && s.name == b.name) {
        measure(s, model_for(s.stages), sim_for(s.stages), &res.best_sim);
        res.best_schedule = s;
        done = true;
      }
    // The bound: the weakest over the shapes searched (every candidate is one of them).
    for (size_t k = 0; k < bounds.size(); ++k)
      if (k == 0 || bounds[k].makespan < res.bound.makespan) res.bound = bounds[k];
    res.gap = res.bound.makespan > 0 ? b.makespan_ms / res.bound.makespan - 1 : 0;
  }
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return res;
}

}  // namespace ppsched::search
