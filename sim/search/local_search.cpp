// The search on orders by the evaluator (search(), improve()): the list scheduler over its
// parameter space and the other seeds, then late-acceptance local search from the best distinct
// ones on the crew. Its jobs are a fixed list, each with its own random stream, merged in job
// order: the outcome is the same for every thread count (sim/search/tune.hpp).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "sim/search/building_blocks.hpp"
#include "sim/search/crew.hpp"
#include "sim/search/random_streams.hpp"
#include "sim/search/tune.hpp"

namespace ppsched::search {

Score score_of(const Evaluation& e, Objective obj, bool steer) {
  double sum = 0;
  if (steer)
    for (double x : obj == Objective::Span ? e.rank_span : e.rank_end) sum += x;
  return obj == Objective::Span ? Score{e.span, e.makespan, sum} : Score{e.makespan, e.span, sum};
}

namespace {

using Clock = std::chrono::steady_clock;

struct Progress {
  std::mutex mu;
  double best = -1;
  Clock::time_point start = Clock::now(), last;
  const std::function<void(double, double)>* callback = nullptr;
  void offer(double v, bool force = false) {
    if (!callback || !*callback) return;
    std::lock_guard<std::mutex> lock(mu);
    const auto now = Clock::now();
    const bool better = best < 0 || v < best - 1e-12;
    if (better) best = v;
    if ((better && now - last > std::chrono::milliseconds(250)) || force) {
      last = now;
      (*callback)(best, std::chrono::duration<double>(now - start).count());
    }
  }
};

thread_local Progress* tl_progress = nullptr;
thread_local const Clock::time_point* tl_start = nullptr;

}  // namespace

Found improve(const Problem& p, const Found& start, Objective obj, long iterations, uint64_t seed,
              const std::atomic<bool>* stop, long* evaluations, bool steer) {
  Found best = start;
  Order cur = start.order;
  Score cs = score_of(start.eval, obj, steer), bs = cs;
  constexpr size_t kHistory = 64;  // late acceptance hill climbing (Burke & Bykov)
  std::vector<Score> history(kHistory, cs);
  std::mt19937_64 rng(mix(seed));
  Workspace ws;
  Evaluation e;
  std::vector<size_t> cumulative;
  size_t total = 0;
  for (const auto& ro : cur) cumulative.push_back(total += ro.size());
  if (total < 2) return best;
  long evals = 0;
  for (long it = 0; it < iterations; ++it) {
    if (stop && (it & 127) == 0 && stop->load(std::memory_order_relaxed)) break;
    const size_t pick = rng() % total;
    const size_t r = static_cast<size_t>(std::upper_bound(cumulative.begin(), cumulative.end(), pick) - cumulative.begin());
    auto& ro = cur[r];
    if (ro.size() < 2) continue;
    const size_t i = pick - (r == 0 ? 0 : cumulative[r - 1]);
    // Short moves most of the time, a long one now and then.
    const uint64_t u = rng();
    const long reach = (u & 7) == 0 ? static_cast<long>(ro.size()) : 1 + static_cast<long>((u >> 3) % 6);
    long d = 1 + static_cast<long>((u >> 8) % static_cast<uint64_t>(reach));
    if ((u >> 40) & 1) d = -d;
    const long j = std::clamp(static_cast<long>(i) + d, 0L, static_cast<long>(ro.size()) - 1);
    if (j == static_cast<long>(i)) continue;
    const bool swap = ((u >> 41) & 3) == 0;
    const size_t a = i, b = static_cast<size_t>(j);
    // With compute overlap in the cost model, now and then pair an F with the task after it
    // (or undo a pair) instead of moving.
    const bool toggle = p.overlap_efficiency > 0 && ((u >> 44) & 7) == 0 && ro[a].kind == Kind::F;
    if (toggle) {
      ro[a].overlap_next = !ro[a].overlap_next;
    } else if (swap) {
      std::swap(ro[a], ro[b]);
    } else if (a < b) {
      std::rotate(ro.begin() + static_cast<long>(a), ro.begin() + static_cast<long>(a) + 1, ro.begin() + static_cast<long>(b) + 1);
    } else {
      std::rotate(ro.begin() + static_cast<long>(b), ro.begin() + static_cast<long>(a), ro.begin() + static_cast<long>(a) + 1);
    }
    ++evals;
    bool accepted = false;
    if (evaluate(p, cur, ws, e)) {
      const Score s = score_of(e, obj, steer);
      if (s <= cs || s <= history[static_cast<size_t>(it) % kHistory]) {
        accepted = true;
        cs = s;
        if (s < bs) {
          bs = s;
          best.order = cur;
          best.eval = e;
          if (tl_start) best.found_at = std::chrono::duration<double>(Clock::now() - *tl_start).count();
          if (tl_progress) tl_progress->offer(s.primary);
        }
      }
    }
    if (!accepted) {  // undo
      if (toggle) {
        ro[a].overlap_next = !ro[a].overlap_next;
      } else if (swap) {
        std::swap(ro[a], ro[b]);
      } else if (a < b) {
        std::rotate(ro.begin() + static_cast<long>(a), ro.begin() + static_cast<long>(b), ro.begin() + static_cast<long>(b) + 1);
      } else {
        std::rotate(ro.begin() + static_cast<long>(b), ro.begin() + static_cast<long>(b) + 1, ro.begin() + static_cast<long>(a) + 1);
      }
    }
    Score& h = history[static_cast<size_t>(it) % kHistory];
    if (cs < h) h = cs;
  }
  if (evaluations) *evaluations += evals;
  // (Several rounds read as one "search from": Origin's wording merges them.)
  if (bs < score_of(start.eval, obj, steer)) best.origin = start.origin.improved(Improvement::Search);
  return best;
}

namespace {

// Sets `stop` once `seconds` have passed (0: never), unless the search finishes first.
class Deadline {
 public:
  Deadline(double seconds, std::atomic<bool>& stop) {
    if (seconds > 0)
      timer_ = std::thread([this, seconds, &stop] {
        std::unique_lock<std::mutex> lock(mu_);
        if (!cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return finished_; })) stop = true;
      });
  }
  ~Deadline() { finish(); }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;
  // The search is done: from here on `stop` is final.
  void finish() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = true;
    }
    cv_.notify_all();
    if (timer_.joinable()) timer_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;  // under mu_
  std::thread timer_;
};

