#include "sim/search/partition.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <utility>

#include "schedule/errors.hpp"
#include "workload/layout.hpp"
#include "workload/stage_plan.hpp"

namespace ppsched::search {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();

// A layout's score: fitting first, then the makespan (fitting) or how far the smallest peak is
// over the cap (not fitting: the walk leads back under it).
struct LayoutScore {
  bool fits = false;
  double value = kInf;
  std::vector<double> critical_ms;  // per stage: compute time on the DES's critical path
  std::vector<std::string> families;  // the verified families, fastest first
};

bool better(const LayoutScore& a, const LayoutScore& b) {
  if (a.fits != b.fits) return a.fits;
  return a.value < b.value - 1e-9 * std::max(1.0, std::abs(b.value));
}

// The family a leaderboard label names ("interleaved-1f1b --less-memory V=2" -> its first word).
std::string family_of(const std::string& label) { return label.substr(0, label.find(' ')); }

// How many layouts put `layers` on `stages` stages, every middle stage at least `min_middle`:
// C(n + stages - 1, stages - 1) for the n layers left free; -1 when over `cap`.
long layout_count(int layers, int stages, int min_middle, long cap) {
  const long n = static_cast<long>(layers) - static_cast<long>(min_middle) * std::max(stages - 2, 0);
  if (n < 0 || stages < 1) return 0;
  // C(n + k, k) with k = stages - 1, built up one factor at a time (each step an exact binomial).
  const long k = stages - 1;
  long c = 1;
  for (long i = 1; i <= k; ++i) {
    c = c * (n + i) / i;  // c <= cap before the step: no overflow
    if (c > cap) return -1;
  }
  return c;
}

std::vector<double> critical_per_stage(const TuneResult& r, int stages) {
  std::vector<double> out(static_cast<size_t>(stages), 0.0);
  const Schedule& s = r.best_schedule;
  for (const CriticalStep& c : r.best_sim.critical_path) {
    if (c.lane != Lane::Compute || c.rank < 0 || static_cast<size_t>(c.rank) >= s.programs.size()) continue;
    const Program& prog = s.programs[static_cast<size_t>(c.rank)];
    if (c.step_index < 0 || static_cast<size_t>(c.step_index) >= prog.size() || !prog[static_cast<size_t>(c.step_index)])
      continue;
    const Step& st = *prog[static_cast<size_t>(c.step_index)];
    std::vector<int> touched;
    if (st.stage >= 0) touched.push_back(st.stage);
    for (const Step& sub : st.sub_steps())
      if (sub.stage >= 0) touched.push_back(sub.stage);
    for (int t : touched)
      if (t < stages) out[static_cast<size_t>(t)] += (c.end_ms - c.start_ms) / static_cast<double>(touched.size());
  }
  return out;
}

class Searcher {
 public:
  Searcher(const PartitionRequest& rq, Clock::time_point t0, double deadline_s)
      : rq_(rq), t0_(t0), deadline_s_(deadline_s) {}

  long layouts = 0;
  bool stopped_by_time = false;
  double best_so_far = kInf;

  bool out_of_time() const {
    return deadline_s_ > 0 && std::chrono::duration<double>(Clock::now() - t0_).count() > deadline_s_;
  }

  // A layout timed with the families alone (or a short order search without them).
  LayoutScore evaluate(const std::vector<int>& counts, int vpp, const std::vector<std::string>& families) {
    ++layouts;
    LayoutScore sc;
    TuneRequest q = rq_.tune;
    q.vpp_min = q.vpp_max = vpp;
    q.only_families = families;
    q.keep_schedules = false;
    q.keep_search_best = false;
    q.settings.progress = nullptr;
    q.settings.seconds = 0;
    q.search_orders = !q.families;
    if (q.search_orders) {
      q.settings.iterations = std::min(q.settings.iterations, 1000L);
      q.settings.des_iterations = std::min(q.settings.des_iterations, 20L);
      q.settings.rounds = 1;
    }
    std::optional<double> cap = q.budget;
    try {
      const CostModel model = rq_.costs(counts);
      if (!cap) cap = model.capacity_bytes;
      q.costs = [&model](int) { return model; };
      const TuneResult r = tune(q);
      if (r.best >= 0) {
        sc.fits = true;
        sc.value = r.leaderboard[static_cast<size_t>(r.best)].makespan_ms;
        sc.critical_ms = critical_per_stage(r, static_cast<int>(counts.size()));
        for (const Entry& e : r.leaderboard)
          if (e.verified && e.origin.is_family()) {
            const std::string f = family_of(e.name);
            if (std::find(sc.families.begin(), sc.families.end(), f) == sc.families.end()) sc.families.push_back(f);
          }
      } else if (cap && *cap > 0) {
        for (const Entry& e : r.leaderboard)
          if (!e.peak_bytes.empty())
            sc.value = std::min(sc.value, static_cast<double>(*std::max_element(e.peak_bytes.begin(), e.peak_bytes.end())) / *cap);
      }
    } catch (const InputError&) {
      // figures out of the limits or no family fits the shape: not a candidate
    }
    if (sc.fits && sc.value < best_so_far) best_so_far = sc.value;
    if (rq_.progress) rq_.progress(layouts, best_so_far, std::chrono::duration<double>(Clock::now() - t0_).count());
    return sc;
  }

