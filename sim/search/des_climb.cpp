// tune's last phase, the hill climb timed by the DES (des_refine()), and its definition
// (des_refine_by_definition()): the evaluator does not see rendezvous waits; the DES does.
#include <algorithm>
#include <chrono>
#include <deque>
#include <exception>
#include <optional>
#include <random>

#include "checkers/checks.hpp"
#include "sim/search/crew.hpp"
#include "sim/search/random_streams.hpp"
#include "sim/search/tune.hpp"

namespace ppsched::search {

namespace {

using Clock = std::chrono::steady_clock;

// tune's DES moves: task i of rank r goes to position j, at most 4 away, or (u's bits 12-13
// zero, a forward, a cost model with overlap) toggles its pairing with the next task as one
// OVERLAP step. Drawn in order from the seed's stream; a draw does not depend on the order it
// is applied to (moves keep each rank's length).
struct Move {
  size_t r, i, j;
  uint64_t u;
};
class MoveStream {
 public:
  MoveStream(const Order& o, uint64_t seed) : rng_(mix(seed ^ 0xd35ULL)) {
    for (const auto& ro : o) cumulative_.push_back(total_ += ro.size());
  }
  bool any() const { return total_ > 1; }
  // The next move; nullopt when it moves nothing (it still counts as a move decided).
  std::optional<Move> next() {
    const size_t pick = rng_() % total_;
    const size_t r = static_cast<size_t>(std::upper_bound(cumulative_.begin(), cumulative_.end(), pick) - cumulative_.begin());
    const size_t first = r == 0 ? 0 : cumulative_[r - 1];
    const size_t i = pick - first;
    const uint64_t u = rng_();
    long d = 1 + static_cast<long>(u % 4);
    if ((u >> 8) & 1) d = -d;
    const long j = std::clamp(static_cast<long>(i) + d, 0L, static_cast<long>(cumulative_[r] - first) - 1);
    if (j == static_cast<long>(i)) return std::nullopt;
    return Move{r, i, static_cast<size_t>(j), u};
  }

 private:
  std::mt19937_64 rng_;
  size_t total_ = 0;
  std::vector<size_t> cumulative_;
};

// `cur` with move m, into trial's own buffers.
void apply(const Problem& p, const Move& m, const Order& cur, Order& trial) {
  trial = cur;
  auto& tr = trial[m.r];
  if (p.overlap_efficiency > 0 && ((m.u >> 12) & 3) == 0 && tr[m.i].kind == Kind::F) {
    tr[m.i].overlap_next = !tr[m.i].overlap_next;
  } else {
    const Task t = tr[m.i];
    tr.erase(tr.begin() + static_cast<long>(m.i));
    tr.insert(tr.begin() + static_cast<long>(m.j), t);
  }
}

// How a climb times an order: the DES makespan of the order as a schedule (no trace), or -1
// when the run does not complete or the schedule does not verify. Each checked() run counts in
// `evaluations` (when given).
class DesTiming {
 public:
  DesTiming(const Problem& p, const CostModel& costs, const SimOptions& sim, long* evaluations)
      : p_(p), costs_(costs), o_(sim), evaluations_(evaluations) {
    o_.record_trace = false;
    screen_ = o_;
    screen_.timing_only = true;
  }
  // Run with every check.
  double checked(const Order& order) const {
    if (evaluations_) ++*evaluations_;
    const RunRecord r = simulate(to_schedule(p_, order, "candidate"), costs_, o_);
    return r.completed && r.check.ok() ? r.makespan_ms : -1.0;
  }
  // For a move the climb keeps only when not slower than bound_ms: timed without the checks
  // first (most moves are slower and dropped), verified only when it would be kept. The same
  // verdict as checked() for a kept move, for less (-1 for any other).
  double if_kept(const Order& order, double bound_ms) const {
    const Schedule s = to_schedule(p_, order, "candidate");
    const RunRecord r = simulate(s, costs_, screen_);
    if (!r.completed || r.makespan_ms > bound_ms) return -1.0;
    return verify(s, o_.check).ok() ? r.makespan_ms : -1.0;
  }

