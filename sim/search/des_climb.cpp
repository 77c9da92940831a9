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

// The DES makespan of `order` as a schedule, run with every check (o: no trace), or -1 when
// the run does not complete or the schedule does not verify.
double checked_makespan(const Problem& p, const Order& order, const CostModel& costs, const SimOptions& o) {
  const RunRecord r = simulate(to_schedule(p, order, "candidate"), costs, o);
  return r.completed && r.check.ok() ? r.makespan_ms : -1.0;
}

}  // namespace

Found des_refine(const Problem& p, const std::vector<Found>& starts, const CostModel& costs, const SimOptions& sim,
                 long iterations, double seconds, uint64_t seed, int threads, DesClimb* climb) {
  const auto t0 = Clock::now();
  DesClimb none;
  DesClimb& c = climb ? *climb : none;
  SimOptions o = sim;
  o.record_trace = false;
  auto time_of = [&](const Order& order) {
    ++c.evaluations;
    return checked_makespan(p, order, costs, o);
  };
  // A move is timed without the checks first: most are slower and dropped; one that would be
  // kept is verified then (the same decisions as timing every move with them, for less).
  SimOptions screen = o;
  screen.timing_only = true;
  auto time_if_kept = [&](const Order& order, double bound_ms) -> double {
    const Schedule s = to_schedule(p, order, "candidate");
    const RunRecord r = simulate(s, costs, screen);
    if (!r.completed || r.makespan_ms > bound_ms) return -1.0;
    return verify(s, o.check).ok() ? r.makespan_ms : -1.0;
  };
  Found best;
  double best_ms = -1;
  for (const Found& f : starts) {
    if (!evaluate(p, f.order).ok) continue;
    const double ms = time_of(f.order);
    if (ms >= 0 && (best_ms < 0 || ms < best_ms - 1e-12)) best_ms = ms, best = f;
  }
  if (best_ms < 0) return {};
  Order cur = best.order;
  MoveStream stream(cur, seed);
  // The moves are tried `threads` at a time, each against the current order, on that many
  // threads; their verdicts are taken in draw order, and after a kept move the ones drawn after
  // it are tried again against the new order. So the decisions (and `evaluations`, which counts
  // only the verdicts taken) are those of one thread, whatever the count.
  struct Tried {
    bool timed = false;  // reached the DES (not refused by the evaluator)
    double ms = -1;      // kept if >= 0 and not slower
    Order trial;
    std::exception_ptr error;
  };
  const size_t width = static_cast<size_t>(std::max(1, threads));
  std::vector<Workspace> ws(width);
  std::vector<Evaluation> ev(width);
  std::vector<Tried> tried(width);
  std::deque<Move> pending;
  Crew crew(std::max(1, threads));
  // A round waits for its slowest move, and on a busy machine for a preempted helper (a whole
  // time slice of another process): rounds run on every thread only while that decides moves
  // faster than one thread alone. Each way's seconds per move decided are followed (a moving
  // average); the first rounds measure both, and then the slower way is tried again for two
  // rounds after 16 rounds, 32, 64, ... (back to 16 when the faster way changes). Only the speed
  // depends on this: the decisions are the same either way.
  double per_move[2] = {0, 0};  // [wide]; 0: not measured yet
  long round = 0, next_try = 16, try_every = 16;
  bool wide = width > 1;
  bool moved = false;
  long drawn = 0;
  while (stream.any()) {
    bool this_wide = wide;
    if (width > 1 && round < 4) this_wide = round >= 2;  // two rounds each way first
    else if (width > 1 && round >= next_try) this_wide = !wide;  // the slower way, again
    const size_t round_width = this_wide ? width : 1;
    if (seconds > 0 && std::chrono::duration<double>(Clock::now() - t0).count() > seconds) {
      c.stopped_by_time = c.stopped_by_time || drawn < iterations || !pending.empty();
      break;
    }
    while (pending.size() < round_width && drawn < iterations) {
      ++drawn;
      if (const auto m = stream.next()) pending.push_back(*m);
    }
    if (pending.empty()) break;
    const size_t n = std::min(pending.size(), round_width);
    const auto round_start = Clock::now();
    crew.run(n, [&](size_t k, int worker) {
      Tried& t = tried[k];
      t.timed = false;
      t.ms = -1;
      t.error = nullptr;
      try {
        apply(p, pending[k], cur, t.trial);
        if (!evaluate(p, t.trial, ws[static_cast<size_t>(worker)], ev[static_cast<size_t>(worker)]))
          return;  // a cycle or over the cap: no DES needed
        t.timed = true;
        t.ms = time_if_kept(t.trial, best_ms + 1e-12);
      } catch (...) {
        t.error = std::current_exception();
      }
    });
    size_t taken = n;
    for (size_t k = 0; k < n; ++k) {
      Tried& t = tried[k];
      if (t.error) std::rethrow_exception(t.error);
      if (t.timed) ++c.evaluations;
      if (t.ms >= 0 && t.ms <= best_ms + 1e-12) {
        moved = moved || t.ms < best_ms - 1e-12;
        best_ms = t.ms;
        std::swap(cur, t.trial);
        taken = k + 1;
        break;
      }
    }
    pending.erase(pending.begin(), pending.begin() + static_cast<long>(taken));
    const double x = std::chrono::duration<double>(Clock::now() - round_start).count() / static_cast<double>(taken);
    double& avg = per_move[this_wide];
    avg = avg == 0 ? x : 0.75 * avg + 0.25 * x;
    if (width > 1 && (round == 3 || round == next_try + 1)) {  // a measurement of both is complete
      const bool faster = per_move[1] < per_move[0];
      try_every = faster == wide && round > 3 ? std::min<long>(2 * try_every, 4096) : 16;
      wide = faster;
      next_try = round + 1 + try_every;
    }
    ++round;
  }
  c.moves += drawn - static_cast<long>(pending.size());
  best.order = cur;
  best.eval = evaluate(p, cur);
  if (moved) best.origin = best.origin.improved(Improvement::DesSearch);
  return best;
}

Found des_refine_by_definition(const Problem& p, const Found& start, const CostModel& costs, const SimOptions& sim,
                               long iterations, uint64_t seed, long* evaluations) {
  SimOptions o = sim;
  o.record_trace = false;
  auto time_of = [&](const Order& order) {
    if (evaluations) ++*evaluations;
    return checked_makespan(p, order, costs, o);
  };
  if (!evaluate(p, start.order).ok) return {};
  double best_ms = time_of(start.order);
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
    const double ms = time_of(trial);
    if (ms >= 0 && ms <= best_ms + 1e-12) {
      moved = moved || ms < best_ms - 1e-12;
      best_ms = ms;
      std::swap(cur, trial);
    }
  }
  Found best = start;
  best.order = cur;
  best.eval = evaluate(p, cur);
  if (moved) best.origin = best.origin.improved(Improvement::DesSearch);
  return best;
}

}  // namespace ppsched::search