  // The best layout of one V (empty when no layout of it is a candidate).
  std::vector<int> search(int vpp) {
    const int stages = rq_.tune.pp * vpp;
    std::vector<int> even;
    try {
      even = rq_.even(stages);
    } catch (const InputError&) {
      return {};
    }
    if (static_cast<int>(even.size()) != stages) return {};
    const int min_middle = rq_.body_layers >= stages ? 1 : 0;
    auto min_of = [&](size_t i) { return (i == 0 || i + 1 == static_cast<size_t>(stages)) ? 0 : min_middle; };
    std::map<std::vector<int>, LayoutScore> memo;
    std::vector<std::string> families = rq_.tune.only_families;
    const long limit = layouts + rq_.max_layouts;

    std::vector<int> best = even;
    LayoutScore best_score = memo[even] = evaluate(even, vpp, families);
    // The few fastest families on the even split are the ones the walk times (the full tune
    // at the end weighs them all again).
    if (rq_.tune.families && best_score.families.size() > 0) {
      families = best_score.families;
      if (families.size() > 4) families.resize(4);
    }
    const std::vector<int> balanced =
        balanced_counts(rq_.layer_ms, stages, rq_.first_ms, rq_.last_ms, min_middle);
    if (!balanced.empty() && !memo.count(balanced)) {
      LayoutScore s = memo[balanced] = evaluate(balanced, vpp, families);
      if (better(s, best_score)) {
        best = balanced;
        best_score = s;
      }
    }
    // Few enough layouts for the budget: time every one (in lexicographic order), so a small
    // search finds the best layout the scoring can see, not a local optimum of the walk.
    if (const long count = layout_count(rq_.body_layers, stages, min_middle, rq_.max_layouts);
        rq_.enumerate && count >= 0 && count <= limit - layouts) {
      std::vector<int> c(static_cast<size_t>(stages), 0);
      bool stop = false;
      // Fills stage i.. with `left` layers, every middle stage at least min_middle.
      std::function<void(size_t, int)> fill = [&](size_t i, int left) {
        if (stop) return;
        if (i + 1 == c.size()) {
          if (left < min_of(i)) return;
          c[i] = left;
          if (memo.count(c)) return;
          if (out_of_time()) {
            stopped_by_time = true;
            stop = true;
            return;
          }
          LayoutScore sc = memo[c] = evaluate(c, vpp, families);
          if (better(sc, best_score)) {
            best = c;
            best_score = std::move(sc);
          }
          return;
        }
        for (int k = min_of(i); k <= left; ++k) {
          c[i] = k;
          fill(i + 1, left - k);
        }
      };
      fill(0, rq_.body_layers);
      return best_score.fits || best_score.value < kInf ? best : std::vector<int>{};
    }
    // Each stage's estimated load: its layers' compute and what is pinned to it.
    auto loads = [&](const std::vector<int>& c) {
      std::vector<double> l(c.size(), 0.0);
      size_t k = 0;
      for (size_t i = 0; i < c.size(); ++i)
        for (int n = 0; n < c[i] && k < rq_.layer_ms.size(); ++n) l[i] += rq_.layer_ms[k++];
      if (!l.empty()) {
        l.front() += rq_.first_ms;
        l.back() += rq_.last_ms;
      }
      return l;
    };
    // The one-layer moves out of a layout, in the order they are tried: off the stages its
    // critical path spends the most compute on (then the most loaded), onto the least loaded.
    auto moves = [&](const std::vector<int>& c, const LayoutScore& sc) {
      const std::vector<double> load = loads(c);
      const std::vector<double>& crit = sc.critical_ms;
      std::vector<size_t> donors, receivers;
      for (size_t i = 0; i < c.size(); ++i) {
        receivers.push_back(i);
        if (c[i] > min_of(i)) donors.push_back(i);
      }
      std::stable_sort(donors.begin(), donors.end(), [&](size_t a, size_t b) {
        const double ca = a < crit.size() ? crit[a] : 0, cb = b < crit.size() ? crit[b] : 0;
        if (std::abs(ca - cb) > 1e-9) return ca > cb;
        return load[a] > load[b];
      });
      std::stable_sort(receivers.begin(), receivers.end(), [&](size_t a, size_t b) { return load[a] < load[b]; });
      std::vector<std::vector<int>> out;
      for (size_t i : donors)
        for (size_t j : receivers) {
          if (i == j) continue;
          std::vector<int> cand = c;
          --cand[i];
          ++cand[j];
          out.push_back(std::move(cand));
        }
      return out;
    };
    // Times `cand` unless it was; true when it is the new best. `stop` is set when the layout
    // budget or the time share runs out.
    bool stop = false;
    auto try_layout = [&](const std::vector<int>& cand) {
      if (memo.count(cand)) return false;
      if (layouts >= limit) return stop = true, false;
      if (out_of_time()) {
        stopped_by_time = true;
        return stop = true, false;
      }
      LayoutScore s = memo[cand] = evaluate(cand, vpp, families);
      if (!better(s, best_score)) return false;
      best = cand;
      best_score = std::move(s);
      return true;
    };
    constexpr size_t kLookahead = 3;
    for (;;) {
      bool improved = false;
      const std::vector<int> from = best;
      for (const std::vector<int>& cand : moves(from, best_score))
        if ((improved = try_layout(cand)) || stop) break;
      if (stop) break;
      if (!improved) {
        // A local optimum of one-layer moves: look two moves ahead from its few best neighbours.
        // A layout that needs two boundaries shifted, each shift alone slower, is reached so
        // (PyTorch's heuristic_interleaved workload under interleaved-zb: 1520 ms, one move to
        // 1530, the second to 1451).
        std::vector<std::pair<std::vector<int>, const LayoutScore*>> near;
        for (const std::vector<int>& cand : moves(from, best_score)) {
          const auto it = memo.find(cand);
          if (it != memo.end() && (it->second.fits || it->second.value < kInf)) near.emplace_back(cand, &it->second);
        }
        std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return better(*a.second, *b.second); });
        if (near.size() > kLookahead) near.resize(kLookahead);
        for (const auto& [n, score] : near) {
          for (const std::vector<int>& cand : moves(n, *score))
            if ((improved = try_layout(cand)) || stop) break;
          if (improved || stop) break;
        }
      }
      if (!improved || stop) break;
    }
    return best_score.fits || best_score.value < kInf ? best : std::vector<int>{};
  }

 private:
  const PartitionRequest& rq_;
  Clock::time_point t0_;
  double deadline_s_;
};

}  // namespace

