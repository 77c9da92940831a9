#include "sim/search/tune.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "checkers/checks.hpp"
#include "model/errors.hpp"
#include "model/generators/generator.hpp"
#include "model/text_format.hpp"
#include "sim/search/building_blocks.hpp"

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

Score score_of(const Evaluation& e, Objective obj, bool steer) {
  double sum = 0;
  if (steer)
    for (double x : obj == Objective::Span ? e.rank_span : e.rank_end) sum += x;
  return obj == Objective::Span ? Score{e.span, e.makespan, sum} : Score{e.makespan, e.span, sum};
}

namespace {

using Clock = std::chrono::steady_clock;

uint64_t mix(uint64_t x) {  // splitmix64: independent streams from (seed, job)
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The one thread crew of tune: the caller and threads - 1 helpers. run(n, job) calls job(k,
// worker) for k in [0, n), worker in [0, threads), and returns when every call has; each job
// writes only its own result. It serves both kinds of work: a few long jobs (the list scheduler's
// parameters, the local searches: seconds each) and many short rounds (a DES hill climb's runs of
// ~0.1 ms, shorter than a thread takes to start or to wake from a condition variable here). So
// between rounds a helper spins (about a millisecond) before it sleeps, and the caller, its own
// share done, spins as long for the helpers' last calls, then sleeps until the last one ends.
class Crew {
 public:
  explicit Crew(int threads) {
    for (int w = 1; w < threads; ++w) helpers_.emplace_back([this, w] { serve(w); });
  }
  ~Crew() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true);
    }
    wake_.notify_all();
    for (auto& h : helpers_) h.join();
  }
  Crew(const Crew&) = delete;
  Crew& operator=(const Crew&) = delete;

  template <class F>
  void run(size_t n, F&& job) {
    if (helpers_.empty() || n <= 1) {  // the caller alone: no helper to wait for
      for (size_t k = 0; k < n; ++k) job(k, 0);
      return;
    }
    const std::function<void(size_t, int)> f = std::forward<F>(job);
    job_ = &f;  // read by the helpers after they see the new round (release below)
    n_ = n;
    next_.store(0);
    busy_.store(helpers_.size());
    round_.fetch_add(1, std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (sleepers_ > 0) wake_.notify_all();
    }
    for (size_t k; (k = next_.fetch_add(1)) < n;) f(k, 0);
    // Short rounds end within the spin; a long job (or a preempted helper) is waited for asleep.
    for (int spin = 0; spin < 2000 && busy_.load(std::memory_order_acquire) > 0; ++spin) relax();
    if (busy_.load(std::memory_order_acquire) > 0) {
      std::unique_lock<std::mutex> lock(mu_);
      done_.wait(lock, [&] { return busy_.load(std::memory_order_acquire) == 0; });
    }
  }

 private:
  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }
  void serve(int w) {
    uint64_t seen = 0;
    while (true) {
      for (int spin = 0; round_.load(std::memory_order_acquire) == seen && !stop_.load(); ++spin) {
        if (spin < 2000) {
          relax();
          continue;
        }
        if (spin < 4000) {
          std::this_thread::yield();
          continue;
        }
        std::unique_lock<std::mutex> lock(mu_);
        ++sleepers_;
        wake_.wait(lock, [&] { return round_.load() != seen || stop_.load(); });
        --sleepers_;
      }
      if (stop_.load()) return;
      seen = round_.load(std::memory_order_acquire);
      const auto* job = job_;
      const size_t n = n_;
      for (size_t k; (k = next_.fetch_add(1)) < n;) (*job)(k, w);
      if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        // The last helper of the round: the caller may be asleep (it checks busy_ under mu_).
        { std::lock_guard<std::mutex> lock(mu_); }
        done_.notify_one();
      }
    }
  }
  std::mutex mu_;
  std::condition_variable wake_, done_;
  int sleepers_ = 0;  // under mu_
  const std::function<void(size_t, int)>* job_ = nullptr;
  size_t n_ = 0;
  std::atomic<size_t> next_{0}, busy_{0};
  std::atomic<uint64_t> round_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> helpers_;
};

int thread_count(int requested) {
  if (requested > 0) return requested;
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

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
