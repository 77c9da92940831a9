// Fitting a cost model to a run record (see calibrate.hpp for what is fitted from what): the
// record of a trace as traces/trace_reader.hpp reads it, one sample per slice. The fit runs in
// parts, each a function below: what the run was (provenance), compute, bytes, the protocol
// and the link.
#include "sim/calibrate.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "lowering/moe_phases.hpp"
#include "schedule/errors.hpp"
#include "schedule/step_types.hpp"
#include "schedule/text_format.hpp"
#include "schedule/validate.hpp"
#include "sim/cost_model.hpp"
#include "sim/engine_streams.hpp"
#include "traces/trace_reader.hpp"

namespace ppsched {
namespace {

// A slice of the record with what it ran, as the fit reads it (times in ms).
struct Slice {
  int event = -1;  // index in traceEvents (for error messages)
  int pid = -1;    // the rank
  double ts = 0, dur = 0;
  Op op = Op::FWD;
  int stage = -1, micro = -1, step_index = -1, sub = -1;
  double bytes = 0;
  bool meta = false;
  Lane lane = Lane::Compute;
  int layer = -1, phase = -1;  // Lane::Comm: an MoE layer's all-to-all
  int flows = 0;  // flow ends bound to this slice
  double end() const { return ts + dur; }
};

[[noreturn]] void fail(const std::string& file, int event, const std::string& msg) {
  Location where = in_file(file);
  if (event >= 0) where.field = "traceEvents[" + std::to_string(event) + "]";
  throw InputError(where, msg);
}

// Rounds a fitted time to whole nanoseconds (the trace's resolution): digits beyond it are
// noise, and round numbers keep the written cost file readable.
double to_ns_ms(double ms) { return std::round(ms * 1e6) / 1e6; }

std::string_view key_of(ComputeKind kind) {
  for (const auto& k : compute_keys())
    if (k.kind == kind) return k.key;
  return "";
}

// One value per stage from per-stage samples: stages without samples take the statistic over
// all samples (they ran no such step in the trace).
StageValue per_stage(const std::map<int, std::vector<double>>& by_stage, int stages, Statistic st, bool& filled) {
  std::vector<double> all;
  for (const auto& [s, v] : by_stage) all.insert(all.end(), v.begin(), v.end());
  const double overall = statistic(all, st);
  StageValue out;
  out.given = true;
  filled = false;
  for (int s = 0; s < stages; ++s) {
    auto it = by_stage.find(s);
    if (it == by_stage.end() || it->second.empty()) {
      filled = true;
      out.rows.push_back({to_ns_ms(overall)});
    } else {
      out.rows.push_back({to_ns_ms(statistic(it->second, st))});
    }
  }
  return out;
}


// Where each rank of a measured run ran (otherData.cpu_binding, exec/measured_trace.hpp). The
// model gives every rank a processor of its own; when ranks of one host had fewer CPUs than
// ranks, or were left where the OS puts them, their step times hold waits for a core.
void note_shared_cores(const std::vector<RankPlacement>& placement, std::vector<std::string>& notes) {
  struct Host {
    size_t ranks = 0;
    std::set<int> cpus;  // their union
    size_t total = 0;    // the sum of their sizes: above the union's, two ranks could meet on a core
  };
  std::map<std::string, Host> hosts;
  for (const RankPlacement& p : placement) {
    Host& h = hosts[p.host];
    ++h.ranks;
    const std::set<int> mine(p.cpus.begin(), p.cpus.end());
    h.total += mine.size();
    h.cpus.insert(mine.begin(), mine.end());
  }
  for (const auto& [host, h] : hosts) {
    if (h.ranks < 2) continue;
    const std::string on = host.empty() ? std::string() : " of host " + host;
    if (h.cpus.size() < h.ranks) {
      notes.push_back(std::to_string(h.ranks) + " ranks ran on " + std::to_string(h.cpus.size()) + " CPU(s)" + on +
                      ": they took turns on the cores, so their step times include waits for a core, and the model "
                      "gives every rank a processor of its own");
    } else if (h.total > h.cpus.size()) {
      notes.push_back("the ranks" + on + " could run on the same CPUs (not bound, ppsched-exec --cpu-bind): the OS may run "
                      "two of them on one core for part of the run, which the model does not price");
    }
  }
}


// ---- what the run was ------------------------------------------------------------------------
Calibration describe_run(const RunProvenance& p, const std::string& file, const CalibrateOptions& options) {
  Calibration cal;
  cal.schedule = p.schedule;
  cal.label = p.display_label();
  cal.transport = p.transport;
  cal.ranks = p.ranks;
  cal.stages = p.stages;
  cal.micro_batches = p.micro_batches;
  if (p.mesh) cal.dp = std::max(1, p.mesh->dp);
  cal.mode = p.mode;
  cal.layers = p.layers;
  cal.split_backward = p.split_backward;
  if (!p.mode_note.empty()) cal.notes.push_back("the run's mode: " + p.mode_note);
  note_shared_cores(p.placement, cal.notes);
  if (options.stages > 0) cal.stages = options.stages;
  if (cal.stages > (1 << 20)) fail(file, -1, "otherData.stages is " + std::to_string(cal.stages) + ", beyond 2^20");
  if (cal.stages <= 0)
    fail(file, -1, "the trace does not say how many stages the schedule has (otherData.stages); give --stages");
  return cal;
}

// The record's slices with what each ran, checked against the cost file's limits (README
// "Limits") where each number is, so that the fitted model never needs refusing as a whole.
std::vector<Slice> slices_of(const ReadTrace& t, const Calibration& cal, const std::string& file) {
  std::vector<Slice> slices;
  slices.reserve(t.record.slices.size());
  for (size_t i = 0; i < t.record.slices.size(); ++i) {
    const TimedSlice& r = t.record.slices[i];
    const SliceStep& st = t.steps[i];
    Slice s;
    s.event = st.event;
    s.pid = r.rank;
    s.ts = r.start_ms;
    s.dur = r.end_ms - r.start_ms;
    s.op = st.op;
    s.stage = st.stage;
    s.micro = st.micro;
    s.step_index = r.step_index;
    s.sub = r.sub;
    s.bytes = r.bytes;
    s.meta = r.meta;
    s.lane = r.lane;
    s.layer = r.layer;
    s.phase = r.phase;
    s.flows = t.flows_of_slice[i];
    const std::string what = "the slice of step " + std::to_string(s.step_index) + " on rank " + std::to_string(s.pid);
    if (!(s.bytes >= 0 && s.bytes <= kMaxBytes)) {
      fail(file, s.event, what + ": bytes " + general(s.bytes, 17) + " is outside 0 to " + std::to_string(static_cast<int64_t>(kMaxBytes)) +
                              " bytes (1 TiB)");
    }
    if (!(s.dur <= kMaxTimeMs))
      fail(file, s.event, what + ": its duration " + std::to_string(s.dur) + " ms is over the limit of 1e9 ms (11.6 days)");
    if (s.stage >= cal.stages)
      fail(file, s.event, what + ": stage " + std::to_string(s.stage) + " but the trace has " + std::to_string(cal.stages) +
                              " stages");
    slices.push_back(s);
  }
  return slices;
}

// ---- compute -------------------------------------------------------------------------------
// Per (compute kind, stage), the mean (or median) of the kind's slices.
// A slice's (rank, step index, sub-step): what ties a step's all-to-alls to its compute slice.
using StepKey = std::tuple<int, int, int>;
// Per step that ran all-to-alls on the comm stream (a measured MoE run), their slices in time
// order (the step's compute slice spans them: the compute thread waits for each).
using StepComm = std::map<StepKey, std::vector<const Slice*>>;
StepComm comm_by_step(const std::vector<Slice>& slices) {
  StepComm out;
  for (const auto& s : slices)
    if (s.lane == Lane::Comm && s.phase >= 0 && s.stage >= 0 && s.layer >= 0) out[{s.pid, s.step_index, s.sub}].push_back(&s);
  for (auto& [key, list] : out)
    std::sort(list.begin(), list.end(), [](const Slice* a, const Slice* b) { return a->ts < b->ts; });
  return out;
}

void fit_compute(const std::vector<Slice>& slices, const CalibrateOptions& options, Calibration& cal) {
  CostModel& c = cal.costs;
  std::map<ComputeKind, std::map<int, std::vector<double>>> samples;
  // A step's own all-to-alls are the comm stream's: its compute is the rest of its slice.
  std::map<StepKey, double> waited;
  for (const auto& [key, list] : comm_by_step(slices))
    for (const Slice* s : list) waited[key] += s->dur;
  int composites = 0, sub_slices = 0;
  cal.stage_ranks.assign(static_cast<size_t>(cal.stages), -1);
  for (const auto& s : slices) {
    if (s.lane != Lane::Compute) continue;
    if (is_composite(s.op)) {
      ++composites;
      continue;
    }
    const ComputeKind kind = info(s.op).compute;
    if (kind == ComputeKind::None) continue;
    if (s.sub >= 0) ++sub_slices;
    if (s.stage >= 0) {
      int& r = cal.stage_ranks[static_cast<size_t>(s.stage)];
      r = r == -1 || r == s.pid ? s.pid : -2;
    }
    const auto w = waited.find({s.pid, s.step_index, s.sub});
    samples[kind][s.stage].push_back(w == waited.end() ? s.dur : std::max(0.0, s.dur - w->second));
  }
  for (const auto& [kind, by_stage] : samples) {
    const bool staged = std::any_of(by_stage.begin(), by_stage.end(), [](const auto& kv) { return kv.first >= 0; });
    std::map<int, std::vector<double>> grouped;
    for (const auto& [st, v] : by_stage) {
      auto& dst = grouped[staged ? std::max(st, 0) : -1];  // at(-1) reads stage 0's value
      dst.insert(dst.end(), v.begin(), v.end());
    }
    for (const auto& [st, v] : grouped) {
      ComputeFit fit;
      fit.key = std::string(key_of(kind));
      fit.stage = st;
      fit.samples = static_cast<int>(v.size());
      fit.median_ms = statistic(v, Statistic::Median);
      fit.mean_ms = statistic(v, Statistic::Mean);
      fit.min_ms = *std::min_element(v.begin(), v.end());
      fit.max_ms = *std::max_element(v.begin(), v.end());
      fit.value_ms = to_ns_ms(options.statistic == Statistic::Median ? fit.median_ms : fit.mean_ms);
      cal.compute.push_back(fit);
    }
    StageValue* field = &c.compute(kind);
    if (!staged) {
      *field = StageValue::scalar(to_ns_ms(statistic(grouped[-1], options.statistic)));
    } else {
      bool filled = false;
      *field = per_stage(grouped, cal.stages, options.statistic, filled);
      if (filled)
        cal.notes.push_back(std::string(key_of(kind)) + ": stages without samples take the value over all stages");
    }
  }
  // A missing BWD is BWD_INPUT + BWD_WEIGHT; missing halves are BWD / 2 (as the cost reader
  // derives them), so the fitted file prices every backward variant.
  auto sampled = [&](ComputeKind k) { return samples.count(k) > 0; };
  auto derive = [&](ComputeKind target, auto f) {
    StageValue v;
    v.given = true;
    const int rows = std::max({c.bwd.rows.size(), c.bwd_input.rows.size(), c.bwd_weight.rows.size(), size_t{1}}) > 1
                         ? cal.stages
                         : 1;
    for (int s = 0; s < rows; ++s) v.rows.push_back({to_ns_ms(f(s))});
    c.compute(target) = v;
  };
  if (!sampled(ComputeKind::Backward) && sampled(ComputeKind::BackwardInput) && sampled(ComputeKind::BackwardWeight))
    derive(ComputeKind::Backward, [&](int s) { return c.bwd_input.at(s, 0) + c.bwd_weight.at(s, 0); });
  if (sampled(ComputeKind::Backward) && !sampled(ComputeKind::BackwardInput))
    derive(ComputeKind::BackwardInput, [&](int s) { return c.bwd.at(s, 0) / 2; });
  if (sampled(ComputeKind::Backward) && !sampled(ComputeKind::BackwardWeight))
    derive(ComputeKind::BackwardWeight, [&](int s) { return c.bwd.at(s, 0) / 2; });
  std::sort(cal.compute.begin(), cal.compute.end(), [](const ComputeFit& a, const ComputeFit& b) {
    return a.key != b.key ? a.key < b.key : a.stage < b.stage;
  });
  if (composites)
    cal.notes.push_back(std::to_string(composites) +
                        " composite compute slice(s) (OVERLAP_*) price two steps at once and were not used");
  if (sub_slices) {
    c.overlap_efficiency = 0;
    cal.notes.push_back("composite sub-steps were timed one after the other: overlap_efficiency 0");
  } else if (cal.transport != RunTransport::None) {
    // No composite in this run, but ppsched-exec runs OVERLAP_F_B / OVERLAP_B_F's sub-steps one
    // after the other on any transport: a prediction of a schedule with them must not hide any.
    c.overlap_efficiency = 0;
    cal.notes.push_back("a ppsched-exec run: it runs composite sub-steps one after the other, so overlap_efficiency 0");
  }
  for (const auto& k : compute_keys())
    if (StageValue& f = c.compute(k.kind); !f.given) f = StageValue::scalar(0);

}

// ---- bytes ---------------------------------------------------------------------------------
void fit_bytes(const std::vector<Slice>& slices, Calibration& cal) {
  CostModel& c = cal.costs;
  std::map<Payload, std::map<int, std::vector<double>>> payloads;
  std::vector<double> metas, tower_params, tied_params;
  for (const auto& s : slices) {
    if (s.lane == Lane::Collective) {
      if (info(s.op).collective_bytes == CollectiveBytes::TowerParams) tower_params.push_back(s.bytes);
      if (info(s.op).collective_bytes == CollectiveBytes::TiedParams) tied_params.push_back(s.bytes);
      continue;
    }
    if (s.lane != Lane::Send && s.lane != Lane::Recv) continue;
    if (s.meta) {
      metas.push_back(s.bytes);
      continue;
    }
    if (is_composite(s.op) || !is_p2p(s.op)) continue;  // a batch's group slice holds several payloads
    const StepTypeInfo& i = info(s.op);
    const int boundary = s.stage < 0 ? 0 : std::min(s.stage, s.stage + i.partner_stage_delta);
    payloads[i.payload][boundary].push_back(s.bytes);
  }
  auto scalar_of = [&](Payload p) {
    std::vector<double> all;
    for (const auto& [b, v] : payloads[p]) all.insert(all.end(), v.begin(), v.end());
    return statistic(all, Statistic::Median);
  };
  for (Payload p : {Payload::Activation, Payload::Gradient}) {
    StageValue& field = p == Payload::Activation ? c.activation_bytes : c.gradient_bytes;
    if (payloads[p].empty()) {
      field = StageValue::scalar(0);
      continue;
    }
    bool filled = false;
    field = per_stage(payloads[p], cal.stages, Statistic::Median, filled);
    for (auto& row : field.rows) row[0] = std::round(row[0]);
  }
  c.data_bytes = std::round(scalar_of(Payload::Data));
  c.features_bytes = std::round(scalar_of(Payload::Features));
  c.tower_input_bytes = std::round(scalar_of(Payload::TowerInputs));
  c.feature_grad_bytes = std::round(scalar_of(Payload::FeatureGrads));
  if (!metas.empty()) c.meta_bytes = std::round(statistic(metas, Statistic::Median));
  c.tower_param_bytes = std::round(statistic(tower_params, Statistic::Median));
  c.tied_param_bytes = std::round(statistic(tied_params, Statistic::Median));
  // Memory is not in a trace: no capacity, nothing kept.
  c.capacity_bytes.reset();
  c.kept_activation_bytes = StageValue::scalar(0);

}

// ---- protocol ------------------------------------------------------------------------------
// What the options say, else a Gloo run's (measured in the executor's traces), else the cost
// model's defaults (a GPU's).
void fit_protocol(const CalibrateOptions& options, Calibration& cal) {
  CostModel& c = cal.costs;
  const bool gloo = cal.transport == RunTransport::Gloo;
  const auto protocol = [&](const auto& option, auto& field, auto gloo_value, const char* why) {
    if (option) {
      field = *option;
    } else if (gloo) {
      field = gloo_value;
      cal.notes.push_back(why);
    }
  };
  protocol(options.eager_threshold_bytes, c.protocol.eager_threshold_bytes, 0.0,
           "a Gloo run: its sends wait for the receiver, so the fitted model has eager threshold 0");
  protocol(options.compute_blocks_host, c.protocol.compute_blocks_host, true,
           "a Gloo run computes on the CPU that posts the communication, so the fitted model has "
           "compute_blocks_host: true (nothing is posted while a compute runs)");
  protocol(options.background_progress, c.protocol.background_progress, false,
           "a Gloo run's receiver reads a payload in on its transport thread, which gets a core only "
           "while the rank waits, so the fitted model has background_progress: false");
}

// ---- link: least squares over single-message transfers ---------------------------------
// Each rank's compute slices, as the link fit reads them: when a send's payload was ready,
// and whether a receive's rank computed while it waited.
class ComputeTimeline {
 public:
  explicit ComputeTimeline(const std::vector<Slice>& slices) {
    for (const auto& s : slices)
      if (s.lane == Lane::Compute) {
        compute_ends_[s.pid].push_back({s.step_index, s.end()});
        computes_[s.pid].push_back({s.ts, s.end()});
      }
    for (auto& [pid, v] : computes_) std::sort(v.begin(), v.end());
    for (auto& [pid, v] : compute_ends_) {
      std::sort(v.begin(), v.end());
      for (size_t k = 1; k < v.size(); ++k) v[k].second = std::max(v[k].second, v[k - 1].second);
    }
  }
  // The end of the last compute slice issued before step `step` of rank `pid` (a send's
  // payload is ready then at the earliest); -1e300: none.
  double ready_at(int pid, int step) const {
    auto it = compute_ends_.find(pid);
    if (it == compute_ends_.end()) return -1e300;
    const auto& v = it->second;
    auto pos = std::lower_bound(v.begin(), v.end(), std::make_pair(step, -1e300));
    return pos == v.begin() ? -1e300 : (pos - 1)->second;
  }
  // The end of the last compute of r's rank inside r (-1e300: none).
  double last_compute_in(const Slice& r) const {
    double last = -1e300;
    auto it = computes_.find(r.pid);
    if (it == computes_.end()) return last;
    for (auto pos = std::lower_bound(it->second.begin(), it->second.end(), std::make_pair(r.ts, -1e300));
         pos != it->second.end() && pos->first < r.end(); ++pos)
      if (pos->second <= r.end()) last = std::max(last, pos->second);
    return last;
  }

