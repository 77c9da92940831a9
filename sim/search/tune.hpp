// `ppsched tune`: the best verified schedule for a cost model, a memory budget and a pipeline
// shape. Candidates: every built-in family that fits, the list scheduler over its parameter
// space (sim/search/list_scheduler.hpp), and a local search on orders started from the best of
// both (moves of one task within its rank; a move that breaks a dependency makes the order
// stall in evaluate() and is refused). Finalists become ordinary schedules (P2P inserted),
// verified by verify() and timed by the DES; the leaderboard ranks them by the DES makespan.
//
// Deterministic for a seed: the work is a fixed list of jobs, each with its own random stream,
// merged in job order whatever the number of threads; only a --seconds limit that stops the
// search early can change the outcome (the result says so).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sim/cost_model.hpp"
#include "sim/engine.hpp"
#include "sim/search/list_scheduler.hpp"
#include "sim/search/problem.hpp"

namespace ppsched::search {

enum class Objective : uint8_t {
  Makespan,  // the global makespan (first start to last end over all ranks)
  Span,      // ZB's: the longest rank span (its first task to its last)
};

// Compared lexicographically: the objective, the other objective, then the sum over ranks of
// the objective's per-rank measure (it steers the local search across plateaus of the max).
struct Score {
  double primary = 0, secondary = 0, tertiary = 0;
  bool operator<(const Score& o) const {
    if (primary < o.primary - 1e-9) return true;
    if (primary > o.primary + 1e-9) return false;
    if (secondary < o.secondary - 1e-9) return true;
    if (secondary > o.secondary + 1e-9) return false;
    return tertiary < o.tertiary - 1e-9;
  }
  bool operator<=(const Score& o) const { return !(o < *this); }
};
// steer: fill the tertiary key (else 0, so plateaus of the first two keys are walked freely).
Score score_of(const Evaluation& e, Objective obj, bool steer = true);

struct SearchSettings {
  Objective objective = Objective::Makespan;
  long iterations = 20000;   // local-search moves per job
  int restarts = 4;          // local-search jobs per problem (from the best distinct seeds)
  int rounds = 1;            // local-search rounds, each from the best distinct orders of the last
  uint64_t seed = 1;
  int threads = 1;           // 0 = hardware concurrency
  double seconds = 0;        // 0 = no time limit
  long des_iterations = 300;  // tune: hill-climbing moves timed by the DES after the search
  // Called from one thread at a time with the best score so far and the elapsed seconds.
  std::function<void(double best, double elapsed)> progress;
};

// What improved an order after its seed.
enum class Improvement : uint8_t {
  Search,     // the local search on orders (search())
  GapsFilled, // building blocks' gap filling (fill_gaps())
  DesSearch,  // the hill climb timed by the DES (des_refine())
};

// How an order or a leaderboard entry was made: its seed and what improved it since. Callers
// decide by the fields; text() is how reports word it.
struct Origin {
  enum class Seed : uint8_t {
    Family,        // a family's schedule as generated (a leaderboard entry of its own)
    FamilyOrder,   // a family's order, a search seed (detail: the family's label)
    ListScheduler, // the list scheduler (detail: its parameters)
    BuildingBlock, // the controllable-memory paper's building blocks (detail: the block's peak)
  };
  // The outermost improvement as the wording nests them: several rounds of one search read as
  // one "search from", a DES climb after a search as "search and DES search from".
  enum class Outer : uint8_t { None, Search, DesSearch, SearchAndDes, GapsFilled };

  Seed seed = Seed::Family;
  std::string detail;
  std::vector<Improvement> steps;  // in the order they were made

