// The search problem behind `ppsched tune`: the compute tasks of one training step (a forward,
// and a fused or split backward, per stage and micro-batch), what each costs, how long each
// cross-rank hand-over takes, what each task does to a rank's memory, and each rank's cap.
//
// An Order is a per-rank sequence of tasks. evaluate() times it as soon as possible (each task
// starts when its rank is free and its inputs have arrived), the timing model of the Zero
// Bubble scheduler (reference schedule_search.md §3) and of ppsched's DES with --overlap-p2p
// and payloads under the eager threshold. Memory is counted per rank at task boundaries (the
// running sum after each task), as both ZB and ppsched's cache walk do.
//
// to_schedule() turns an order into an ordinary Schedule whose P2P steps come from the one
// insertion pass (schedule/comm_insertion.hpp), so it is verified and simulated like any other.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "schedule/schedule.hpp"
#include "sim/cost_model.hpp"

namespace ppsched::search {

// B: fused backward; I/W: the split backward's halves. A split problem (F/I/W) may also hold a
// B: both halves at once (DualPipeV's orders mix them), costing b + w and counted as two tasks.
enum class Kind : uint8_t { F, B, I, W };

struct Task {
  Kind kind = Kind::F;
  int32_t stage = 0;
  int32_t micro = 0;
  // An F that runs together with the next task of its rank (a B or I of another micro) as one
  // OVERLAP_F_B step: both start when both inputs are there and take max + (1 - efficiency) x min.
  bool overlap_next = false;
  bool operator==(const Task& o) const {
    return kind == o.kind && stage == o.stage && micro == o.micro && overlap_next == o.overlap_next;
  }
  bool operator!=(const Task& o) const { return !(*this == o); }
};

using Order = std::vector<std::vector<Task>>;  // per rank

inline constexpr double kNoCap = std::numeric_limits<double>::infinity();

// Which memory model the search counts in (both: running sum after each task, per rank).
enum class MemoryRule : uint8_t {
  // ppsched's cache model (checkers/caches.cpp): FWD keeps activation bytes until its
  // backward; a split backward's BWD_INPUT frees them and keeps half for BWD_WEIGHT.
  Ppsched,
  // Zero Bubble's model (schedule_search.md §4): a forward holds one activation until its
  // weight pass (F +a, I 0, W -a); a fused backward frees it.
  ZeroBubble,
};

struct Problem {
  int ranks = 0, stages = 0, micros = 0;
  bool split = true;  // F/I/W; false: F/B
  Placement placement;
  // per (stage, micro), index stage * micros + micro
  std::vector<double> f, b, w;      // b: BWD_INPUT (split) or BWD (fused); w unused when fused
  std::vector<double> comm_fwd;     // F(s,m) end -> F(s+1,m) may start (0 on the same rank)
  std::vector<double> comm_bwd;     // B(s,m) end -> B(s-1,m) may start
  // per stage: memory delta of F, of B or I, of W (bytes, or activations in ZB units)
  std::vector<double> mem_f, mem_b, mem_w;
  std::vector<double> cap;          // per rank (kNoCap: none)
  MemoryRule memory_rule = MemoryRule::Ppsched;
  std::string memory_unit = "bytes";
  // The cost model's overlap_efficiency: > 0 lets the search pair an F with a backward
  // (OVERLAP_F_B); 0 (ZB's model, or a model without overlap) never pairs.
  double overlap_efficiency = 0;
  // A data-parallel run (DP > 1): to_schedule() adds PyTorch's FSDP steps (add_fsdp_steps), so
  // the DES prices the gradient sync (and, under FSDP, the gathers) as a run executes them.
  // evaluate() leaves them out: the DES decides between orders that differ by them.
  bool data_parallel_steps = false;