 private:
  std::map<int, std::vector<std::pair<int, double>>> compute_ends_;  // pid -> (step_index, end), by step
  std::map<int, std::vector<std::pair<double, double>>> computes_;   // pid -> (start, end), by start
};

// The link fit's samples: y = L a + s x, y in ms, x in bytes (a = 1 for a P2P transfer; a
// collective instance's ring formula gives its own a and x), and what the walk over the
// flows left out or found on the way.
struct LinkSamples {
  std::vector<double> as, xs, ys;
  // Receives posted early whose payload was ready before the receiver went to wait: (bytes,
  // ms from that wait to the receive's end), for protocol.deferred_start_ms (fit_deferred_start).
  std::vector<std::pair<double, double>> deferred;
  double handoff_sum = 0;  // ms from a fitted single transfer's start to its send's return
  int singles = 0, skipped_negative = 0, skipped_deferred = 0, groups = 0;
  void add(double a, double x, double y) {
    as.push_back(a);
    xs.push_back(x);
    ys.push_back(y);
  }
};

// One sample per single-message transfer, timed from the later of the two posts (and the
// send's payload being ready) to the end of the receive, and one per slice that several flows
// share.
LinkSamples p2p_samples(const std::vector<Slice>& slices, const std::vector<MessageFlow>& flows,
                        const ComputeTimeline& timeline, bool compute_blocks_host) {
  // Where compute blocks the host (a Gloo run), a receive posted early and waited later
  // (--overlap-p2p, a batched MPipe receive) ends when its wait returned, which may be long
  // after the payload arrived: the rank computed meanwhile. Such a receive times no transfer.
  // (A simulated trace ends every receive at the arrival.)
  const auto computed_during = [&](const Slice& r) { return compute_blocks_host && timeline.last_compute_in(r) > -1e300; };
  LinkSamples out;
  // A slice that several flows share (a batch's group, a batched MPipe receive) ends with the
  // last of its messages, as the simulator ends a group: it is one sample, timed from the
  // latest start of its flows (either way), of a message of the group's mean size.
  std::map<int, double> group_start;  // slice -> the latest start of its flows
  for (const MessageFlow& f : flows) {
    const int a = f.send_slice, b = f.recv_slice;
    const Slice& snd = slices[static_cast<size_t>(a)];
    const Slice& rcv = slices[static_cast<size_t>(b)];
    if (computed_during(rcv)) {
      ++out.skipped_deferred;
      const double waited = timeline.last_compute_in(rcv);
      if (rcv.flows == 1 && std::max(snd.ts, timeline.ready_at(snd.pid, snd.step_index)) < waited - 1e-6)  // 1 ns
        out.deferred.push_back({rcv.bytes, rcv.end() - waited});
      continue;
    }
    const double start = std::max({snd.ts, rcv.ts, timeline.ready_at(snd.pid, snd.step_index)});
    for (int k : {a, b})
      if (slices[static_cast<size_t>(k)].flows > 1) {
        auto [it, fresh] = group_start.try_emplace(k, start);
        if (!fresh) it->second = std::max(it->second, start);
      }
    if (rcv.flows != 1) continue;
    const double t = rcv.end() - start;
    if (t < 0) {
      ++out.skipped_negative;
      continue;
    }
    out.add(1.0, rcv.bytes, t);
    // A group's send slice ends with the group; a send posted early and waited after a compute
    // (--overlap-p2p waits its sends at the end) ends with that wait.
    if (snd.flows == 1 && !computed_during(snd)) {
      out.handoff_sum += std::max(0.0, snd.end() - start);
      ++out.singles;
    }
  }
  for (const auto& [k, latest] : group_start) {
    const Slice& rcv = slices[static_cast<size_t>(k)];
    const double t = rcv.end() - latest;
    if (t < 0) {
      ++out.skipped_negative;
      continue;
    }
    out.add(1.0, rcv.bytes / std::max(rcv.flows, 1), t);
    ++out.groups;
  }
  return out;
}

// The send hand-off a Gloo run's sends took, and notes on what the P2P samples left out.
void note_p2p_samples(const LinkSamples& p2p, bool fit_handoff, Calibration& cal) {
  CostModel& c = cal.costs;
  if (fit_handoff && p2p.singles > 0) {
    c.protocol.send_handoff_ms = to_ns_ms(p2p.handoff_sum / static_cast<double>(p2p.singles));
    cal.notes.push_back("a Gloo send returns once the transport took its payload, before the receive ends: "
                        "send_handoff_ms " + fixed(*c.protocol.send_handoff_ms, 3) + " (the mean from the start of the " +
                        std::to_string(p2p.singles) + " fitted single transfers to their send's return)");
  }
  if (p2p.groups)
    cal.notes.push_back(std::to_string(p2p.groups) +
                        " slice(s) carry several messages (a batch's group, a batched receive): each is one sample, "
                        "from the latest start of its messages to its end, at their mean size");
  if (p2p.skipped_deferred)
    cal.notes.push_back(std::to_string(p2p.skipped_deferred) +
                        " receive(s) were waited after a compute of their rank (posted early): their end is the wait's, "
                        "not the arrival, and they were left out of the link fit");
  if (p2p.skipped_negative)
    cal.notes.push_back(std::to_string(p2p.skipped_negative) +
                        " transfer(s) ended before both ends were posted (clock skew between ranks) and were left out");
}

// Pipeline-wide collectives (MPIPE_PARAM_BROADCAST, MPIPE_GRAD_REDUCE) are priced by the
// same link with the simulator's ring formulas, so each instance is a sample too:
// broadcast (n-1) L + B s, all-reduce 2(n-1) L + 2(n-1)/n B s (s = ms per byte). An
// instance is the k-th such slice of every rank; it runs from the last arrival to the last
// end. They reach payload sizes the P2P messages may not.
void add_collective_samples(const std::vector<Slice>& slices, int ranks, LinkSamples& samples, LinkFit& lf) {
  std::map<std::pair<int, int>, std::vector<const Slice*>> by_op_rank;  // (op, pid) -> slices in time order
  for (const auto& s : slices)
    if (s.lane == Lane::Collective && info(s.op).collective == CollectiveScope::AllPipelineRanks)
      by_op_rank[{static_cast<int>(s.op), s.pid}].push_back(&s);
  std::map<int, std::vector<std::vector<const Slice*>>> per_op;  // op -> per rank
  for (auto& [key, v] : by_op_rank) {
    std::sort(v.begin(), v.end(), [](const Slice* a, const Slice* b) { return a->ts < b->ts; });
    per_op[key.first].push_back(v);
  }
  for (const auto& [op, per_rank] : per_op) {
    if (static_cast<int>(per_rank.size()) != ranks || ranks < 2) continue;
    size_t count = per_rank[0].size();
    for (const auto& v : per_rank) count = std::min(count, v.size());
    const double n = static_cast<double>(ranks);
    for (size_t k = 0; k < count; ++k) {
      double last_start = -1e300, last_end = -1e300;
      for (const auto& v : per_rank) last_start = std::max(last_start, v[k]->ts), last_end = std::max(last_end, v[k]->end());
      const double bytes = per_rank[0][k]->bytes;
      const bool reduce = info(static_cast<Op>(op)).collective_kind == CollectiveKind::AllReduce;
      samples.add(reduce ? 2 * (n - 1) : n - 1, reduce ? 2 * (n - 1) / n * bytes : bytes, last_end - last_start);
      ++lf.collectives;
    }
  }
}

// Least squares for y = L a + s x with L >= 0, s >= 0 over the samples: lf's latency, note
// and residuals; returns s (ms per byte, 0: infinite bandwidth).
double least_squares(const LinkSamples& samples, LinkFit& lf) {
  const std::vector<double>& as = samples.as, &xs = samples.xs, &ys = samples.ys;
  double slope = 0;
  if (xs.empty()) {
    lf.note = "no usable P2P transfers: latency 0, infinite bandwidth";
    return slope;
  }
  double saa = 0, sax = 0, sxx = 0, say = 0, sxy = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    saa += as[k] * as[k], sax += as[k] * xs[k], sxx += xs[k] * xs[k];
    say += as[k] * ys[k], sxy += xs[k] * ys[k];
  }
  auto sse = [&](double lat, double sl) {
    double ss = 0;
    for (size_t k = 0; k < xs.size(); ++k) {
      const double r = ys[k] - (lat * as[k] + sl * xs[k]);
      ss += r * r;
    }
    return ss;
  };
  const double det = saa * sxx - sax * sax;
  const bool separable = det > 1e-9 * saa * sxx;  // at least two (a, x) directions
  if (!separable) {
    lf.latency_ms = say / saa;
    lf.note = "one payload size only: the latency absorbs the whole transfer time, bandwidth infinite";
  } else {
    lf.latency_ms = (sxx * say - sax * sxy) / det;
    slope = (saa * sxy - sax * say) / det;
    if (slope <= 0 || lf.latency_ms < 0) {
      // The constrained optimum lies on a boundary: a constant time (s = 0) or no latency.
      const double lat_only = std::max(0.0, say / saa), slope_only = std::max(0.0, sxy / sxx);
      if (sse(lat_only, 0) <= sse(0, slope_only)) {
        slope = 0;
        lf.latency_ms = lat_only;
        lf.note = "transfer time does not grow with size here: latency only, bandwidth infinite";
      } else {
        slope = slope_only;
        lf.latency_ms = 0;
        lf.note = "the unconstrained fit gave a negative latency: refitted with latency 0";
      }
    }
  }
  for (size_t k = 0; k < xs.size(); ++k)
    lf.max_residual_ms = std::max(lf.max_residual_ms, std::fabs(ys[k] - (lf.latency_ms * as[k] + slope * xs[k])));
  lf.rms_residual_ms = std::sqrt(sse(lf.latency_ms, slope) / static_cast<double>(xs.size()));
  return slope;
}

// The fitted link of slope s (ms per byte) and lf's latency, within a cost file's limits.
Link fitted_link(double slope, LinkFit& lf, const std::string& file) {
  if (slope > 0) lf.bandwidth_GBps = 1e-6 / slope;
  if (lf.bandwidth_GBps && *lf.bandwidth_GBps > kMaxBandwidthGBps) {
    lf.bandwidth_GBps.reset();
    lf.note += std::string(lf.note.empty() ? "" : "; ") + "the fitted bandwidth is beyond 1e9 GB/s: taken as infinite";
  }
  if (lf.bandwidth_GBps && *lf.bandwidth_GBps < kMinBandwidthGBps)
    fail(file, -1, "the transfers fit a bandwidth of " + std::to_string(*lf.bandwidth_GBps) +
                       " GB/s, below the cost file's limit of 1e-6 GB/s: the trace's times or sizes are not a real run's");
  if (lf.latency_ms > kMaxTimeMs)
    fail(file, -1, "the transfers fit a link latency of " + std::to_string(lf.latency_ms) +
                       " ms, over the cost file's limit of 1e9 ms: the ranks' clocks are far apart (ts) or the "
                       "trace's times are not a real run's");
  Link link;
  link.latency_ms = to_ns_ms(lf.latency_ms);
  link.bandwidth_GBps = lf.bandwidth_GBps;
  return link;
}

// background_progress false starts such a transfer once its receiver waits; what it took
// beyond a transfer time is the sender's transport thread getting a core.
void fit_deferred_start(const std::vector<std::pair<double, double>>& deferred, const Link& link, Calibration& cal) {
  CostModel& c = cal.costs;
  if (c.protocol.background_progress || deferred.empty()) return;
  double extra = 0;
  for (const auto& [bytes, ms] : deferred) extra += std::max(0.0, ms - link.transfer_ms(bytes));
  c.protocol.deferred_start_ms = to_ns_ms(extra / static_cast<double>(deferred.size()));
  cal.notes.push_back(std::to_string(deferred.size()) + " receive(s) posted early were ready before their rank "
                      "went to wait: they took deferred_start_ms " + fixed(c.protocol.deferred_start_ms, 3) +
                      " beyond a transfer time on average from that wait (the sender's thread getting a core)");
}

void fit_link(const std::vector<Slice>& slices, const std::vector<MessageFlow>& flows, const std::string& file,
              const CalibrateOptions& options, Calibration& cal) {
  CostModel& c = cal.costs;
  const bool fit_handoff = options.send_handoff.value_or(cal.transport == RunTransport::Gloo);
  LinkSamples samples = p2p_samples(slices, flows, ComputeTimeline(slices), c.protocol.compute_blocks_host);
  note_p2p_samples(samples, fit_handoff, cal);
  LinkFit& lf = cal.link;
  lf.transfers = static_cast<int>(samples.xs.size());
  for (double y : samples.ys) lf.mean_transfer_ms += y / static_cast<double>(samples.ys.size());
  add_collective_samples(slices, cal.ranks, samples, lf);
  lf.sizes = static_cast<int>(std::set<double>(samples.xs.begin(), samples.xs.end()).size());
  const double slope = least_squares(samples, lf);
  const Link link = fitted_link(slope, lf, file);
  fit_deferred_start(samples.deferred, link, cal);
  c.links.intra_node = c.links.inter_node = link;
  c.links.pairs.clear();
}

// ---- MoE: a measured run's comm stream (issue 39) --------------------------------------------
// What MoeFit (calibrate.hpp) says: the all-to-all link, each stage's layers and phase shares,
// the contention.
void fit_moe(const std::vector<Slice>& slices, const std::string& file, Calibration& cal) {
  const StepComm comm = comm_by_step(slices);
  if (comm.empty()) return;
  CostModel& c = cal.costs;
  MoeFit f;
  f.ep = cal.dp;
  if (f.ep <= 1) {
    cal.notes.push_back("the trace has all-to-alls on the comm stream but no expert-parallel group (otherData.mesh: one "
                        "replica): they were not fitted");
    return;
  }
  // The all-to-all link.
  LinkSamples samples;
  std::set<double> sizes;
  std::map<std::pair<int, int>, std::vector<double>> layer_bytes;  // (stage, layer) -> bytes sent
  std::vector<int> layers(static_cast<size_t>(cal.stages), 0);
  for (const auto& [key, list] : comm) {
    for (const Slice* s : list) {
      samples.add(1.0, s->bytes, s->dur);
      sizes.insert(s->bytes);
      f.mean_ms += s->dur;
      layer_bytes[{s->stage, s->layer}].push_back(s->bytes);
      if (s->stage < cal.stages) layers[static_cast<size_t>(s->stage)] = std::max(layers[static_cast<size_t>(s->stage)], s->layer + 1);
    }
  }
  f.all_to_alls = static_cast<int>(samples.xs.size());
  f.sizes = static_cast<int>(sizes.size());
  f.mean_ms /= static_cast<double>(f.all_to_alls);
  LinkFit lf;
  const Link a2a = fitted_link(least_squares(samples, lf), lf, file);
  f.latency_ms = a2a.latency_ms;
  f.bandwidth_GBps = a2a.bandwidth_GBps;
  f.rms_residual_ms = lf.rms_residual_ms;
  f.note = lf.note;
  f.layers = layers;
  c.moe.ep = f.ep;
  c.moe.a2a = a2a;

  // The phase shares: the compute between a lone step's all-to-alls, in expand_phases' order
  // (a forward: per layer its attention side, then its experts, then what follows the last
  // layer; a backward: what follows the last layer first, then per layer from the last its
  // experts' and its attention side's backward).
  struct Acc {
    std::vector<double> before, experts;
    double after = 0, total = 0;
    int steps = 0;
  };
  std::map<std::pair<int, int>, Acc> acc;  // (stage, PhasePart)
  for (const auto& s : slices) {
    if (s.lane != Lane::Compute || is_composite(s.op) || s.stage < 0 || s.stage >= cal.stages) continue;
    const int part = phase_part(info(s.op).compute);
    const int L = layers[static_cast<size_t>(s.stage)];
    if (part < 0 || L == 0) continue;
    const auto it = comm.find({s.pid, s.step_index, s.sub});
    if (it == comm.end() || static_cast<int>(it->second.size()) != 2 * L) continue;
    const auto& cs = it->second;
    std::vector<double> g(cs.size() + 1);
    g[0] = cs[0]->ts - s.ts;
    for (size_t k = 1; k < cs.size(); ++k) g[k] = cs[k]->ts - cs[k - 1]->end();
    g[cs.size()] = s.end() - cs.back()->end();
    for (double& x : g) x = std::max(0.0, x);
    Acc& a = acc[{s.stage, part}];
    a.before.resize(static_cast<size_t>(L), 0.0);
    a.experts.resize(static_cast<size_t>(L), 0.0);
    if (part == static_cast<int>(PhasePart::Forward)) {
      for (int i = 0; i < L; ++i) {
        a.before[static_cast<size_t>(i)] += g[static_cast<size_t>(2 * i)];
        a.experts[static_cast<size_t>(i)] += g[static_cast<size_t>(2 * i + 1)];
      }
      a.after += g[static_cast<size_t>(2 * L)];
    } else {
      a.after += g[0];
      for (int j = 0; j < L; ++j) {
        a.experts[static_cast<size_t>(L - 1 - j)] += g[static_cast<size_t>(2 * j + 1)];
        a.before[static_cast<size_t>(L - 1 - j)] += g[static_cast<size_t>(2 * j + 2)];
      }
    }
    for (double x : g) a.total += x;
    ++a.steps;
    ++f.shared_steps;
  }
  c.moe.stages.assign(static_cast<size_t>(cal.stages), MoeStage{});
  for (int st = 0; st < cal.stages; ++st) {
    const int L = layers[static_cast<size_t>(st)];
    if (L == 0) continue;
    MoeStage& m = c.moe.stages[static_cast<size_t>(st)];
    m.layers.resize(static_cast<size_t>(L));
    for (int i = 0; i < L; ++i) m.layers[static_cast<size_t>(i)].a2a_bytes = statistic(layer_bytes[{st, i}], Statistic::Median);
    // A part without a lone step takes another's split: a backward's from the other backward
    // (BWD_WEIGHT has no all-to-all, so always), a forward's from a backward's or the reverse.
    const int order[4][4] = {{0, 1, 2, 3}, {1, 2, 0, 3}, {2, 1, 0, 3}, {1, 2, 0, 3}};
    for (int part = 0; part < static_cast<int>(kPhaseParts); ++part) {
      const Acc* from = nullptr;
      for (int k = 0; k < 4 && !from; ++k) {
        const auto it = acc.find({st, order[part][k]});
        if (it != acc.end() && it->second.total > 0) from = &it->second;
      }
      if (!from) continue;
      for (int i = 0; i < L; ++i) {
        m.layers[static_cast<size_t>(i)].before[static_cast<size_t>(part)] =
            static_cast<float>(from->before[static_cast<size_t>(i)] / from->total);
        m.layers[static_cast<size_t>(i)].experts[static_cast<size_t>(part)] =
            static_cast<float>(from->experts[static_cast<size_t>(i)] / from->total);
      }
      m.after[static_cast<size_t>(part)] = static_cast<float>(from->after / from->total);
    }
  }

  // The contention: overlapped steps whose two chains both ran all-to-alls.
  struct Overlapped {
    double measured;
    std::vector<std::vector<des::TimedPhase>> chains;
  };
  std::vector<Overlapped> steps;
  std::vector<PhaseItem> items;
  for (const auto& s : slices) {
    if (s.lane != Lane::Compute || !is_composite(s.op)) continue;
    Overlapped o{s.dur, {}};
    for (int sub = 0; sub < 2; ++sub) {
      const auto it = comm.find({s.pid, s.step_index, sub});
      if (it == comm.end()) break;
      const Slice& leaf = *it->second.front();
      const ComputeKind kind = info(leaf.op).compute;
      if (leaf.stage < 0 || leaf.stage >= cal.stages || phase_part(kind) < 0) break;
      const double ms = c.compute(kind).at(leaf.stage, 0);
      items.clear();
      expand_phases(leaf.op, c.moe.stages[static_cast<size_t>(leaf.stage)], items);
      auto& chain = o.chains.emplace_back();
      for (const PhaseItem& p : items)
        chain.push_back({p, p.phase.stream == Stream::Comm ? a2a.transfer_ms(p.bytes) : p.share * ms});
    }
    if (o.chains.size() == 2) steps.push_back(std::move(o));
  }
  f.overlapped_steps = static_cast<int>(steps.size());
  if (steps.empty()) {
    f.contention = c.moe.contention;
    cal.notes.push_back("no overlapped step with all-to-alls on both chains: the contention keeps its default " +
                        general(c.moe.contention, 4));
  } else {
    double best = 0, best_sse = -1;
    for (int k = 0; k <= 95; ++k) {
      const double cf = k / 100.0;
      double sse = 0;
      for (const auto& o : steps) {
        const double r = o.measured - des::run_streams(o.chains, cf).span_ms;
        sse += r * r;
      }
      if (best_sse < 0 || sse < best_sse) best_sse = sse, best = cf;
    }
    f.contention = best;
    f.contention_rms_ms = std::sqrt(best_sse / static_cast<double>(steps.size()));
    c.moe.contention = best;
  }
  cal.moe = f;
}

// A derived value (BWD = BWD_INPUT + BWD_WEIGHT) may pass the limit its parts kept.
void check_limits(const CostModel& c, const std::string& file) {
  for (const auto& k : compute_keys()) {
    const StageValue& v = c.compute(k.kind);
    for (size_t s = 0; s < v.rows.size(); ++s)
      for (double ms : v.rows[s])
        if (!(ms <= kMaxTimeMs))
          fail(file, -1, "the fitted model is not a valid cost file (compute." + std::string(k.key) + "[" +
                             std::to_string(s) + "]): " + std::to_string(ms) + " ms is over the limit of 1e9 ms");
  }
}

}  // namespace