 private:
  const Problem& p_;
  const CostModel& costs_;
  SimOptions o_, screen_;
  long* evaluations_;
};

// Whether a climb's round runs on every thread or on the caller alone. A round waits for its
// slowest move, and on a busy machine for a preempted helper (a whole time slice of another
// process): rounds run on every thread only while that decides moves faster than one thread
// alone. Each way's seconds per move decided are followed (a moving average); the first rounds
// measure both, and then the slower way is tried again for two rounds after 16 rounds, 32, 64,
// ... (back to 16 when the faster way changes). Only the speed depends on this: the decisions
// are the same either way.
class RoundWidth {
 public:
  explicit RoundWidth(size_t threads) : threads_(threads), wide_(threads > 1) {}
  // How many moves the next round tries at once.
  size_t next() {
    this_wide_ = wide_;
    if (threads_ > 1 && round_ < 4) this_wide_ = round_ >= 2;  // two rounds each way first
    else if (threads_ > 1 && round_ >= next_try_) this_wide_ = !wide_;  // the slower way, again
    return this_wide_ ? threads_ : 1;
  }
  // The round next() sized took `seconds_per_move` per move decided.
  void done(double seconds_per_move) {
    double& avg = per_move_[this_wide_];
    avg = avg == 0 ? seconds_per_move : 0.75 * avg + 0.25 * seconds_per_move;
    if (threads_ > 1 && (round_ == 3 || round_ == next_try_ + 1)) {  // a measurement of both is complete
      const bool faster = per_move_[1] < per_move_[0];
      try_every_ = faster == wide_ && round_ > 3 ? std::min<long>(2 * try_every_, 4096) : 16;
      wide_ = faster;
      next_try_ = round_ + 1 + try_every_;
    }
    ++round_;
  }

 private:
  const size_t threads_;
  double per_move_[2] = {0, 0};  // [wide]; 0: not measured yet
  long round_ = 0, next_try_ = 16, try_every_ = 16;
  bool wide_, this_wide_ = false;
};

// The climb from its start: moves are tried `threads` at a time, each against the current
// order, on that many threads; their verdicts are taken in draw order, and after a kept move the
// ones drawn after it are tried again against the new order. So the decisions (and the
// evaluations, which count only the verdicts taken) are those of one thread, whatever the count.
class ParallelClimb {
 public:
  ParallelClimb(const Problem& p, const DesTiming& timing, Order start, double start_ms, uint64_t seed, int threads,
                DesClimb& climb)
      : p_(p), timing_(timing), cur_(std::move(start)), best_ms_(start_ms), stream_(cur_, seed), c_(climb),
        width_(static_cast<size_t>(std::max(1, threads))), ws_(width_), ev_(width_), tried_(width_),
        crew_(std::max(1, threads)), round_width_(width_) {}
  // Up to `iterations` moves decided, until `seconds` (0: none) have passed since t0.
  void run(long iterations, double seconds, Clock::time_point t0);
  const Order& order() const { return cur_; }
  bool moved() const { return moved_; }

 private:
  struct Tried {
    bool timed = false;  // reached the DES (not refused by the evaluator)
    double ms = -1;      // kept if >= 0 and not slower
    Order trial;
    std::exception_ptr error;
  };
  void try_pending(size_t n);
  size_t take_verdicts(size_t n);

