#include "sim/search/list_scheduler.hpp"

#include <algorithm>
#include <queue>

namespace ppsched::search {

std::string ListParams::describe() const {
  static const char* w[] = {"immediate", "fill", "fit-fill", "late"};
  std::string s = "inflight " + std::to_string(inflight_scale) + "x(P-r)" +
                  (inflight_extra >= 0 ? "+" : "") + std::to_string(inflight_extra) + ", " +
                  (forward_first ? "F-first" : "B-first") + ", W " + w[static_cast<int>(w_policy)];
  if (reserve) s += ", reserve";
  if (reserve_one) s += ", reserve one";
  if (forward_fit) s += f_slack > 0 ? ", F fit+1" : ", F fit";
  if (w_policy == WPolicy::FitFill && w_slack > 0) s += " slack " + std::to_string(w_slack).substr(0, 4);
  if (w_policy == WPolicy::FitFill && w_balance) s += " balanced";
  return s;
}

namespace {

struct Wake {
  double time;
  uint64_t seq;
  int rank;
  bool operator>(const Wake& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

constexpr double kUnknown = -1.0;

}  // namespace

std::optional<Order> list_schedule(const Problem& p, const ListParams& q) {
  const int R = p.ranks, S = p.stages, M = p.micros;
  const int V = S / std::max(R, 1);
  std::vector<std::vector<int>> stages_of(static_cast<size_t>(R));
  for (int s = 0; s < S; ++s) stages_of[static_cast<size_t>(p.rank_of(s))].push_back(s);
  const size_t n = static_cast<size_t>(S) * static_cast<size_t>(M);
  std::vector<double> end_f(n, kUnknown), end_b(n, kUnknown);
  std::vector<int> nf(static_cast<size_t>(S), 0), nb(static_cast<size_t>(S), 0), nw(static_cast<size_t>(S), 0);
  std::vector<double> free_at(static_cast<size_t>(R), 0.0), mem(static_cast<size_t>(R), 0.0),
      reserved(static_cast<size_t>(R), 0.0), admit(static_cast<size_t>(R), 0.0);
  for (int s = 0; s < S; ++s) admit[static_cast<size_t>(p.rank_of(s))] += std::max(0.0, p.mem_f[static_cast<size_t>(s)]);
  std::vector<double> one_more(static_cast<size_t>(R), 0.0);  // reserve_one: the largest later-stage forward
  for (int s = 0; s < S; ++s)
    if (s != stages_of[static_cast<size_t>(p.rank_of(s))].front())
      one_more[static_cast<size_t>(p.rank_of(s))] = std::max(one_more[static_cast<size_t>(p.rank_of(s))], p.mem_f[static_cast<size_t>(s)]);
  std::vector<double> idle(static_cast<size_t>(R), 0.0);  // since the rank's first task
  double max_idle = 0;
  std::vector<int> inflight(static_cast<size_t>(R), 0), left_fb(static_cast<size_t>(R), 0), left(static_cast<size_t>(R), 0);
  std::vector<int> limit(static_cast<size_t>(R), 1);
  for (int r = 0; r < R; ++r) {
    const int per = static_cast<int>(stages_of[static_cast<size_t>(r)].size());
    left_fb[static_cast<size_t>(r)] = per * M * 2;
    left[static_cast<size_t>(r)] = per * M * (p.split ? 3 : 2);
    limit[static_cast<size_t>(r)] = std::max(1, q.inflight_scale * (R - r) + q.inflight_extra + (V - 1) * R);
  }
  Order order(static_cast<size_t>(R));
  std::priority_queue<Wake, std::vector<Wake>, std::greater<Wake>> heap;
  uint64_t seq = 0;
  for (int r = 0; r < R; ++r) heap.push({0.0, seq++, r});
  size_t remaining = p.task_count();

  auto f_ready = [&](int s) -> double {  // kUnknown: input not produced yet
    const int m = nf[static_cast<size_t>(s)];
    if (m >= M) return kUnknown;
    if (s == 0) return 0.0;
    const size_t j = p.at(s - 1, m);
    return end_f[j] < 0 ? kUnknown : end_f[j] + p.comm_fwd[j];
  };
  auto b_ready = [&](int s) -> double {
    const int m = nb[static_cast<size_t>(s)];
    if (m >= M || m >= nf[static_cast<size_t>(s)]) return kUnknown;
    const size_t i = p.at(s, m);
    if (end_f[i] < 0) return kUnknown;
    if (s == S - 1) return end_f[i];
    const size_t j = p.at(s + 1, m);
    return end_b[j] < 0 ? kUnknown : std::max(end_f[i], end_b[j] + p.comm_bwd[j]);
  };

  // The earliest the next backward of stage s can arrive, from how far its micro has got
  // (no waiting assumed): a lower bound, infinite while its forward has not run here.
  auto b_earliest = [&](int s) -> double {
    const int m = nb[static_cast<size_t>(s)];
    if (m >= M || m >= nf[static_cast<size_t>(s)]) return kNoCap;
    int q = s + 1;
    while (q < S && end_b[p.at(q, m)] < 0) ++q;
    double back = 0;  // from the B at stage q (or the last F) back to stage s
    if (q < S) {
      for (int x = q; x > s; --x) back += (x < q ? p.b[p.at(x, m)] : 0.0) + p.comm_bwd[p.at(x, m)];
      return end_b[p.at(q, m)] + back;
    }
    int d = s;
    while (d + 1 < S && end_f[p.at(d + 1, m)] >= 0) ++d;
    double t = end_f[p.at(d, m)];
    for (int x = d + 1; x < S; ++x) t += p.comm_fwd[p.at(x - 1, m)] + p.f[p.at(x, m)];
    for (int x = S - 1; x > s; --x) t += p.b[p.at(x, m)] + p.comm_bwd[p.at(x, m)];
    return t;
  };

  auto run = [&](int r, double t, const Task& task) {
    const size_t ru = static_cast<size_t>(r);
    const double end = t + p.cost(task);
    const size_t i = p.at(task.stage, task.micro);
    if (!order[ru].empty()) {
      idle[ru] += t - free_at[ru];
      max_idle = std::max(max_idle, idle[ru]);
    }
    order[ru].push_back(task);
    mem[ru] += p.mem_delta(task);
    free_at[ru] = end;
    --left[ru];
    --remaining;
    switch (task.kind) {
      case Kind::F:
        if (q.reserve) {
          const bool first_local = task.stage == stages_of[ru].front();
          if (first_local) reserved[ru] += admit[ru];
          reserved[ru] -= std::max(0.0, p.mem_f[static_cast<size_t>(task.stage)]);
        }
        end_f[i] = end;
        ++nf[static_cast<size_t>(task.stage)];
        ++inflight[ru];
        --left_fb[ru];
        if (task.stage + 1 < S) heap.push({end + p.comm_fwd[i], seq++, p.rank_of(task.stage + 1)});
        break;
      case Kind::B:
      case Kind::I:
        end_b[i] = end;
        ++nb[static_cast<size_t>(task.stage)];
        --inflight[ru];
        --left_fb[ru];
        if (!p.split) ++nw[static_cast<size_t>(task.stage)];
        if (task.stage > 0) heap.push({end + p.comm_bwd[i], seq++, p.rank_of(task.stage - 1)});
        break;
      case Kind::W: ++nw[static_cast<size_t>(task.stage)]; break;
    }
    heap.push({end, seq++, r});
  };

  while (!heap.empty() && remaining > 0) {
    const Wake e = heap.top();
    heap.pop();
    const int r = e.rank;
    const size_t ru = static_cast<size_t>(r);
    if (left[ru] == 0 || free_at[ru] > e.time) continue;  // busy: its own wake-up comes later
    const double t = e.time;
    const auto& mine = stages_of[ru];
    // Candidates: the next F and B of each local stage, the oldest pending W.
    int best_f = -1, best_b = -1, pending_w = -1;
    bool f_blocked_by_memory = false;
    double next_arrival = -1;
    auto note_arrival = [&](double x) {
      if (x > t && (next_arrival < 0 || x < next_arrival)) next_arrival = x;
    };
    for (size_t k = 0; k < mine.size(); ++k) {
      const int s = q.deep_forward ? mine[mine.size() - 1 - k] : mine[k];
      const double fr = f_ready(s);
      if (fr < 0) continue;
      const bool admits = s == mine.front();
      const double need = q.reserve_one ? mem[ru] + p.mem_f[static_cast<size_t>(s)] + (admits ? one_more[ru] : 0.0)
                          : !q.reserve ? mem[ru] + p.mem_f[static_cast<size_t>(s)]
                          : admits     ? mem[ru] + reserved[ru] + admit[ru]
                                       : mem[ru] + reserved[ru];  // already reserved
      const bool fits = need <= p.cap[ru] * (1 + 1e-12) + 1e-9;
      const bool allowed = inflight[ru] < limit[ru];
      if (!allowed) continue;
      if (!fits) {
        if (fr <= t) f_blocked_by_memory = true;
        continue;
      }
      if (fr <= t) {
        if (best_f < 0) best_f = s;
      } else {
        note_arrival(fr);
      }
    }
    if (best_f >= 0 && q.forward_fit && inflight[ru] >= (R - r) * V) {
      double arrival = kNoCap;
      for (int s : mine) arrival = std::min(arrival, b_earliest(s));
      if (t + p.f[p.at(best_f, nf[static_cast<size_t>(best_f)])] * (1.0 - q.f_slack) > arrival + 1e-12) best_f = -1;
    }
    for (size_t k = 0; k < mine.size(); ++k) {
      const int s = q.deep_backward ? mine[mine.size() - 1 - k] : mine[k];
      const double br = b_ready(s);
      if (br < 0) continue;
      if (br <= t) {
        if (best_b < 0) best_b = s;
      } else {
        note_arrival(br);
      }
    }
    if (p.split)
      for (int s : mine)
        if (nw[static_cast<size_t>(s)] < nb[static_cast<size_t>(s)] &&
            (pending_w < 0 || nw[static_cast<size_t>(s)] < nw[static_cast<size_t>(pending_w)]))
          pending_w = s;
    auto task_w = [&](int s) { return Task{Kind::W, s, nw[static_cast<size_t>(s)]}; };
    if (pending_w >= 0 && q.w_policy == WPolicy::Immediate) {
      run(r, t, task_w(pending_w));
      continue;
    }
    const bool prefer_f = q.forward_first && best_f >= 0;
    if (best_b >= 0 && !prefer_f) {
      run(r, t, Task{p.split ? Kind::I : Kind::B, best_b, nb[static_cast<size_t>(best_b)]});
      continue;
    }
    if (best_f >= 0) {
      run(r, t, Task{Kind::F, best_f, nf[static_cast<size_t>(best_f)]});
      continue;
    }
    if (pending_w < 0) continue;  // idle until an arrival wakes this rank
    bool go = false;
    switch (q.w_policy) {
      case WPolicy::Immediate:
      case WPolicy::Fill: go = true; break;
      case WPolicy::FitFill:
        go = f_blocked_by_memory || next_arrival < 0 ||
             t + p.cost(task_w(pending_w)) * (1.0 - q.w_slack) <= next_arrival + 1e-12 ||
             (q.w_balance && next_arrival - t > max_idle - idle[ru] + 1e-12);
        break;
      case WPolicy::Late: go = f_blocked_by_memory || left_fb[ru] == 0; break;
    }
    if (go) {
      run(r, t, task_w(pending_w));
    } else if (next_arrival < 0) {
      // Late: nothing is on its way yet; an arrival will wake the rank.
    }
  }
  if (remaining > 0) return std::nullopt;
  return order;
}

std::vector<ListParams> list_parameter_space(const Problem& p) {
  std::vector<ListParams> out;
  const int R = p.ranks;
  const bool several = p.stages > p.ranks;
  for (int scale : {1, 2})
    for (int extra = -(R - 1); extra <= R; ++extra) {
      if (scale == 2 && extra < -1) continue;
      for (bool ff : {false, true})
        for (WPolicy wp : {WPolicy::Fill, WPolicy::FitFill, WPolicy::Late, WPolicy::Immediate}) {
          if (!p.split && wp != WPolicy::Fill) continue;
          for (double slack : {0.0, 0.5, -1.0}) {  // -1: slack 0, balanced
            if (slack != 0 && wp != WPolicy::FitFill) continue;
            if (slack < 0 && !several) continue;  // for several stages per rank (ZB-V's case)
            for (int deep = 0; deep < (several ? 4 : 1); ++deep)
              for (int fit = 0; fit < 3; ++fit)
              for (int reserve = 0; reserve < (several ? 3 : 1); ++reserve) {
              if (fit > 0 && scale * (R - 1) + extra <= R - 1) continue;  // no forwards beyond P - r
              if (slack < 0 && (fit > 0 || reserve > 0)) continue;  // balanced: plain admission only
              ListParams q;
              q.reserve = reserve == 1;
              q.reserve_one = reserve == 2;
              q.forward_fit = fit > 0;
              q.f_slack = fit == 2 ? 1.0 : 0.0;
              q.inflight_scale = scale;
              q.inflight_extra = extra;
              q.forward_first = ff;
              q.w_policy = wp;
              q.w_slack = std::max(0.0, slack);
              q.w_balance = slack < 0;
              q.deep_forward = (deep & 1) != 0;
              q.deep_backward = (deep & 2) != 0;
              out.push_back(q);
            }
          }
        }
    }
  return out;
}

}  // namespace ppsched::search