double statistic(std::vector<double> v, Statistic s) {
  if (v.empty()) return 0;
  if (s == Statistic::Mean) {
    double sum = 0;
    for (double x : v) sum += x;
    return sum / static_cast<double>(v.size());
  }
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Calibration calibrate_run(const ReadTrace& trace, const std::string& file, const CalibrateOptions& options) {
  Calibration cal = describe_run(trace.record.provenance, file, options);
  const std::vector<Slice> slices = slices_of(trace, cal, file);
  cal.slices = static_cast<int>(slices.size());
  cal.flows = static_cast<int>(trace.record.flows.size());
  if (cal.ranks <= 0) cal.ranks = static_cast<int>(trace.record.ranks.size());
  double first = slices[0].ts, last = slices[0].end();
  for (const auto& s : slices) first = std::min(first, s.ts), last = std::max(last, s.end());
  cal.measured_makespan_ms = last - first;

  cal.costs = CostModel{};
  cal.costs.source = "calibrated from " + (file.empty() ? std::string("a trace") : file);
  fit_protocol(options, cal);
  fit_compute(slices, options, cal);
  fit_bytes(slices, cal);
  fit_link(slices, trace.record.flows, file, options, cal);
  fit_moe(slices, file, cal);
  check_limits(cal.costs, file);
  return cal;
}

Calibration calibrate_trace(std::string_view text, const std::string& file, const CalibrateOptions& options) {
  return calibrate_run(read_chrome_trace(text, file), file, options);
}

}  // namespace ppsched