// One search(): its steps share the problem, the settings, the clock, the progress line, the
// time limit and the crew.
class OrderSearch {
 public:
  OrderSearch(const Problem& p, const SearchSettings& st)
      : p_(p), st_(st), deadline_(st.seconds, stop_), crew_(std::max(1, thread_count(st.threads))) {
    progress_.callback = &st.progress;
  }
  SearchOutcome run(const std::vector<Found>& seeds);

 private:
  std::vector<Found> list_scheduler_seeds();
  std::vector<Found> seed_pool(const std::vector<Found>& seeds);
  std::vector<Found> local_search_rounds(std::vector<Found>& starts);
  void rank(std::vector<Found>& orders) const;
  std::vector<Found> best_distinct(const std::vector<Found>& ranked, size_t most) const;
  std::vector<Found> best_distinct_of(const std::vector<Found>& improved, const std::vector<Found>& starts,
                                      size_t most) const;
  size_t restarts() const { return static_cast<size_t>(std::max(0, st_.restarts)); }

  const Problem& p_;
  const SearchSettings& st_;
  const Clock::time_point t0_ = Clock::now();
  Progress progress_;
  std::atomic<bool> stop_{false};
  Deadline deadline_;
  Crew crew_;
  long evaluations_ = 0;
};

SearchOutcome OrderSearch::run(const std::vector<Found>& seeds) {
  SearchOutcome out;
  const std::vector<Found> pool = seed_pool(seeds);
  std::vector<Found> starts = best_distinct(pool, restarts());
  if (!pool.empty()) progress_.offer(score_of(pool.front().eval, st_.objective).primary, true);
  const std::vector<Found> improved = local_search_rounds(starts);
  deadline_.finish();
  out.evaluations = evaluations_;
  out.stopped_by_time = stop_.load();
  out.finalists = best_distinct_of(improved, starts, std::numeric_limits<size_t>::max());
  if (!out.finalists.empty()) {
    out.best = out.finalists.front();
    progress_.offer(score_of(out.best.eval, st_.objective).primary, true);
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
  return out;
}

// The list scheduler over its parameter space, a job per parameter set: the orders that run, in
// the space's order.
std::vector<Found> OrderSearch::list_scheduler_seeds() {
  const std::vector<ListParams> space = list_parameter_space(p_);
  std::vector<std::optional<Found>> listed(space.size());
  crew_.run(space.size(), [&](size_t k, int) {
    if (stop_.load(std::memory_order_relaxed)) return;
    auto order = list_schedule(p_, space[k]);
    if (!order) return;
    Evaluation e = evaluate(p_, *order);
    if (!e.ok) return;
    listed[k] = Found{std::move(*order), std::move(e), Origin::of(Origin::Seed::ListScheduler, space[k].describe()),
                      std::chrono::duration<double>(Clock::now() - t0_).count()};
  });
  evaluations_ += static_cast<long>(space.size());
  std::vector<Found> out;
  for (auto& f : listed)
    if (f) out.push_back(std::move(*f));
  return out;
}

// Every start the local search may take, best first: the list scheduler's orders, on V
// placement the controllable-memory paper's building blocks (repeated), the caller's seeds that
// run, and the best 16 of those with their idle gaps filled (the paper's last reordering step).
std::vector<Found> OrderSearch::seed_pool(const std::vector<Found>& seeds) {
  std::vector<Found> pool = list_scheduler_seeds();
  for (Found& f : building_block_seeds(p_)) pool.push_back(std::move(f));
  for (const Found& s : seeds) {
    Evaluation e = evaluate(p_, s.order);
    if (e.ok) pool.push_back(Found{s.order, e, s.origin});
  }
  rank(pool);
  std::vector<Found> filled;
  // Filling takes long on a large problem: once --seconds is up, the pool goes as it is.
  for (size_t i = 0; i < pool.size() && i < 16 && !stop_.load(std::memory_order_relaxed); ++i) {
    Found f = fill_gaps(p_, pool[i]);
    if (f.order != pool[i].order) filled.push_back(std::move(f));
  }
  for (Found& f : filled) pool.push_back(std::move(f));
  rank(pool);
  return pool;
}

// Local search from the best distinct starts, each twice: once steered by the per-rank sum,
// once walking the plateaus of the objective freely. Each further round starts again from the
// best distinct orders so far, with fresh random streams and acceptance history. Returns the
// last round's results; `starts` ends as that round's starts.
std::vector<Found> OrderSearch::local_search_rounds(std::vector<Found>& starts) {
  std::vector<Found> improved;
  for (int round = 0; round < std::max(1, st_.rounds); ++round) {
    if (round > 0) starts = best_distinct_of(improved, starts, restarts());
    std::vector<std::pair<size_t, uint64_t>> jobs;  // (start, seed of its random stream)
    for (size_t k = 0; k < 2 * starts.size(); ++k)
      jobs.emplace_back(k / 2, mix(st_.seed * 1000003ULL + static_cast<uint64_t>(round) * 7919ULL + k));
    improved.assign(jobs.size(), Found{});
    std::vector<long> round_evals(jobs.size(), 0);
    crew_.run(jobs.size(), [&](size_t k, int) {
      tl_progress = &progress_;
      tl_start = &t0_;
      improved[k] = improve(p_, starts[jobs[k].first], st_.objective, st_.iterations, jobs[k].second, &stop_,
                            &round_evals[k], k % 2 == 0);
      tl_progress = nullptr;
      tl_start = nullptr;
    });
    for (long e : round_evals) evaluations_ += e;
  }
  return improved;
}

// Best first by the objective (steered); stable, so equal scores keep their order.
void OrderSearch::rank(std::vector<Found>& orders) const {
  std::stable_sort(orders.begin(), orders.end(), [&](const Found& a, const Found& b) {
    return score_of(a.eval, st_.objective) < score_of(b.eval, st_.objective);
  });
}

// The first `most` distinct orders of `ranked`.
std::vector<Found> OrderSearch::best_distinct(const std::vector<Found>& ranked, size_t most) const {
  std::vector<Found> out;
  for (const Found& f : ranked) {
    if (out.size() >= most) break;
    if (std::none_of(out.begin(), out.end(), [&](const Found& g) { return g.order == f.order; })) out.push_back(f);
  }
  return out;
}

// The best `most` distinct orders of a round: its results, then its starts (ties to the results).
std::vector<Found> OrderSearch::best_distinct_of(const std::vector<Found>& improved, const std::vector<Found>& starts,
                                                 size_t most) const {
  std::vector<Found> all = improved;
  all.insert(all.end(), starts.begin(), starts.end());
  rank(all);
  return best_distinct(all, most);
}

}  // namespace

SearchOutcome search(const Problem& p, const std::vector<Found>& seeds, const SearchSettings& st) {
  return OrderSearch(p, st).run(seeds);
}

}  // namespace ppsched::search
