#include "sim/search/problem.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "schedule/comm_insertion.hpp"
#include "schedule/errors.hpp"
#include "schedule/generators/generator.hpp"

namespace ppsched::search {

double Problem::cost(const Task& t) const {
  const size_t i = at(t.stage, t.micro);
  switch (t.kind) {
    case Kind::F: return f[i];
    case Kind::B: return split ? b[i] + w[i] : b[i];  // in a split problem: both halves at once
    case Kind::I: return b[i];
    case Kind::W: return w[i];
  }
  return 0;
}

double Problem::mem_delta(const Task& t) const {
  const size_t s = static_cast<size_t>(t.stage);
  switch (t.kind) {
    case Kind::F: return mem_f[s];
    case Kind::B: return split ? mem_b[s] + mem_w[s] : mem_b[s];
    case Kind::I: return mem_b[s];
    case Kind::W: return mem_w[s];
  }
  return 0;
}

namespace {

// What a split backward's halves do to memory under `rule`, for a forward keeping `a` and an
// input half keeping `dw` for its weight half (ppsched's rule, checkers/caches.cpp: dw_cache
// holds its bytes from I to W): the input half's delta and the weight half's (a fused backward
// frees all of `a`).
std::pair<double, double> split_deltas(double a, double dw, MemoryRule rule) {
  if (rule == MemoryRule::ZeroBubble) return {0.0, -a};
  return {-a + dw, -dw};
}

// `dw`: per stage, what BWD_INPUT keeps (empty: half the activation, as checkers/caches.cpp
// counts it without a weight-gradient figure).
void set_memory(Problem& p, const std::vector<double>& act, const std::vector<double>& dw = {}) {
  p.mem_f.assign(static_cast<size_t>(p.stages), 0);
  p.mem_b = p.mem_w = p.mem_f;
  for (int s = 0; s < p.stages; ++s) {
    const double a = act[static_cast<size_t>(s)];
    p.mem_f[static_cast<size_t>(s)] = a;
    if (!p.split) {
      p.mem_b[static_cast<size_t>(s)] = -a;
    } else {
      const double kept = dw.empty() ? std::floor(a / 2) : dw[static_cast<size_t>(s)];
      std::tie(p.mem_b[static_cast<size_t>(s)], p.mem_w[static_cast<size_t>(s)]) = split_deltas(a, kept, p.memory_rule);
    }
  }
}

}  // namespace

Problem problem_from_costs(const CostModel& costs, int ranks, int vpp, int micros, PlacementKind placement,
                           bool split, MemoryRule rule, std::optional<double> budget, const DataParallelOptions& dp) {
  if (ranks < 1 || vpp < 1 || micros < 1) throw InputError({}, "tune: --pp, --vpp and --micro must be >= 1");
  Problem p;
  p.ranks = ranks;
  p.stages = ranks * vpp;
  p.micros = micros;
  p.split = split;
  p.memory_rule = rule;
  p.data_parallel_steps = dp.degree > 1;
  p.placement = placement == PlacementKind::V ? Placement::v(ranks, p.stages) : Placement::loop(ranks, p.stages);
  costs.check_fits(p.stages, micros);
  const size_t n = static_cast<size_t>(p.stages) * static_cast<size_t>(micros);
  p.f.assign(n, 0);
  p.b.assign(n, 0);
  p.w.assign(n, 0);
  p.comm_fwd.assign(n, 0);
  p.comm_bwd.assign(n, 0);
  for (int s = 0; s < p.stages; ++s)
    for (int m = 0; m < micros; ++m) {
      const size_t i = p.at(s, m);
      p.f[i] = costs.compute_ms(Op::FWD, s, m);
      p.b[i] = costs.compute_ms(split ? Op::BWD_INPUT : Op::BWD, s, m);
      p.w[i] = split ? costs.compute_ms(Op::BWD_WEIGHT, s, m) : 0.0;
      if (s + 1 < p.stages && p.rank_of(s) != p.rank_of(s + 1)) {
        const Link& l = costs.link(p.rank_of(s), p.rank_of(s + 1));
        p.comm_fwd[i] = l.transfer_ms(costs.payload_bytes(Op::FWD_SEND, s, m));
        // The runtime's shape/dtype meta goes first on the channel, once per stage (the first
        // micro, since a stage's forwards run in micro order; checkers/comm_model.hpp).
        if (m == 0) p.comm_fwd[i] += l.transfer_ms(costs.meta_bytes);
      }
      if (s > 0 && p.rank_of(s) != p.rank_of(s - 1))
        p.comm_bwd[i] = costs.link(p.rank_of(s), p.rank_of(s - 1)).transfer_ms(costs.payload_bytes(Op::BWD_SEND, s, m));
    }
  p.overlap_efficiency = costs.overlap_efficiency;
  const MemoryModel mm = costs.memory_model(p.stages);
  std::vector<double> act, dw;
  for (int s = 0; s < p.stages; ++s) {
    act.push_back(static_cast<double>(mm.activation(s)));
    dw.push_back(static_cast<double>(mm.bytes_of(Cache::dw_cache, s)));
  }
  set_memory(p, act, dw);
  std::optional<double> cap = budget ? budget : costs.capacity_bytes;
  p.cap.assign(static_cast<size_t>(ranks), cap ? *cap : kNoCap);
  // The activations get what the rank's resident bytes leave (a negative room: nothing fits).
  if (cap && mm.has_resident()) {
    const auto held = mm.resident_by_rank(ranks, p.stages, [&](int s) { return p.rank_of(s); }, dp);
    for (size_t r = 0; r < held.size(); ++r) p.cap[r] -= static_cast<double>(held[r].total());
  }
  return p;
}

Problem zb_problem(int stages, int micros, const std::vector<double>& f, const std::vector<double>& b,
                   const std::vector<double>& w, double c, double cap_activations) {
  Problem p;
  p.ranks = p.stages = stages;
  p.micros = micros;
  p.split = true;
  p.memory_rule = MemoryRule::ZeroBubble;
  p.memory_unit = "activations";
  p.placement = Placement::loop(stages, stages);
  const size_t n = static_cast<size_t>(stages) * static_cast<size_t>(micros);
  p.f.resize(n);
  p.b.resize(n);
  p.w.resize(n);
  p.comm_fwd.assign(n, 0);
  p.comm_bwd.assign(n, 0);
  auto pick = [](const std::vector<double>& v, int s) { return v.size() == 1 ? v[0] : v[static_cast<size_t>(s)]; };
  for (int s = 0; s < stages; ++s)
    for (int m = 0; m < micros; ++m) {
      const size_t i = p.at(s, m);
      p.f[i] = pick(f, s);
      p.b[i] = pick(b, s);
      p.w[i] = pick(w, s);
      if (s + 1 < stages) p.comm_fwd[i] = c;
      if (s > 0) p.comm_bwd[i] = c;
    }
  set_memory(p, std::vector<double>(static_cast<size_t>(stages), 1.0));
  p.cap.assign(static_cast<size_t>(stages), cap_activations);
  return p;
}

Problem zbv_problem(int ranks, int micros, double f, double b, double w, double c, double cap_chunk_activations) {
  Problem p = zb_problem(2 * ranks, micros, {f}, {b}, {w}, c, cap_chunk_activations);
  p.ranks = ranks;
  p.placement = Placement::v(ranks, 2 * ranks);
  for (int s = 0; s < p.stages; ++s)
    for (int m = 0; m < micros; ++m) {
      if (s + 1 < p.stages && p.rank_of(s) == p.rank_of(s + 1)) p.comm_fwd[p.at(s, m)] = 0;
      if (s > 0 && p.rank_of(s) == p.rank_of(s - 1)) p.comm_bwd[p.at(s, m)] = 0;
    }
  p.cap.assign(static_cast<size_t>(ranks), cap_chunk_activations);
  return p;
}

std::vector<double> memory_peaks(const Schedule& s, const MemoryModel& memory, MemoryRule rule) {
  std::vector<double> peaks(static_cast<size_t>(s.ranks), 0.0);
  for (size_t r = 0; r < s.programs.size() && r < peaks.size(); ++r) {
    double live = 0;
    auto apply = [&](const Step& st) {
      const double a = static_cast<double>(memory.activation(st.stage));
      const double dw = static_cast<double>(memory.bytes_of(Cache::dw_cache, st.stage));
      switch (info(st.op).compute) {
        case ComputeKind::Forward: live += a; break;
        case ComputeKind::Backward: live -= a; break;
        case ComputeKind::BackwardInput: live += split_deltas(a, dw, rule).first; break;
        case ComputeKind::BackwardWeight: live += split_deltas(a, dw, rule).second; break;
        default: return;
      }
      peaks[r] = std::max(peaks[r], live);
    };
    for (const Slot& slot : s.programs[r]) {
      if (!slot) continue;
      if (slot->sub_steps().empty()) apply(*slot);
      for (const Step& sub : slot->sub_steps()) apply(sub);
    }
  }
  return peaks;
}

bool evaluate(const Problem& p, const Order& order, Workspace& ws, Evaluation& out) {
  const size_t n = static_cast<size_t>(p.stages) * static_cast<size_t>(p.micros);
  const size_t R = static_cast<size_t>(p.ranks);
  constexpr double kUnset = -1.0;
  ws.end_f.assign(n, kUnset);
  ws.end_b.assign(n, kUnset);
  ws.end_w.assign(n, kUnset);
  ws.pos.assign(R, 0);
  ws.free_at.assign(R, 0.0);
  ws.first_start.assign(R, -1.0);
  ws.mem.assign(R, 0.0);
  ws.peak.assign(R, 0.0);
  const int last = p.stages - 1;
  bool over = false;
  size_t total = 0, done = 0;
  for (const auto& ro : order) total += ro.size();
  // When a task may start (its inputs' end plus hand-over); false while an input has not run.
  auto ready_of = [&](const Task& t, double& ready) -> bool {
    const size_t i = p.at(t.stage, t.micro);
    ready = 0;
    switch (t.kind) {
      case Kind::F:
        if (t.stage > 0) {
          const size_t j = i - static_cast<size_t>(p.micros);
          if (ws.end_f[j] < 0) return false;
          ready = ws.end_f[j] + p.comm_fwd[j];
        }
        return true;
      case Kind::B:
      case Kind::I:
        if (ws.end_f[i] < 0) return false;
        if (t.stage < last) {
          const size_t j = i + static_cast<size_t>(p.micros);
          if (ws.end_b[j] < 0) return false;
          ready = std::max(ws.end_f[i], ws.end_b[j] + p.comm_bwd[j]);
        } else {
          ready = ws.end_f[i];
        }
        return true;
      case Kind::W:
        if (ws.end_b[i] < 0) return false;
        ready = ws.end_b[i];
        return true;
    }
    return false;
  };
  auto fail = [&]() {
    out.ok = false;
    out.over_cap = false;
    out.makespan = out.span = 0;
    return false;
  };
  // Round-robin: each rank runs as far as its inputs are known; a round without progress is a
  // cycle (or a task whose input never runs).
  for (bool progress = true; progress && done < total;) {
    progress = false;
    for (size_t r = 0; r < R && r < order.size(); ++r) {
      const auto& ro = order[r];
      size_t& k = ws.pos[r];
      while (k < ro.size()) {
        const Task& t = ro[k];
        double ready = 0;
        if (!ready_of(t, ready)) break;
        const Task* pair = nullptr;
        double dur = p.cost(t);
        if (t.overlap_next) {
          // One OVERLAP_F_B step: the F and the rank's next task, a backward of another micro.
          if (k + 1 >= ro.size()) return fail();
          pair = &ro[k + 1];
          if ((pair->kind != Kind::B && pair->kind != Kind::I) || pair->micro == t.micro || t.kind != Kind::F) return fail();
          double r2 = 0;
          if (!ready_of(*pair, r2)) break;
          ready = std::max(ready, r2);
          const double a = dur, b = p.cost(*pair);
          dur = std::max(a, b) + (1.0 - p.overlap_efficiency) * std::min(a, b);
        }
        const double start = std::max(ws.free_at[r], ready);
        const double end = start + dur;
        if (ws.first_start[r] < 0) ws.first_start[r] = start;
        ws.free_at[r] = end;
        for (const Task* x : {&t, pair}) {
          if (!x) continue;
          const size_t i = p.at(x->stage, x->micro);
          (x->kind == Kind::F ? ws.end_f : x->kind == Kind::W ? ws.end_w : ws.end_b)[i] = end;
          ws.mem[r] += p.mem_delta(*x);
          ws.peak[r] = std::max(ws.peak[r], ws.mem[r]);
          if (ws.mem[r] > p.cap[r] * (1 + 1e-12) + 1e-9) over = true;
          ++k;
          ++done;
        }
        progress = true;
      }
    }
  }
  out.peak.assign(ws.peak.begin(), ws.peak.end());
  out.rank_span.assign(R, 0.0);
  out.rank_end.assign(ws.free_at.begin(), ws.free_at.end());
  out.makespan = 0;
  out.span = 0;
  for (size_t r = 0; r < R; ++r) {
    out.makespan = std::max(out.makespan, ws.free_at[r]);
    out.rank_span[r] = ws.first_start[r] < 0 ? 0 : ws.free_at[r] - ws.first_start[r];
    out.span = std::max(out.span, out.rank_span[r]);
  }
  out.over_cap = over;
  // Every task once: a split problem's B stands for an I and a W (counted only when the plain
  // count falls short, so orders without B pay nothing for it).
  size_t tasks = total;
  if (p.split && tasks < p.task_count())
    for (const auto& ro : order)
      for (const Task& t : ro) tasks += t.kind == Kind::B ? 1 : 0;
  out.ok = done == total && tasks == p.task_count() && !over;
  return out.ok;
}

Evaluation evaluate(const Problem& p, const Order& order) {
  Workspace ws;
  Evaluation e;
  evaluate(p, order, ws, e);
  return e;
}

std::vector<std::vector<std::pair<double, double>>> task_times(const Problem& p, const Order& order) {
  // The same recurrence as evaluate(), keeping every interval.
  Workspace ws;
  Evaluation e;
  std::vector<std::vector<std::pair<double, double>>> out(order.size());
  if (!evaluate(p, order, ws, e) && e.over_cap == false) return out;
  for (size_t r = 0; r < order.size(); ++r) {
    for (const Task& t : order[r]) {
      const size_t i = p.at(t.stage, t.micro);
      const double end = (t.kind == Kind::F ? ws.end_f : t.kind == Kind::W ? ws.end_w : ws.end_b)[i];
      out[r].emplace_back(end - p.cost(t), end);
    }
  }
  return out;
}

namespace {

double min_over_micros(const Problem& p, const std::vector<double>& v, int s) {
  double x = v[p.at(s, 0)];
  for (int m = 1; m < p.micros; ++m) x = std::min(x, v[p.at(s, m)]);
  return x;
}
double sum_over_micros(const Problem& p, const std::vector<double>& v, int s) {
  double x = 0;
  for (int m = 0; m < p.micros; ++m) x += v[p.at(s, m)];
  return x;
}
// The k smallest values of stage s (a valid stand-in for "k of its tasks" under per-micro costs).
double smallest_k(const Problem& p, const std::vector<double>& v, int s, int k) {
  std::vector<double> xs;
  for (int m = 0; m < p.micros; ++m) xs.push_back(v[p.at(s, m)]);
  std::sort(xs.begin(), xs.end());
  double x = 0;
  for (int i = 0; i < k && i < static_cast<int>(xs.size()); ++i) x += xs[static_cast<size_t>(i)];
  return x;
}

}  // namespace

LowerBound lower_bound(const Problem& p) {
  LowerBound lb;
  const int S = p.stages, M = p.micros;
  const bool one_stage_per_rank = p.ranks == p.stages;
  std::vector<double> fmin(static_cast<size_t>(S)), bmin(static_cast<size_t>(S)), wmin(static_cast<size_t>(S)),
      cf(static_cast<size_t>(S)), cb(static_cast<size_t>(S)), busy_stage(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) {
    const size_t u = static_cast<size_t>(s);
    fmin[u] = min_over_micros(p, p.f, s);
    bmin[u] = min_over_micros(p, p.b, s);
    wmin[u] = p.split ? min_over_micros(p, p.w, s) : 0.0;
    cf[u] = min_over_micros(p, p.comm_fwd, s);
    cb[u] = min_over_micros(p, p.comm_bwd, s);
    busy_stage[u] = sum_over_micros(p, p.f, s) + sum_over_micros(p, p.b, s) + (p.split ? sum_over_micros(p, p.w, s) : 0.0);
  }
  // H_s: earliest start of stage s after stage 0 starts (micro 0 down the pipe).
  std::vector<double> H(static_cast<size_t>(S), 0.0);
  for (int s = 1; s < S; ++s) H[static_cast<size_t>(s)] = H[static_cast<size_t>(s - 1)] + fmin[static_cast<size_t>(s - 1)] + cf[static_cast<size_t>(s - 1)];
  auto bump = [](double& best, std::string& why, double v, const std::string& w) {
    if (v > best + 1e-12) best = v, why = w;
  };
  if (one_stage_per_rank) {
    for (int s = 0; s < S; ++s) {
      const size_t u = static_cast<size_t>(s);
      const std::string st = std::to_string(s);
      // 1. busy
      const double busy = busy_stage[u];
      // 2. warm-up: nothing is freed before the stage's first backward, so at most n forwards
      // fit before it; the first micro must go down the pipe and back first.
      const double cap = p.cap[static_cast<size_t>(p.rank_of(s))];
      int n = M;
      if (cap < kNoCap && p.mem_f[u] > 0) n = std::min<int>(M, static_cast<int>(std::floor(cap / p.mem_f[u] + 1e-9)));
      double C = 0;
      for (int q = s; q < S; ++q) C += fmin[static_cast<size_t>(q)];
      for (int q = s + 1; q < S; ++q) C += bmin[static_cast<size_t>(q)] + cb[static_cast<size_t>(q)];
      for (int q = s; q + 1 < S; ++q) C += cf[static_cast<size_t>(q)];
      // The first forward is inside C and is one of the n before the first backward; the
      // other M - n forwards and every backward half follow that backward.
      const double warm = C + (M - n > 0 ? smallest_k(p, p.f, s, M - n) : 0.0) + sum_over_micros(p, p.b, s) +
                          (p.split ? sum_over_micros(p, p.w, s) : 0.0);
      const double warm_ok = n >= 1 ? warm : busy;
      bump(lb.span, lb.span_binding, busy, "busy s" + st);
      bump(lb.span, lb.span_binding, warm_ok, "warm-up s" + st);
      bump(lb.makespan, lb.makespan_binding, H[u] + busy, "fill + busy s" + st);
      bump(lb.makespan, lb.makespan_binding, H[u] + warm_ok, "fill + warm-up s" + st);
      // 3. cool-down: when B(s, M-1) runs every forward is done, so at most n3 weight passes are
      // still pending (each holds mem_f + mem_b); then the last micro's backward crosses the
      // stages below and stage 0 runs its last W.
      int n3 = M;
      const double held = p.mem_f[u] + p.mem_b[u];
      if (p.split && cap < kNoCap && held > 0) n3 = std::min<int>(M, static_cast<int>(std::floor(cap / held + 1e-9)));
      double cool = H[u] + sum_over_micros(p, p.f, s) + sum_over_micros(p, p.b, s) +
                    (p.split && M - n3 > 0 ? smallest_k(p, p.w, s, M - n3) : 0.0) + wmin[0];
      for (int q = 0; q < s; ++q) cool += bmin[static_cast<size_t>(q)] + cb[static_cast<size_t>(q + 1)];
      bump(lb.span, lb.span_binding, cool, "cool-down s" + st);
      bump(lb.makespan, lb.makespan_binding, cool, "cool-down s" + st);
    }
    lb.formula =
        "span >= max_s max(busy_s, warm-up_s, cool-down_s); makespan >= max_s max(H_s + busy_s, H_s + warm-up_s, "
        "cool-down_s), where busy_s = sum_m (f+b+w)(s,m), H_s = sum_{s'<s} (f_s' + c_s') (fill), "
        "warm-up_s = C_s + (M-n)f_s + M(b_s+w_s) with n = min(M, cap/mem_F) forwards before the first backward and "
        "C_s = sum_{s'>=s} f + sum_{s'>s} b + the hand-overs down and back, cool-down_s = H_s + M(f_s+b_s) + "
        "(M-n')w_s + sum_{s'<s}(b_s' + c) + w_0 (drain) with n' = min(M, cap/(mem_F+mem_B)) weight passes pending";
  } else {
    // Several stages per rank: the busiest rank after its earliest start, and one micro's chain.
    std::vector<double> busy(static_cast<size_t>(p.ranks), 0.0), start(static_cast<size_t>(p.ranks), kNoCap);
    for (int s = 0; s < S; ++s) {
      const size_t r = static_cast<size_t>(p.rank_of(s));
      busy[r] += busy_stage[static_cast<size_t>(s)];
      start[r] = std::min(start[r], H[static_cast<size_t>(s)]);
    }
    double chain = wmin[0];
    for (int s = 0; s < S; ++s) chain += fmin[static_cast<size_t>(s)] + bmin[static_cast<size_t>(s)] + cf[static_cast<size_t>(s)] + cb[static_cast<size_t>(s)];
    for (int r = 0; r < p.ranks; ++r) {
      bump(lb.span, lb.span_binding, busy[static_cast<size_t>(r)], "busy r" + std::to_string(r));
      bump(lb.makespan, lb.makespan_binding, start[static_cast<size_t>(r)] + busy[static_cast<size_t>(r)],
           "fill + busy r" + std::to_string(r));
    }
    bump(lb.makespan, lb.makespan_binding, chain, "one micro's chain");
    bump(lb.span, lb.span_binding, chain, "one micro's chain");
    lb.formula = "span >= max_r busy_r; makespan >= max(max_r (fill_r + busy_r), chain), where busy_r = sum of the "
                 "rank's F, B, W times, fill_r = earliest arrival of micro 0 at any stage of rank r (sum of f + c "
                 "before it), chain = one micro down and back: sum_s (f_s + b_s + c) + w_0";
  }
  return lb;
}

Schedule to_schedule(const Problem& p, const Order& order, const std::string& name) {
  Schedule s;
  s.name = name;
  s.ranks = p.ranks;
  s.stages = p.stages;
  s.micro_batches = p.micros;
  s.placement = p.placement;
  s.programs.resize(static_cast<size_t>(p.ranks));
  for (size_t r = 0; r < order.size() && r < s.programs.size(); ++r) {
    auto& prog = s.programs[r];
    prog.reserve(order[r].size());
    auto step_of = [](const Task& t) {
      const Op op = t.kind == Kind::F ? Op::FWD : t.kind == Kind::B ? Op::BWD : t.kind == Kind::I ? Op::BWD_INPUT : Op::BWD_WEIGHT;
      return make_step(op, t.micro, t.stage);
    };
    for (size_t k = 0; k < order[r].size(); ++k) {
      const Task& t = order[r][k];
      if (t.overlap_next && k + 1 < order[r].size()) {
        prog.emplace_back(make_composite(Op::OVERLAP_F_B, {step_of(t), step_of(order[r][k + 1])}));
        ++k;
      } else {
        prog.emplace_back(step_of(t));
      }
    }
  }
  s = insert_p2p(std::move(s), Alignment::Auto);
  return p.data_parallel_steps ? add_fsdp_steps(s) : s;
}

std::optional<Order> order_of(const Schedule& s, const Problem& p) {
  if (s.ranks != p.ranks || s.stages != p.stages || s.micro_batches != p.micros ||
      s.placement.stage_to_rank != p.placement.stage_to_rank || s.mpipe)
    return std::nullopt;
  Order o(static_cast<size_t>(p.ranks));
  for (size_t r = 0; r < s.programs.size(); ++r) {
    for (const Slot& slot : s.programs[r]) {
      if (!slot) continue;
      const Step& st = *slot;
      const StepTypeInfo& inf = info(st.op);
      if (is_p2p(st.op) || inf.composite == CompositeKind::Batch || inf.collective == CollectiveScope::DataParallel) continue;
      // An overlap composite of a forward and then a backward of another micro (OVERLAP_F_B).
      // In a split problem the backward may also be a full one (DualPipeV mixes both).
      if (inf.composite == CompositeKind::Overlap && st.sub_steps().size() == 2 &&
          info(st.sub_steps()[0].op).compute == ComputeKind::Forward && p.overlap_efficiency > 0) {
        const ComputeKind second = info(st.sub_steps()[1].op).compute;
        if (second == ComputeKind::Backward || (p.split && second == ComputeKind::BackwardInput)) {
          o[r].push_back(Task{Kind::F, st.sub_steps()[0].stage, st.sub_steps()[0].micro, true});
          o[r].push_back(Task{second == ComputeKind::Backward ? Kind::B : Kind::I, st.sub_steps()[1].stage, st.sub_steps()[1].micro});
          continue;
        }
      }
      Kind k;
      switch (inf.compute) {
        case ComputeKind::Forward: k = Kind::F; break;
        case ComputeKind::Backward: k = Kind::B; break;
        case ComputeKind::BackwardInput: k = Kind::I; break;
        case ComputeKind::BackwardWeight: k = Kind::W; break;
        default: return std::nullopt;
      }
      if (!p.split && k != Kind::F && k != Kind::B) return std::nullopt;  // a split half in a fused problem
      o[r].push_back(Task{k, st.stage, st.micro});
    }
  }
  return o;
}

std::string to_string(const Task& t) {
  const char* k = t.kind == Kind::F ? "F" : t.kind == Kind::B ? "B" : t.kind == Kind::I ? "I" : "W";
  return std::string(k) + std::to_string(t.micro) + "s" + std::to_string(t.stage);
}

}  // namespace ppsched::search
