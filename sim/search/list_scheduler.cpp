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

// What a free rank may run at its wake-up time: the stage of its chosen F, B and W (-1: none).
struct Candidates {
  int forward = -1, backward = -1, weight = -1;
  bool forward_blocked_by_memory = false;  // a forward is ready but the cap refuses it
  double next_arrival = -1;                // the earliest F/B input still on its way (-1: none known)
  void note_arrival(double x, double now) {
    if (x > now && (next_arrival < 0 || x < next_arrival)) next_arrival = x;
  }
};

// One run of the list scheduler: the ranks are simulated in time order, and whenever a rank is
// free (a wake-up from the heap) it runs the task its priorities pick, or idles until an
// arrival wakes it again.
class ListScheduler {
 public:
  ListScheduler(const Problem& p, const ListParams& q);
  std::optional<Order> schedule();

 private:
  size_t per_rank() const { return static_cast<size_t>(R_); }
  double forward_ready(int s) const;
  double backward_ready(int s) const;
  double backward_earliest(int s) const;
  void choose_forward(int r, double t, Candidates& c) const;
  bool forward_fits_before_backward(int r, double t, int s) const;
  void choose_backward(int r, double t, Candidates& c) const;
  void choose_weight(int r, Candidates& c) const;
  bool weight_goes_now(int r, double t, const Candidates& c) const;
  Task weight_of(int s) const { return Task{Kind::W, s, nw_[static_cast<size_t>(s)]}; }
  void decide(int r, double t);
  void run(int r, double t, const Task& task);

  const Problem& p_;
  const ListParams& q_;
  const int R_, S_, M_, V_;
  std::vector<std::vector<int>> stages_of_;  // per rank, ascending
  // Per (stage, micro): when its F and its B (or I) ended (kUnknown: not yet).
  std::vector<double> end_f_, end_b_;
  // Per stage: the F, B (or I) and W run so far; each kind runs in micro order.
  std::vector<int> nf_, nb_, nw_;
  // Per rank: when it is free, its memory, what `reserve` holds back for admitted micros' later
  // forwards, what admitting one more micro takes, and `reserve_one`'s largest later-stage forward.
  std::vector<double> free_at_, mem_, reserved_, admit_, one_more_;
  std::vector<double> idle_;  // per rank, since its first task
  double max_idle_ = 0;
  std::vector<int> inflight_, left_fb_, left_, limit_;  // per rank
  Order order_;
  std::priority_queue<Wake, std::vector<Wake>, std::greater<Wake>> heap_;
  uint64_t seq_ = 0;
  size_t remaining_ = 0;
};

ListScheduler::ListScheduler(const Problem& p, const ListParams& q)
    : p_(p), q_(q), R_(p.ranks), S_(p.stages), M_(p.micros), V_(S_ / std::max(R_, 1)), stages_of_(per_rank()) {
  for (int s = 0; s < S_; ++s) stages_of_[static_cast<size_t>(p.rank_of(s))].push_back(s);
  const size_t n = static_cast<size_t>(S_) * static_cast<size_t>(M_);
  end_f_.assign(n, kUnknown);
  end_b_.assign(n, kUnknown);
  for (auto* count : {&nf_, &nb_, &nw_}) count->assign(static_cast<size_t>(S_), 0);
  for (auto* x : {&free_at_, &mem_, &reserved_, &admit_, &one_more_, &idle_}) x->assign(per_rank(), 0.0);
  for (int s = 0; s < S_; ++s) admit_[static_cast<size_t>(p.rank_of(s))] += std::max(0.0, p.mem_f[static_cast<size_t>(s)]);
  for (int s = 0; s < S_; ++s)
    if (s != stages_of_[static_cast<size_t>(p.rank_of(s))].front())
      one_more_[static_cast<size_t>(p.rank_of(s))] = std::max(one_more_[static_cast<size_t>(p.rank_of(s))], p.mem_f[static_cast<size_t>(s)]);
  inflight_.assign(per_rank(), 0);
  left_fb_.assign(per_rank(), 0);
  left_.assign(per_rank(), 0);
  limit_.assign(per_rank(), 1);
  for (int r = 0; r < R_; ++r) {
    const int per = static_cast<int>(stages_of_[static_cast<size_t>(r)].size());
    left_fb_[static_cast<size_t>(r)] = per * M_ * 2;
    left_[static_cast<size_t>(r)] = per * M_ * (p.split ? 3 : 2);
    limit_[static_cast<size_t>(r)] = std::max(1, q.inflight_scale * (R_ - r) + q.inflight_extra + (V_ - 1) * R_);
  }
  order_.resize(per_rank());
  for (int r = 0; r < R_; ++r) heap_.push({0.0, seq_++, r});
  remaining_ = p.task_count();
}

