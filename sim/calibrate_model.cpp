#include "sim/calibrate_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "schedule/errors.hpp"
#include "schedule/text_format.hpp"
#include "sim/workload_costs.hpp"

namespace ppsched {
namespace {

struct Point {
  double flops, ms;
  int rank = -1;  // the traced rank that ran the stage (-1: unknown)
};

void check_rate(double flops_per_s) {
  if (flops_per_s < kMinFlopsPerSecond || flops_per_s > kMaxFlopsPerSecond)
    throw InputError({}, "calibrate --model: the fitted rate " + std::to_string(flops_per_s) +
                             " FLOP/s is outside 1e3..1e21: do the model and the trace describe the same run?");
}

// Whether the trace says which one rank ran each stage (not so where a stage ran on several:
// data-parallel replicas).
bool ranks_known(const Calibration& c) {
  return !c.stage_ranks.empty() && std::none_of(c.stage_ranks.begin(), c.stage_ranks.end(), [](int r) { return r == -2; });
}

// t = a + x / rate by least squares; through the origin when `origin`, the x do not spread or a < 0.
KindFit fit_line(const std::vector<Point>& pts, bool origin = false) {
  KindFit f;
  f.points = static_cast<int>(pts.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  double lo = pts.front().flops, hi = lo;
  for (const Point& p : pts) {
    sx += p.flops;
    sy += p.ms;
    sxx += p.flops * p.flops;
    sxy += p.flops * p.ms;
    lo = std::min(lo, p.flops);
    hi = std::max(hi, p.flops);
  }
  const double n = static_cast<double>(pts.size());
  double slope = 0, a = 0;
  const double den = n * sxx - sx * sx;
  // The FLOPs must differ by more than 1 % for an intercept to mean anything.
  if (!origin && pts.size() >= 2 && hi > lo * 1.01 && den > 0) {
    slope = (n * sxy - sx * sy) / den;
    a = (sy - slope * sx) / n;
  }
  if (!(slope > 0) || a < 0) {
    a = 0;
    slope = sxx > 0 ? sxy / sxx : 0;
    f.through_origin = true;
  }
  if (!(slope > 0) || !std::isfinite(slope))
    throw InputError({}, "calibrate --model: the step times do not grow with the stages' FLOPs (no positive rate fits)");
  f.flops_per_s = 1e3 / slope;  // slope: ms per FLOP
  f.overhead_ms = a;
  double ss = 0;
  for (const Point& p : pts) {
    const double r = a + slope * p.flops - p.ms;
    ss += r * r;
    f.max_residual_ms = std::max(f.max_residual_ms, std::abs(r));
  }
  f.rms_residual_ms = std::sqrt(ss / n);
  check_rate(f.flops_per_s);
  return f;
}

// t_s = f_r (a + x_s / rate): the line of fit_line and a time factor f_r per rank (a slower
// core, a throttled GPU), their mean 1. Where no rank ran two stages of different FLOPs, the
// factors leave nothing to tell an overhead from a rate: the line goes through the origin and
// each rank's factor makes its own time exact. Else alternating least squares.
KindFit fit_ranked(const std::vector<Point>& pts) {
  int ranks = 0;
  for (const Point& p : pts) {
    if (p.rank < 0) return fit_line(pts);
    ranks = std::max(ranks, p.rank + 1);
  }
  std::vector<double> lo(static_cast<size_t>(ranks), 0), hi(static_cast<size_t>(ranks), 0);
  bool spread = false;
  for (const Point& p : pts) {
    double& l = lo[static_cast<size_t>(p.rank)];
    double& h = hi[static_cast<size_t>(p.rank)];
    l = l > 0 ? std::min(l, p.flops) : p.flops;
    h = std::max(h, p.flops);
    spread = spread || h > l * 1.01;
  }
  std::vector<double> f(static_cast<size_t>(ranks), 1.0);
  KindFit line;
  for (int round = 0; round < (spread ? 50 : 1); ++round) {
    std::vector<Point> scaled = pts;
    for (Point& p : scaled) p.ms /= f[static_cast<size_t>(p.rank)];
    line = fit_line(scaled, !spread);
    std::vector<double> t(static_cast<size_t>(ranks), 0), m(static_cast<size_t>(ranks), 0);
    for (const Point& p : pts) {
      t[static_cast<size_t>(p.rank)] += p.ms;
      m[static_cast<size_t>(p.rank)] += line.overhead_ms + p.flops / line.flops_per_s * 1e3;
    }
    double sum = 0;
    int n = 0;
    for (size_t r = 0; r < f.size(); ++r)
      if (m[r] > 0 && t[r] > 0) {
        f[r] = t[r] / m[r];
        sum += f[r];
        ++n;
      }
    // Mean 1 over the ranks with stages: the rates are the mean rank's.
    const double mean = n ? sum / n : 1.0;
    for (double& x : f) x /= mean;
    line.overhead_ms *= mean;
    line.flops_per_s /= mean;
  }
  double ss = 0;
  line.max_residual_ms = 0;
  for (const Point& p : pts) {
    const double r = f[static_cast<size_t>(p.rank)] * (line.overhead_ms + p.flops / line.flops_per_s * 1e3) - p.ms;
    ss += r * r;
    line.max_residual_ms = std::max(line.max_residual_ms, std::abs(r));
  }
  line.rms_residual_ms = std::sqrt(ss / static_cast<double>(pts.size()));
  for (double& x : f) x = std::clamp(std::round(x * 1e4) / 1e4, 1e-3, 1e3);
  line.rank_factors = std::move(f);
  check_rate(line.flops_per_s);
  return line;
}

}  // namespace

std::vector<KindFit> fit_kind_rates(const Calibration& c, const StagePlan& traced) {
  const size_t stages = traced.stages.size();
  if (static_cast<size_t>(c.stages) != stages)
    throw InputError({}, "calibrate --model: the trace has " + std::to_string(c.stages) + " stages, the model's layout " +
                             std::to_string(stages));
  // The trace's fitted time of each (key, stage).
  std::map<std::string, std::map<int, double>> t;
  for (const ComputeFit& f : c.compute)
    if (f.stage >= 0) t[f.key][f.stage] = f.value_ms;
  auto flops = [&](size_t s, RateKind k) {
    const StageFigures& st = traced.stages[s];
    const auto& v = k == RateKind::Fwd ? st.fwd_flops : k == RateKind::BwdInput ? st.bwd_input_flops : st.bwd_weight_flops;
    double sum = 0;  // the mean over micro-batch lengths (the trace's times are per-stage means)
    for (double x : v) sum += x;
    return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
  };
  // The traced rank of each stage, when every stage ran on one (no data-parallel replicas).
  const bool ranked = ranks_known(c);
  auto rank_of = [&](int stage) {
    return ranked && static_cast<size_t>(stage) < c.stage_ranks.size() ? c.stage_ranks[static_cast<size_t>(stage)] : -1;
  };
  auto points = [&](const std::string& key, auto x_of) {
    std::vector<Point> pts;
    if (const auto it = t.find(key); it != t.end())
      for (const auto& [stage, ms] : it->second)
        if (static_cast<size_t>(stage) < stages && x_of(static_cast<size_t>(stage)) > 0)
          pts.push_back({x_of(static_cast<size_t>(stage)), ms, rank_of(stage)});
    return pts;
  };
  std::vector<KindFit> out;
  const bool split = t.count("BWD_INPUT") && t.count("BWD_WEIGHT");
  auto fwd = points("FWD", [&](size_t s) { return flops(s, RateKind::Fwd); });
  if (fwd.empty()) throw InputError({}, "calibrate --model: the trace has no forward step time on a stage with FLOPs");
  KindFit f = fit_ranked(fwd);
  f.key = f.from = "FWD";
  out.push_back(f);
  if (split) {
    for (RateKind k : {RateKind::BwdInput, RateKind::BwdWeight}) {
      const std::string key = kRateKindKeys[static_cast<size_t>(k)];
      auto pts = points(key, [&](size_t s) { return flops(s, k); });
      if (pts.empty()) throw InputError({}, "calibrate --model: the trace has no " + key + " step time on a stage with FLOPs");
      KindFit g = fit_ranked(pts);
      g.key = g.from = key;
      out.push_back(g);
    }
  } else {
    // A whole backward: one rate for both halves, its overhead shared between them.
    auto pts = points("BWD", [&](size_t s) { return flops(s, RateKind::BwdInput) + flops(s, RateKind::BwdWeight); });
    if (pts.empty()) throw InputError({}, "calibrate --model: the trace has no backward step time on a stage with FLOPs");
    KindFit g = fit_ranked(pts);
    g.from = "BWD";
    g.overhead_ms /= 2;
    g.key = "BWD_INPUT";
    out.push_back(g);
    g.key = "BWD_WEIGHT";
    out.push_back(g);
  }
  return out;
}

Device with_fits(Device device, const std::vector<KindFit>& fits) {
  for (const KindFit& f : fits)
    for (size_t k = 0; k < 3; ++k)
      if (f.key == kRateKindKeys[k]) device.fitted[k] = Device::Fitted{f.flops_per_s, f.overhead_ms};
  return device;
}

RankTimes rank_time_factors(const Calibration& c, const std::vector<KindFit>& fits) {
  RankTimes out;
  if (!c.stage_ranks.empty() && !ranks_known(c)) {
    out.why_not = "a stage ran on several ranks (data-parallel replicas): every rank is priced alike";
    return out;
  }
  size_t ranks = 0;
  for (const KindFit& f : fits) ranks = std::max(ranks, f.rank_factors.size());
  if (ranks == 0) return out;
  // Every traced rank has an entry (1 for a rank that ran no stage), so that a schedule on the
  // traced rank count is priced with them.
  ranks = std::max(ranks, static_cast<size_t>(std::max(c.ranks, 0)));
  out.factors.assign(ranks, {1.0, 1.0, 1.0});
  for (const KindFit& f : fits)
    for (size_t k = 0; k < 3; ++k)
      if (f.key == kRateKindKeys[k])
        for (size_t r = 0; r < f.rank_factors.size(); ++r) out.factors[r][k] = f.rank_factors[r];
  return out;
}

SplitCosts split_costs(const Calibration& c) {
  SplitCosts out;
  std::vector<double> input, weight;
  for (const SplitBackwardProbe& p : c.split_backward) {
    if (!(p.bwd_ms > 0)) continue;
    const Device::SplitCost r{p.bwd_input_ms / p.bwd_ms, p.bwd_weight_ms / p.bwd_ms};
    if (r.input > 100 || r.weight > 100) continue;  // a whole backward too short to divide by
    if (p.stage == 0) {
      out.first = r;
    } else {
      input.push_back(r.input);
      weight.push_back(r.weight);
    }
  }
  if (!input.empty())
    out.other = Device::SplitCost{statistic(input, Statistic::Median), statistic(weight, Statistic::Median)};
  return out;
}

WorkloadFit fit_workload(Workload net, Calibration& c, const std::string& trace_layout, const std::string& trace_file) {
  // The traced layout: --trace-layout, else the layers each stage held as the trace says
  // (otherData.layers, ppsched-exec), else the even split.
  std::optional<WorkloadCosts> from_trace;
  if (trace_layout.empty() && !c.layers.empty()) {
    std::vector<std::vector<std::string>> names(static_cast<size_t>(c.stages));
    for (const StageLayers& sl : c.layers)
      if (sl.stage >= 0 && sl.stage < c.stages) names[static_cast<size_t>(sl.stage)] = sl.layers;
    from_trace = workload_costs(net, named_layout(names, net.layers(), trace_file + " (otherData.layers)"));
    c.notes.push_back("the traced layout " + counts_text(from_trace->layout, from_trace->layers) +
                      " is the trace's (otherData.layers)");
  }
  const WorkloadCosts traced = from_trace ? std::move(*from_trace) : workload_costs(net, c.stages, trace_layout, "--trace-layout");
  WorkloadFit out;
  out.traced_layout = traced.layout;
  out.traced_layout_text = counts_text(traced.layout, traced.layers);
  out.fits = fit_kind_rates(c, traced.plan);
  const std::vector<KindFit>& fits = out.fits;
  net.device = with_fits(net.device, fits);
  // Each traced rank's time over the fitted rates' (a slower core, a throttled GPU): a
  // schedule predicted on as many ranks prices each stage at its rank's factor.
  const RankTimes rt = rank_time_factors(c, fits);
  net.device.rank_time = rt.factors;
  if (!rt.why_not.empty()) c.notes.push_back(rt.why_not);
  // A split step's time: its measured fraction of the whole backward, when the trace
  // probed the executor's split and its own backwards were whole (the fit's halves would
  // otherwise cost what the whole does).
  const SplitCosts split = split_costs(c);
  const bool whole_fit = std::any_of(fits.begin(), fits.end(), [](const KindFit& f) { return f.from == "BWD"; });
  if ((split.first || split.other) && whole_fit) {
    net.device.split_first = split.first;
    net.device.split_other = split.other;
    auto text = [](const char* where, const std::optional<Device::SplitCost>& sc) {
      return sc ? std::string(where) + " BWD_INPUT " + fixed(sc->input, 2) + " + BWD_WEIGHT " + fixed(sc->weight, 2) : std::string();
    };
    std::string what = text("stage 0:", split.first);
    if (split.other) what += (what.empty() ? "" : "; ") + text("other stages:", split.other);
    c.notes.push_back("a split backward is priced as the executor's probe measured it (otherData.split_backward), "
                      "as fractions of the whole backward: " + what);
  } else if (split.first || split.other) {
    c.notes.push_back("the trace's split-backward probes were not used: its own backwards were split, so the fit "
                      "already prices them");
  }
  // The trace's link, protocol and collectives stay the fitted model's.
  net.links = c.costs.links;
  net.collectives = c.costs.collectives;
  net.protocol = c.costs.protocol;
  net.overlap_efficiency = c.costs.overlap_efficiency;
  out.fitted = std::move(net);
  return out;
}

}  // namespace ppsched