  const Problem& p_;
  const DesTiming& timing_;
  Order cur_;
  double best_ms_;
  MoveStream stream_;
  DesClimb& c_;
  const size_t width_;
  std::vector<Workspace> ws_;  // per worker
  std::vector<Evaluation> ev_;
  std::vector<Tried> tried_;   // per move of a round
  std::deque<Move> pending_;   // drawn, not decided yet
  Crew crew_;
  RoundWidth round_width_;
  bool moved_ = false;
  long drawn_ = 0;
};

void ParallelClimb::run(long iterations, double seconds, Clock::time_point t0) {
  while (stream_.any()) {
    const size_t round_width = round_width_.next();
    if (seconds > 0 && std::chrono::duration<double>(Clock::now() - t0).count() > seconds) {
      c_.stopped_by_time = c_.stopped_by_time || drawn_ < iterations || !pending_.empty();
      break;
    }
    while (pending_.size() < round_width && drawn_ < iterations) {
      ++drawn_;
      if (const auto m = stream_.next()) pending_.push_back(*m);
    }
    if (pending_.empty()) break;
    const size_t n = std::min(pending_.size(), round_width);
    const auto round_start = Clock::now();
    try_pending(n);
    const size_t taken = take_verdicts(n);
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<long>(taken));
    round_width_.done(std::chrono::duration<double>(Clock::now() - round_start).count() / static_cast<double>(taken));
  }
  c_.moves += drawn_ - static_cast<long>(pending_.size());
}

// The first n pending moves, each against the current order, on the crew.
void ParallelClimb::try_pending(size_t n) {
  crew_.run(n, [&](size_t k, int worker) {
    Tried& t = tried_[k];
    t.timed = false;
    t.ms = -1;
    t.error = nullptr;
    try {
      apply(p_, pending_[k], cur_, t.trial);
      if (!evaluate(p_, t.trial, ws_[static_cast<size_t>(worker)], ev_[static_cast<size_t>(worker)]))
        return;  // a cycle or over the cap: no DES needed
      t.timed = true;
      t.ms = timing_.if_kept(t.trial, best_ms_ + 1e-12);
    } catch (...) {
      t.error = std::current_exception();
    }
  });
}

// The verdicts in draw order, up to and with the first kept move (the later ones were tried
// against the order it replaces): how many were taken.
size_t ParallelClimb::take_verdicts(size_t n) {
  for (size_t k = 0; k < n; ++k) {
    Tried& t = tried_[k];
    if (t.error) std::rethrow_exception(t.error);
    if (t.timed) ++c_.evaluations;
    if (t.ms >= 0 && t.ms <= best_ms_ + 1e-12) {
      moved_ = moved_ || t.ms < best_ms_ - 1e-12;
      best_ms_ = t.ms;
      std::swap(cur_, t.trial);
      return k + 1;
    }
  }
  return n;
}

// The outcome of a climb from `start`: its order (the evaluator's timing) and, when a move made
// it faster, the DES search in its origin.
Found climbed(const Problem& p, Found start, const Order& order, bool moved) {
  start.order = order;
  start.eval = evaluate(p, order);
  if (moved) start.origin = start.origin.improved(Improvement::DesSearch);
  return start;
}

}  // namespace

Found des_refine(const Problem& p, const std::vector<Found>& starts, const CostModel& costs, const SimOptions& sim,
                 long iterations, double seconds, uint64_t seed, int threads, DesClimb* climb) {
  const auto t0 = Clock::now();
  DesClimb none;
  DesClimb& c = climb ? *climb : none;
  const DesTiming timing(p, costs, sim, &c.evaluations);
  // The fastest start that runs and verifies, timed with every check.
  Found best;
  double best_ms = -1;
  for (size_t k = 0; k < starts.size(); ++k) {
    const Found& f = starts[k];
    // Out of time with a start in hand: the later starts are left untimed (and the result then
    // depends on timing).
    if (best_ms >= 0 && seconds > 0 && std::chrono::duration<double>(Clock::now() - t0).count() > seconds) {
      c.stopped_by_time = true;
      break;
    }
    if (!evaluate(p, f.order).ok) continue;
    const double ms = timing.checked(f.order);
    if (ms >= 0 && (best_ms < 0 || ms < best_ms - 1e-12)) best_ms = ms, best = f;
  }
  if (best_ms < 0) return {};
  ParallelClimb climber(p, timing, best.order, best_ms, seed, threads, c);
  climber.run(iterations, seconds, t0);
  return climbed(p, std::move(best), climber.order(), climber.moved());
}

Found des_refine_by_definition(const Problem& p, const Found& start, const CostModel& costs, const SimOptions& sim,
                               long iterations, uint64_t seed, long* evaluations) {
  const DesTiming timing(p, costs, sim, evaluations);
  if (!evaluate(p, start.order).ok) return {};
  double best_ms = timing.checked(start.order);
  if (best_ms < 0) return {};
  Order cur = start.order, trial;
  MoveStream stream(cur, seed);
  Workspace ws;
  Evaluation e;
  bool moved = false;
  for (long it = 0; it < iterations && stream.any(); ++it) {
    const auto m = stream.next();
    if (!m) continue;
    apply(p, *m, cur, trial);
    if (!evaluate(p, trial, ws, e)) continue;
    const double ms = timing.checked(trial);
    if (ms >= 0 && ms <= best_ms + 1e-12) {
      moved = moved || ms < best_ms - 1e-12;
      best_ms = ms;
      std::swap(cur, trial);
    }
  }
  return climbed(p, start, cur, moved);
}

}  // namespace ppsched::search