void describe_workload(PartitionRequest& pr, const Workload& net) {
  const std::vector<Layer> layers = net.layers();
  pr.body_layers = 0;
  pr.layer_ms.clear();
  pr.first_ms = pr.last_ms = 0;
  for (const Layer& l : layers) {
    const double ms = compute_ms(net.device, l.fwd_flops + l.bwd_input_flops + l.bwd_weight_flops);
    if (is_body(l.kind)) {
      ++pr.body_layers;
      pr.layer_ms.push_back(ms);
    } else if (pinned_first(l.kind)) {
      pr.first_ms += ms;
    } else {
      pr.last_ms += ms;
    }
  }
  pr.even = [layers](int stages) {
    std::vector<int> c;
    for (int64_t n : body_counts(even_layout(layers, stages), layers)) c.push_back(static_cast<int>(n));
    return c;
  };
}

std::string counts_string(const std::vector<int>& counts) { return counts_text(std::vector<int64_t>(counts.begin(), counts.end())); }

std::vector<int> balanced_counts(const std::vector<double>& layer_ms, int stages, double first_ms, double last_ms,
                                 int min_middle) {
  const size_t n = layer_ms.size();
  if (stages < 1) return {};
  const size_t S = static_cast<size_t>(stages);
  if (static_cast<double>(S) * static_cast<double>(n + 1) * static_cast<double>(n + 1) > 2e8) return {};
  std::vector<double> prefix(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + layer_ms[i];
  auto min_of = [&](size_t k) { return (k == 0 || k + 1 == S) ? size_t{0} : static_cast<size_t>(min_middle); };
  auto load = [&](size_t k, size_t a, size_t b) {
    return prefix[b] - prefix[a] + (k == 0 ? first_ms : 0.0) + (k + 1 == S ? last_ms : 0.0);
  };
  // g[k][a]: the least heaviest stage placing layers a.. on stages k.. (kInf: impossible).
  std::vector<std::vector<double>> g(S + 1, std::vector<double>(n + 1, kInf));
  g[S][n] = 0;
  for (size_t k = S; k-- > 0;)
    for (size_t a = 0; a <= n; ++a)
      for (size_t b = a + min_of(k); b <= n; ++b)
        if (g[k + 1][b] < kInf) g[k][a] = std::min(g[k][a], std::max(load(k, a, b), g[k + 1][b]));
  const double opt = g[0][0];
  if (!(opt < kInf)) return {};
  // Among the optimal splits, each stage in turn the load nearest the even share of what is
  // left (ties: more layers to the earlier stage).
  std::vector<int> counts;
  size_t a = 0;
  const double eps = opt * 1e-12 + 1e-12;
  for (size_t k = 0; k < S; ++k) {
    const double left = prefix[n] - prefix[a] + (k == 0 ? first_ms : 0.0) + last_ms;
    const double target = left / static_cast<double>(S - k);
    size_t pick = n + 1;
    double dist = kInf;
    for (size_t b = n + 1; b-- > a + min_of(k);)
      if (load(k, a, b) <= opt + eps && g[k + 1][b] <= opt + eps && std::abs(load(k, a, b) - target) < dist - 1e-12) {
        pick = b;
        dist = std::abs(load(k, a, b) - target);
      }
    if (pick > n) return {};
    counts.push_back(static_cast<int>(pick - a));
    a = pick;
  }
  return counts;
}

PartitionResult search_partition(const PartitionRequest& rq) {
  PartitionResult out;
  const auto t0 = Clock::now();
  const double total = rq.tune.settings.seconds;
  Searcher searcher(rq, t0, total > 0 ? total / 3 : 0);
  std::map<int, std::vector<int>> best, even;
  for (int v = rq.tune.vpp_min; v <= rq.tune.vpp_max; ++v) {
    try {
      even[v] = rq.even(rq.tune.pp * v);
    } catch (const InputError&) {
      continue;
    }
    std::vector<int> b = searcher.search(v);
    if (!b.empty()) best[v] = std::move(b);
  }
  out.layouts = searcher.layouts;
  out.stopped_by_time = searcher.stopped_by_time;
  if (even.empty()) throw InputError({}, "tune --partition search: no V in the range has a layout (more stages than layers?)");

  // The full tune on a layout per V.
  auto full = [&](const std::map<int, std::vector<int>>& layouts, double seconds) {
    TuneRequest q = rq.tune;
    q.settings.seconds = seconds;
    q.costs = [&](int stages) {
      const auto it = layouts.find(stages / rq.tune.pp);
      if (it == layouts.end()) throw InputError({}, "no layout for " + std::to_string(stages) + " stages");
      return rq.costs(it->second);
    };
    TuneResult r = tune(q);
    for (Entry& e : r.leaderboard)
      if (const auto it = layouts.find(e.vpp); it != layouts.end()) e.layout.assign(it->second.begin(), it->second.end());
    return r;
  };
  // What the layout walk left of --seconds (a millisecond when it took it all: 0 would mean no limit).
  const double share = total > 0 ? std::max(1e-3, total - std::chrono::duration<double>(Clock::now() - t0).count()) : 0;
  const bool same = best.empty() || best == even;
  TuneResult searched, on_even;
  bool have_searched = false;
  if (!best.empty()) {
    searched = full(best, same ? share : share / 2);
    have_searched = true;
  }
  if (!same || !have_searched) on_even = full(even, have_searched ? share / 2 : share);
  else on_even = searched;
  auto best_ms = [](const TuneResult& r) { return r.best >= 0 ? r.leaderboard[static_cast<size_t>(r.best)].makespan_ms : 0.0; };
  out.searched_makespan = have_searched ? best_ms(searched) : 0;
  out.even_makespan = best_ms(on_even);

  // The winner's result, with the other's entries merged into its leaderboard.
  const bool searched_wins = have_searched && searched.best >= 0 &&
                             (on_even.best < 0 || out.searched_makespan <= out.even_makespan * (1 + 1e-12));
  TuneResult& win = searched_wins ? searched : on_even;
  const TuneResult& other = searched_wins ? on_even : searched;
  out.result = std::move(win);
  if (!same && have_searched) {
    std::vector<Entry> all = out.result.leaderboard;
    for (const Entry& e : other.leaderboard) all.push_back(e);
    std::stable_sort(all.begin(), all.end(), [](const Entry& x, const Entry& y) {
      if (x.verified != y.verified) return x.verified;
      return x.makespan_ms < y.makespan_ms - 1e-9 * std::max(1.0, x.makespan_ms);
    });
    out.result.leaderboard = std::move(all);
    out.result.evaluations += other.evaluations;
    out.result.stopped_by_time = out.result.stopped_by_time || other.stopped_by_time;
  }
  out.result.best = !out.result.leaderboard.empty() && out.result.leaderboard.front().verified ? 0 : -1;
  out.stopped_by_time = out.stopped_by_time || out.result.stopped_by_time;
  if (out.result.best >= 0) {
    const int v = out.result.leaderboard.front().vpp;
    const auto& layouts = searched_wins ? best : even;
    if (const auto it = layouts.find(v); it != layouts.end()) out.counts = it->second;
    if (const auto it = even.find(v); it != even.end()) out.even_counts = it->second;
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  out.result.seconds = out.seconds;
  return out;
}

}  // namespace ppsched::search