std::optional<Order> ListScheduler::schedule() {
  while (!heap_.empty() && remaining_ > 0) {
    const Wake e = heap_.top();
    heap_.pop();
    const size_t ru = static_cast<size_t>(e.rank);
    if (left_[ru] == 0 || free_at_[ru] > e.time) continue;  // busy: its own wake-up comes later
    decide(e.rank, e.time);
  }
  if (remaining_ > 0) return std::nullopt;
  return std::move(order_);
}

double ListScheduler::forward_ready(int s) const {  // kUnknown: input not produced yet
  const int m = nf_[static_cast<size_t>(s)];
  if (m >= M_) return kUnknown;
  if (s == 0) return 0.0;
  const size_t j = p_.at(s - 1, m);
  return end_f_[j] < 0 ? kUnknown : end_f_[j] + p_.comm_fwd[j];
}

double ListScheduler::backward_ready(int s) const {
  const int m = nb_[static_cast<size_t>(s)];
  if (m >= M_ || m >= nf_[static_cast<size_t>(s)]) return kUnknown;
  const size_t i = p_.at(s, m);
  if (end_f_[i] < 0) return kUnknown;
  if (s == S_ - 1) return end_f_[i];
  const size_t j = p_.at(s + 1, m);
  return end_b_[j] < 0 ? kUnknown : std::max(end_f_[i], end_b_[j] + p_.comm_bwd[j]);
}

// The earliest the next backward of stage s can arrive, from how far its micro has got (no
// waiting assumed): a lower bound, infinite while its forward has not run here.
double ListScheduler::backward_earliest(int s) const {
  const int m = nb_[static_cast<size_t>(s)];
  if (m >= M_ || m >= nf_[static_cast<size_t>(s)]) return kNoCap;
  int q = s + 1;
  while (q < S_ && end_b_[p_.at(q, m)] < 0) ++q;
  double back = 0;  // from the B at stage q (or the last F) back to stage s
  if (q < S_) {
    for (int x = q; x > s; --x) back += (x < q ? p_.b[p_.at(x, m)] : 0.0) + p_.comm_bwd[p_.at(x, m)];
    return end_b_[p_.at(q, m)] + back;
  }
  int d = s;
  while (d + 1 < S_ && end_f_[p_.at(d + 1, m)] >= 0) ++d;
  double t = end_f_[p_.at(d, m)];
  for (int x = d + 1; x < S_; ++x) t += p_.comm_fwd[p_.at(x - 1, m)] + p_.f[p_.at(x, m)];
  for (int x = S_ - 1; x > s; --x) t += p_.b[p_.at(x, m)] + p_.comm_bwd[p_.at(x, m)];
  return t;
}

// The first ready forward in the rank's stage priority that the in-flight limit and the memory
// cap (with what `reserve` or `reserve_one` holds back) allow.
void ListScheduler::choose_forward(int r, double t, Candidates& c) const {
  const size_t ru = static_cast<size_t>(r);
  const auto& mine = stages_of_[ru];
  for (size_t k = 0; k < mine.size(); ++k) {
    const int s = q_.deep_forward ? mine[mine.size() - 1 - k] : mine[k];
    const double fr = forward_ready(s);
    if (fr < 0) continue;
    const bool admits = s == mine.front();
    const double need = q_.reserve_one ? mem_[ru] + p_.mem_f[static_cast<size_t>(s)] + (admits ? one_more_[ru] : 0.0)
                        : !q_.reserve  ? mem_[ru] + p_.mem_f[static_cast<size_t>(s)]
                        : admits       ? mem_[ru] + reserved_[ru] + admit_[ru]
                                       : mem_[ru] + reserved_[ru];  // already reserved
    const bool fits = need <= p_.cap[ru] * (1 + 1e-12) + 1e-9;
    const bool allowed = inflight_[ru] < limit_[ru];
    if (!allowed) continue;
    if (!fits) {
      if (fr <= t) c.forward_blocked_by_memory = true;
      continue;
    }
    if (fr <= t) {
      if (c.forward < 0) c.forward = s;
    } else {
      c.note_arrival(fr, t);
    }
  }
}

// forward_fit: a forward beyond 1F1B's P - r in flight only when it ends (less f_slack
// forwards) before the rank's next backward can arrive.
bool ListScheduler::forward_fits_before_backward(int r, double t, int s) const {
  if (!q_.forward_fit || inflight_[static_cast<size_t>(r)] < (R_ - r) * V_) return true;
  double arrival = kNoCap;
  for (int x : stages_of_[static_cast<size_t>(r)]) arrival = std::min(arrival, backward_earliest(x));
  return t + p_.f[p_.at(s, nf_[static_cast<size_t>(s)])] * (1.0 - q_.f_slack) <= arrival + 1e-12;
}

