// The search on orders by the evaluator (search(), improve()): the list scheduler over its
// parameter space and the other seeds, then late-acceptance local search from the best distinct
// ones on the crew. Its jobs are a fixed list, each with its own random stream, merged in job
// order: the outcome is the same for every thread count (sim/search/tune.hpp).
#include <algorithm>
#include <chrono>
#include <condition_variable>
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

SearchOutcome search(const Problem& p, const std::vector<Found>& seeds, const SearchSettings& st) {
  SearchOutcome out;
  const auto t0 = Clock::now();
  Progress progress;
  progress.callback = &st.progress;
  std::atomic<bool> stop{false};
  const int threads = thread_count(st.threads);
  std::thread timer;
  std::mutex timer_mu;
  std::condition_variable timer_cv;
  bool finished = false;
  if (st.seconds > 0) {
    timer = std::thread([&] {
      std::unique_lock<std::mutex> lock(timer_mu);
      if (!timer_cv.wait_for(lock, std::chrono::duration<double>(st.seconds), [&] { return finished; })) stop = true;
    });
  }
  // 1. The list scheduler over its parameter space.
  const std::vector<ListParams> space = list_parameter_space(p);
  std::vector<std::optional<Found>> listed(space.size());
  Crew crew(std::max(1, threads));
  crew.run(space.size(), [&](size_t k, int) {
    if (stop.load(std::memory_order_relaxed)) return;
    auto order = list_schedule(p, space[k]);
    if (!order) return;
    Evaluation e = evaluate(p, *order);
    if (!e.ok) return;
    listed[k] = Found{std::move(*order), std::move(e), Origin::of(Origin::Seed::ListScheduler, space[k].describe()),
                      std::chrono::duration<double>(Clock::now() - t0).count()};
  });
  std::vector<Found> pool;
  for (auto& f : listed)
    if (f) pool.push_back(std::move(*f));
  out.evaluations += static_cast<long>(space.size());
  // 1b. On V placement, the controllable-memory paper's building blocks, repeated.
  for (Found& f : building_block_seeds(p)) pool.push_back(std::move(f));
  for (const Found& s : seeds) {
    Evaluation e = evaluate(p, s.order);
    if (e.ok) pool.push_back(Found{s.order, e, s.origin});
  }
  auto by_score = [&](const Found& a, const Found& b) {
    return score_of(a.eval, st.objective) < score_of(b.eval, st.objective);
  };
  std::stable_sort(pool.begin(), pool.end(), by_score);
  // 1c. The best few with their idle gaps filled (the paper's last reordering step).
  {
    std::vector<Found> filled;
    for (size_t i = 0; i < pool.size() && i < 16; ++i) {
      Found f = fill_gaps(p, pool[i]);
      if (f.order != pool[i].order) filled.push_back(std::move(f));
    }
    for (Found& f : filled) pool.push_back(std::move(f));
    std::stable_sort(pool.begin(), pool.end(), by_score);
  }
  std::vector<Found> starts;
  for (const Found& f : pool) {
    if (static_cast<int>(starts.size()) >= st.restarts) break;
    bool dup = std::any_of(starts.begin(), starts.end(), [&](const Found& g) { return g.order == f.order; });
    if (!dup) starts.push_back(f);
  }
  if (!pool.empty()) progress.offer(score_of(pool.front().eval, st.objective).primary, true);
  // 2. Local search from the best distinct starts, each twice: once steered by the per-rank
  // sum, once walking the plateaus of the objective freely. Each further round starts again
  // from the best distinct orders so far, with fresh random streams and acceptance history.
  std::vector<Found> improved;
  std::vector<long> evals;
  for (int round = 0; round < std::max(1, st.rounds); ++round) {
    if (round > 0) {
      std::vector<Found> so_far = improved;
      so_far.insert(so_far.end(), starts.begin(), starts.end());
      std::stable_sort(so_far.begin(), so_far.end(), by_score);
      starts.clear();
      for (const Found& f : so_far) {
        if (static_cast<int>(starts.size()) >= st.restarts) break;
        if (std::none_of(starts.begin(), starts.end(), [&](const Found& g) { return g.order == f.order; })) starts.push_back(f);
      }
    }
    std::vector<std::pair<size_t, uint64_t>> jobs;
    for (size_t k = 0; k < 2 * starts.size(); ++k)
      jobs.emplace_back(k / 2, mix(st.seed * 1000003ULL + static_cast<uint64_t>(round) * 7919ULL + k));
    improved.assign(jobs.size(), Found{});
    std::vector<long> round_evals(jobs.size(), 0);
    crew.run(jobs.size(), [&](size_t k, int) {
      tl_progress = &progress;
      tl_start = &t0;
      improved[k] = improve(p, starts[jobs[k].first], st.objective, st.iterations, jobs[k].second, &stop, &round_evals[k], k % 2 == 0);
      tl_progress = nullptr;
      tl_start = nullptr;
    });
    evals.insert(evals.end(), round_evals.begin(), round_evals.end());
  }
  for (long e : evals) out.evaluations += e;
  {
    std::lock_guard<std::mutex> lock(timer_mu);
    finished = true;
  }
  timer_cv.notify_all();
  if (timer.joinable()) timer.join();
  out.stopped_by_time = stop.load();
  std::vector<Found> all = improved;
  all.insert(all.end(), starts.begin(), starts.end());
  std::stable_sort(all.begin(), all.end(), by_score);
  for (Found& f : all) {
    bool dup = std::any_of(out.finalists.begin(), out.finalists.end(), [&](const Found& g) { return g.order == f.order; });
    if (!dup) out.finalists.push_back(std::move(f));
  }
  if (!out.finalists.empty()) {
    out.best = out.finalists.front();
    progress.offer(score_of(out.best.eval, st.objective).primary, true);
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

}  // namespace ppsched::search