  size_t at(int stage, int micro) const { return static_cast<size_t>(stage) * static_cast<size_t>(micros) + static_cast<size_t>(micro); }
  int rank_of(int stage) const { return placement.stage_to_rank[static_cast<size_t>(stage)]; }
  double cost(const Task& t) const;
  double mem_delta(const Task& t) const;
  // How many of task_count()'s tasks `t` stands for (a B in a split problem: its I and W).
  size_t halves(const Task& t) const { return t.kind == Kind::B && split ? 2 : 1; }
  size_t task_count() const { return static_cast<size_t>(stages) * static_cast<size_t>(micros) * (split ? 3 : 2); }
};

// The problem a cost model describes for P ranks, V stages per rank (placement), M micros.
// Times are the cost model's compute prices; a hand-over costs the link's latency plus the
// payload's bytes over its bandwidth; memory follows `rule` with the model's kept activation
// bytes per stage (and, under ppsched's rule, its weight-gradient bytes); the cap is `budget`
// (bytes per rank), else the model's capacity_bytes, less what the rank holds for the whole
// step (its stages' weights, gradients and optimizer state, sharded as `dp` says).
Problem problem_from_costs(const CostModel& costs, int ranks, int vpp, int micros, PlacementKind placement,
                           bool split, MemoryRule rule, std::optional<double> budget,
                           const DataParallelOptions& dp = {});

// Zero Bubble's own inputs (schedule_search.md §2): per-stage f, b, w, one latency c on every
// cross-stage edge, memory in activations (F +1, I 0, W -1), a cap of `cap_activations`.
Problem zb_problem(int stages, int micros, const std::vector<double>& f, const std::vector<double>& b,
                   const std::vector<double>& w, double c, double cap_activations);
// ZB-V's inputs (schedule_search.md §6): P ranks, two chunks each in V placement, scalar chunk
// costs, c on every hop between ranks (none at the turn), memory in chunk activations per rank.
Problem zbv_problem(int ranks, int micros, double f, double b, double w, double c, double cap_chunk_activations);

// Each rank's peak of kept activations in `s` under `rule` (bytes, from the memory model's
// activation per stage), counted at step boundaries as evaluate() does: a forward keeps its
// activation, a fused backward frees it, a split backward's halves follow the rule. Works on any
// schedule (composites counted sub-step by sub-step); other steps do not count.
std::vector<double> memory_peaks(const Schedule& s, const MemoryModel& memory, MemoryRule rule);

struct Evaluation {
  bool ok = false;          // every task ran (no cycle) and every rank stayed under its cap
  bool over_cap = false;    // ran, but a rank went over its cap
  double makespan = 0;      // global: last end (the first task starts at 0)
  double span = 0;          // ZB's objective: max over ranks of (last end - first start)
  std::vector<double> peak; // per rank, in the problem's memory unit
  std::vector<double> rank_span;
  std::vector<double> rank_end;
};

// Reusable buffers: evaluate() allocates nothing once they have grown.
struct Workspace {
  std::vector<double> end_f, end_b, end_w;
  std::vector<size_t> pos;
  std::vector<double> free_at, first_start, mem, peak;
};

Evaluation evaluate(const Problem& p, const Order& order);
// The same into `out`, reusing `ws`; returns out.ok.
bool evaluate(const Problem& p, const Order& order, Workspace& ws, Evaluation& out);

// Start and end time of every task of an order (for tests and pictures): per rank, in order.
std::vector<std::vector<std::pair<double, double>>> task_times(const Problem& p, const Order& order);

// Lower bounds of schedule_search.md §5, generalised to per-stage costs and per-edge latency.
struct LowerBound {
  double span = 0, makespan = 0;
  std::string span_binding, makespan_binding;  // which bound binds, in words ("busy s3", ...)
  std::string formula;                          // the formulas, for the output
};
LowerBound lower_bound(const Problem& p);

// The order as a Schedule: compute steps per rank, P2P steps inserted (Alignment::Auto), and
// the FSDP steps of a data-parallel problem (data_parallel_steps).
Schedule to_schedule(const Problem& p, const Order& order, const std::string& name);
// The compute order of a schedule (P2P and FSDP steps dropped); nullopt when it has other steps (composites,
// data or tower steps) or does not match the problem's shape. A full backward in a split
// problem stays one B task, so DualPipeV's order (full and split backwards) seeds the F/I/W search.
std::optional<Order> order_of(const Schedule& s, const Problem& p);

std::string to_string(const Task& t);

}  // namespace ppsched::search