  static Origin of(Seed s, std::string detail = {}) { return Origin{s, std::move(detail), {}}; }
  // A family's schedule as generated: no seed of a search, nothing improved.
  bool is_family() const { return seed == Seed::Family && steps.empty(); }
  // This origin with `i` applied after its steps.
  Origin improved(Improvement i) const;
  Outer outer() const;
  // "family", "family 1f1b", "list: <params>", "building block (peak 3)", "search from ...",
  // "DES search from ...", "search and DES search from ...", "gaps filled in ...".
  std::string text() const;
  bool operator==(const Origin& o) const { return seed == o.seed && detail == o.detail && steps == o.steps; }
  bool operator!=(const Origin& o) const { return !(*this == o); }
};

struct Found {
  Order order;
  Evaluation eval;
  Origin origin;
  double found_at = 0; // seconds into search() when this order was reached
};

struct SearchOutcome {
  Found best;
  std::vector<Found> finalists;  // distinct orders, best first (the best is finalists[0])
  long evaluations = 0;
  double seconds = 0;
  bool stopped_by_time = false;
};

// Local search on one order: moves one task of one rank by a short distance, keeps the order
// if it still runs, fits the caps, and is not worse than late acceptance allows. Deterministic
// for `seed`; stops early when `stop` turns true.
Found improve(const Problem& p, const Found& start, Objective obj, long iterations, uint64_t seed,
              const std::atomic<bool>* stop = nullptr, long* evaluations = nullptr, bool steer = true);

// List scheduler over its parameter space plus `seeds` (e.g. families' orders), then local
// search from the best distinct ones.
SearchOutcome search(const Problem& p, const std::vector<Found>& seeds, const SearchSettings& settings);

// The compute orders of every built-in family (and option) that fits the problem's shape, as
// search starts ("family <name>"); families with other steps (OVERLAP composites, MPipe) are
// left out.
std::vector<Found> family_seeds(const Problem& p);

// What a DES hill climb did: its DES runs, the moves it decided, and whether its time ran out
// before its moves did (then its result depends on timing).
struct DesClimb {
  long evaluations = 0;
  long moves = 0;
  bool stopped_by_time = false;
};
// Hill climbing on the DES makespan (tune's last phase): each start is timed with every check,
// the fastest verified one is improved by the same moves as improve(), a move kept when the
// schedule still verifies and is not slower. `iterations` moves at most; `seconds` (0: none)
// caps it. `threads` time that many moves at once; the decisions are those of one thread
// whatever the count. Deterministic for `seed` (and for any thread count) unless `seconds` stops
// it. `climb`, when given, is added to.
Found des_refine(const Problem& p, const std::vector<Found>& starts, const CostModel& costs, const SimOptions& sim,
                 long iterations, double seconds, uint64_t seed, int threads = 1, DesClimb* climb = nullptr);
// The same hill climb by its definition, from one start: every move timed by the DES with every
// check, one at a time. What des_refine must decide (tests) and what its speed is measured
// against (bench_search's BM_DesSearchPins).
Found des_refine_by_definition(const Problem& p, const Found& start, const CostModel& costs, const SimOptions& sim,
                               long iterations, uint64_t seed, long* evaluations = nullptr);

// ---- the whole tune command --------------------------------------------------------------

struct TuneRequest {
  int pp = 0, micro = 0;
  int vpp_min = 1, vpp_max = 1;
  std::vector<PlacementKind> placements = {PlacementKind::Loop};  // for V > 1
  // The cost model for a stage count (the embedded default splits its layers over the stages;
  // a file fits only the stage counts it describes: check_fits decides, others are skipped).
  std::function<CostModel(int stages)> costs;
  std::optional<double> budget;  // bytes per rank (else the model's capacity_bytes)
  SimOptions sim;                // comm semantics of the DES (memory filled in by tune)
  SearchSettings settings;
  bool families = true;
  // Only these families (generate's names) as candidates and seeds; empty: every family.
  std::vector<std::string> only_families;
  // Run the order search (false: the families alone, each timed by the DES; what the partition
  // search evaluates a layout with).
  bool search_orders = true;
  // Only the orders Megatron-LM runs (ppsched plan --framework megatron): 1F1B, and interleaved
  // 1F1B in micro-batch groups of P (its default microbatch_group_size_per_vp_stage); no order
  // search then, as Megatron cannot run another order.
  bool megatron_orders = false;
  // The accounting the budget is judged by: ppsched's cache model (the DES checks it), or Zero
  // Bubble's (a forward keeps its activation until its weight pass; every candidate's peaks by
  // memory_peaks(), the DES then checks no budget).
  MemoryRule memory_rule = MemoryRule::Ppsched;
  bool keep_schedules = false;  // fill TuneResult::schedules
  // Also measure the search's best order by the settings' objective as its own entry (the DES
  // hill climb after the search chases the makespan only).
  bool keep_search_best = false;
};

struct Entry {
  std::string name;     // "found" / family name with options
  Origin origin;        // how it was made
  bool verified = false;
  std::string verdict;  // "ok", or the first violation / why it was left out
  double makespan_ms = 0;
  double span_ms = 0;   // longest rank span (from the DES slices)
  double bubble = 0;    // mean idle fraction
  std::vector<int64_t> peak_bytes;
  std::vector<double> rule_peak;  // per rank, under a memory rule other than ppsched's (bytes)
  size_t messages = 0;
  int vpp = 1;
  PlacementKind placement = PlacementKind::Loop;
  std::vector<int64_t> layout;  // the body-layer counts per stage it was priced with (with a model), else none
};

struct TuneResult {
  std::vector<Entry> leaderboard;  // sorted by makespan (verified first)
  std::vector<Schedule> schedules;  // leaderboard[i]'s schedule (P2P inserted), with keep_schedules
  int best = -1;                   // index into leaderboard of the best verified entry
  Schedule best_schedule;          // P2P inserted, verified
  RunRecord best_sim;
  LowerBound bound;                // for the best entry's shape
  double gap = 0;                  // best makespan / bound - 1
  double seconds = 0;
  long evaluations = 0;            // orders evaluated, the DES hill climbs' runs among them
  long des_moves = 0;              // moves the DES hill climbs decided (des_refine)
  bool stopped_by_time = false;    // the search or a DES hill climb ran out of --seconds
};

TuneResult tune(const TuneRequest& request);

// The families tune can take as candidates (generate's names, MPipe left out: its tower is
// another workload).
std::vector<std::string> tunable_families();

// Builds `order`'s schedule, verifies it and times it with the DES: an Entry.
Entry measure(const Schedule& s, const CostModel& costs, const SimOptions& sim, RunRecord* out = nullptr);

}  // namespace ppsched::search
