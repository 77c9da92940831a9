// Per-layer calibration (`ppsched calibrate TRACE --model MODEL`): the per-stage step times a
// trace gives (sim/calibrate.hpp) explained by the FLOPs the model puts on each stage of the
// traced layout. Per compute kind, a stage's step time is t_s = overhead + FLOPs_s / rate,
// fitted by least squares over the stages (through the origin when the stages' FLOPs do not
// differ enough to separate the two, or the intercept comes out negative). Each traced rank
// has a time factor on top (t_s = f_r (overhead + FLOPs_s / rate), the factors' mean 1): a
// rank on a slower core takes longer for the same FLOPs, and a schedule predicted on the same
// ranks prices each stage at the factor of the rank it runs on. The fitted rates price any
// layout, V, family or micro-batch count of the same model: the prediction a per-(kind, stage)
// fit cannot make.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "workload/layout.hpp"
#include "workload/workload.hpp"
#include "workload/stage_plan.hpp"
#include "sim/calibrate.hpp"

namespace ppsched {

struct KindFit {
  std::string key;          // "FWD", "BWD_INPUT", "BWD_WEIGHT"
  std::string from;         // the trace's step the fit used ("BWD" for an unsplit backward)
  int points = 0;           // stages with a measured time and FLOPs
  double flops_per_s = 0;   // achieved
  double overhead_ms = 0;   // per step
  bool through_origin = false;
  // Per traced rank: its stages' time over the line's (mean 1); empty when the trace does not
  // say which rank ran each stage.
  std::vector<double> rank_factors;
  double rms_residual_ms = 0, max_residual_ms = 0;
};

// Throws InputError when the trace's stage count differs from the plan's, or a kind cannot be
// fitted (no stage with both a time and FLOPs).
std::vector<KindFit> fit_kind_rates(const Calibration& c, const StagePlan& traced);

// `device` with the fits as its fitted rates.
Device with_fits(Device device, const std::vector<KindFit>& fits);

// Per traced rank, per RateKind: the fits' rank factors (Device::rank_time). Empty, with the
// reason, when the trace cannot tell ranks apart: a stage ran on several ranks (data-parallel
// replicas).
struct RankTimes {
  std::vector<std::array<double, 3>> factors;
  std::string why_not;
};
RankTimes rank_time_factors(const Calibration& c, const std::vector<KindFit>& fits);

// What a split backward costs as fractions of the whole one, from the trace's probes of the
// executor (otherData.split_backward): stage 0's ratios, and the median ratios of the other
// stages. Unset where the trace has no probe (or a probe of a backward that took no time).
struct SplitCosts {
  std::optional<Device::SplitCost> first, other;
};
SplitCosts split_costs(const Calibration& c);

// The whole per-layer calibration of `net` on trace calibration `c`: the traced layout
// (`trace_layout`, else the trace's otherData.layers, else the even split over its stages), the
// kinds' fitted rates, each traced rank's factors, the probed split-backward fractions when the
// trace's own backwards were whole, and the trace's platform (link, collectives, protocol,
// overlap), all put into the network: the fitted model that prices any schedule. What it
// decided goes to c.notes. `trace_file` names the trace in messages.
struct WorkloadFit {
  Workload fitted;
  std::vector<KindFit> fits;
  Layout traced_layout;
  std::string traced_layout_text;  // its body-layer counts, for reports
};
WorkloadFit fit_workload(Workload net, Calibration& c, const std::string& trace_layout, const std::string& trace_file);

}  // namespace ppsched