void ListScheduler::choose_backward(int r, double t, Candidates& c) const {
  const auto& mine = stages_of_[static_cast<size_t>(r)];
  for (size_t k = 0; k < mine.size(); ++k) {
    const int s = q_.deep_backward ? mine[mine.size() - 1 - k] : mine[k];
    const double br = backward_ready(s);
    if (br < 0) continue;
    if (br <= t) {
      if (c.backward < 0) c.backward = s;
    } else {
      c.note_arrival(br, t);
    }
  }
}

// The oldest pending weight pass of the rank (split problems only).
void ListScheduler::choose_weight(int r, Candidates& c) const {
  if (!p_.split) return;
  for (int s : stages_of_[static_cast<size_t>(r)])
    if (nw_[static_cast<size_t>(s)] < nb_[static_cast<size_t>(s)] &&
        (c.weight < 0 || nw_[static_cast<size_t>(s)] < nw_[static_cast<size_t>(c.weight)]))
      c.weight = s;
}

// With no F or B to run: whether the pending W runs now by the W policy, or the rank idles
// until an arrival wakes it.
bool ListScheduler::weight_goes_now(int r, double t, const Candidates& c) const {
  switch (q_.w_policy) {
    case WPolicy::Immediate:
    case WPolicy::Fill: return true;
    case WPolicy::FitFill:
      return c.forward_blocked_by_memory || c.next_arrival < 0 ||
             t + p_.cost(weight_of(c.weight)) * (1.0 - q_.w_slack) <= c.next_arrival + 1e-12 ||
             (q_.w_balance && c.next_arrival - t > max_idle_ - idle_[static_cast<size_t>(r)] + 1e-12);
    case WPolicy::Late: return c.forward_blocked_by_memory || left_fb_[static_cast<size_t>(r)] == 0;
  }
  return false;
}

// Rank r is free at t: it runs its pending W at once (Immediate), else a B (or an F first with
// forward_first), else an F, else a W as its policy allows.
void ListScheduler::decide(int r, double t) {
  Candidates c;
  choose_forward(r, t, c);
  if (c.forward >= 0 && !forward_fits_before_backward(r, t, c.forward)) c.forward = -1;
  choose_backward(r, t, c);
  choose_weight(r, c);
  if (c.weight >= 0 && q_.w_policy == WPolicy::Immediate) return run(r, t, weight_of(c.weight));
  const bool prefer_f = q_.forward_first && c.forward >= 0;
  if (c.backward >= 0 && !prefer_f)
    return run(r, t, Task{p_.split ? Kind::I : Kind::B, c.backward, nb_[static_cast<size_t>(c.backward)]});
  if (c.forward >= 0) return run(r, t, Task{Kind::F, c.forward, nf_[static_cast<size_t>(c.forward)]});
  if (c.weight >= 0 && weight_goes_now(r, t, c)) run(r, t, weight_of(c.weight));
}

// Task starts on rank r at t: the rank's time, idle and memory, the stage's counts, and the
// wake-ups of the ranks its output goes to (and of r itself, when it ends).
void ListScheduler::run(int r, double t, const Task& task) {
  const size_t ru = static_cast<size_t>(r);
  const double end = t + p_.cost(task);
  const size_t i = p_.at(task.stage, task.micro);
  if (!order_[ru].empty()) {
    idle_[ru] += t - free_at_[ru];
    max_idle_ = std::max(max_idle_, idle_[ru]);
  }
  order_[ru].push_back(task);
  mem_[ru] += p_.mem_delta(task);
  free_at_[ru] = end;
  --left_[ru];
  --remaining_;
  switch (task.kind) {
    case Kind::F:
      if (q_.reserve) {
        const bool first_local = task.stage == stages_of_[ru].front();
        if (first_local) reserved_[ru] += admit_[ru];
        reserved_[ru] -= std::max(0.0, p_.mem_f[static_cast<size_t>(task.stage)]);
      }
      end_f_[i] = end;
      ++nf_[static_cast<size_t>(task.stage)];
      ++inflight_[ru];
      --left_fb_[ru];
      if (task.stage + 1 < S_) heap_.push({end + p_.comm_fwd[i], seq_++, p_.rank_of(task.stage + 1)});
      break;
    case Kind::B:
    case Kind::I:
      end_b_[i] = end;
      ++nb_[static_cast<size_t>(task.stage)];
      --inflight_[ru];
      --left_fb_[ru];
      if (!p_.split) ++nw_[static_cast<size_t>(task.stage)];
      if (task.stage > 0) heap_.push({end + p_.comm_bwd[i], seq_++, p_.rank_of(task.stage - 1)});
      break;
    case Kind::W: ++nw_[static_cast<size_t>(task.stage)]; break;
  }
  heap_.push({end, seq_++, r});
}

}  // namespace

std::optional<Order> list_schedule(const Problem& p, const ListParams& q) { return ListScheduler(p, q).schedule(); }

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
