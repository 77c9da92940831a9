// Fitting a cost model to a trace (see calibrate.hpp for what is fitted from what).
//
// The trace is read through its documented layout (traces/chrome_trace.hpp): X slices with
// args {micro, stage, step_index, [sub], bytes, meta, op}, thread_name metadata naming each
// thread's lane ("compute", "send #2", ...), and v1 flow events whose ends lie strictly inside
// the send and the receive slice of one message. Only the lane names are taken from metadata,
// so this reader does not depend on the writer's thread numbering.
#include "sim/calibrate.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "model/errors.hpp"
#include "model/step_types.hpp"
#include "model/validate.hpp"
#include "sim/cost_model.hpp"

namespace ppsched {
namespace {

using json = nlohmann::json;

enum class LaneKind { Compute, Send, Recv, Collective, Unknown };

struct Slice {
  int event = -1;  // index in traceEvents (for error messages)
  int pid = -1, tid = -1;
  double ts = 0, dur = 0;  // microseconds
  Op op = Op::FWD;
  int stage = -1, micro = -1, step_index = -1, sub = -1;
  double bytes = 0;
  bool meta = false;
  LaneKind lane = LaneKind::Unknown;
  int flows = 0;  // flow ends bound to this slice
  double end() const { return ts + dur; }
};

struct FlowEnd {
  int event = -1;
  int pid = -1, tid = -1;
  double ts = 0;
};

[[noreturn]] void fail(const std::string& file, int event, const std::string& msg) {
  Location where = in_file(file);
  if (event >= 0) where.field = "traceEvents[" + std::to_string(event) + "]";
  throw InputError(where, msg);
}

LaneKind lane_of_thread(const std::string& name) {
  const std::string word = name.substr(0, name.find(' '));
  if (word == "compute") return LaneKind::Compute;
  if (word == "send") return LaneKind::Send;
  if (word == "recv") return LaneKind::Recv;
  if (word == "collective") return LaneKind::Collective;
  return LaneKind::Unknown;
}

// A required number of an event; `what` names it in the error.
double number_at(const json& obj, const char* key, const std::string& file, int event, const std::string& what) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number())
    fail(file, event, what + " has no numeric \"" + key + "\"");
  return it->get<double>();
}

// A required integer field (ranks, threads, stages, indices): a number that fits an int.
int int_at(const json& obj, const char* key, const std::string& file, int event, const std::string& what) {
  const double v = number_at(obj, key, file, event, what);
  if (!(v >= -2147483648.0 && v < 2147483648.0) || v != std::floor(v))
    fail(file, event, what + ": \"" + key + "\" is not an integer in range");
  return static_cast<int>(v);
}

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

// Rounds a fitted time to whole nanoseconds (the trace's resolution): digits beyond it are
// noise, and round numbers keep the written cost file readable.
double to_ns_ms(double ms) { return std::round(ms * 1e6) / 1e6; }

std::string three_places(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

std::string_view key_of(ComputeKind kind) {
  for (const auto& k : compute_keys())
    if (k.kind == kind) return k.key;
  return "";
}

StageValue* compute_field(CostModel& c, ComputeKind kind) {
  switch (kind) {
    case ComputeKind::Forward: return &c.fwd;
    case ComputeKind::Backward: return &c.bwd;
    case ComputeKind::BackwardInput: return &c.bwd_input;
    case ComputeKind::BackwardWeight: return &c.bwd_weight;
    case ComputeKind::TowerForward: return &c.tower_fwd;
    case ComputeKind::TowerBackward: return &c.tower_bwd;
    case ComputeKind::TowerGradBackward: return &c.tower_grad_bwd;
    case ComputeKind::DataLoad: return &c.data_load;
    case ComputeKind::Fsdp: return &c.fsdp;
    case ComputeKind::Swap: return &c.swap;
    case ComputeKind::None: break;
  }
  return nullptr;
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

// The fit itself, over a parsed document; `current` tracks the event being read.
Calibration fit(const json& root, const std::string& file, const CalibrateOptions& options, int& current);

}  // namespace

Calibration calibrate_trace(std::string_view text, const std::string& file, const CalibrateOptions& options) {
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // a syntax error, or a number out of range (1E432)
    fail(file, -1, "not JSON: " + library_message(e.what()));
  }
  if (!root.is_object() || !root.contains("traceEvents") || !root["traceEvents"].is_array())
    fail(file, -1, "not a Chrome trace: expected an object with a \"traceEvents\" array (ppsched simulate --trace, "
                   "ppsched-exec --trace)");

  int current = -1;  // the event being read, for a type error's location
  Calibration cal;
  try {
    cal = fit(root, file, options, current);
  } catch (const json::exception& e) {
    fail(file, current, "unexpected JSON type: " + library_message(e.what()));
  }
  // What calibrate fits, the cost reader must read. The slices' own numbers are checked
  // where they are read; what is left (a sum such as BWD = BWD_INPUT + BWD_WEIGHT beyond the
  // time limit) is refused here, located in the trace.
  try {
    read_cost_model(write_cost_model(cal.costs), file);
  } catch (const InputError& e) {
    fail(file, -1, "the fitted model is not a valid cost file (" +
                       (e.where().field.empty() ? std::string("?") : e.where().field) + "): " + e.message());
  }
  return cal;
}

namespace {

// otherData.cpu_binding of a measured trace (exec/measured_trace.hpp): where each rank ran. The
// model gives every rank a processor of its own; when ranks of one host had fewer CPUs than
// ranks, or were left where the OS puts them, their step times hold waits for a core.
void note_shared_cores(const json& b, const std::string& file, std::vector<std::string>& notes) {
  if (!b.is_object() || !b.contains("ranks") || !b["ranks"].is_array())
    fail(file, -1, "otherData.cpu_binding: expected an object with a \"ranks\" array");
  struct Host {
    size_t ranks = 0;
    std::set<int64_t> cpus;  // their union
    size_t total = 0;        // the sum of their sizes: above the union's, two ranks could meet on a core
  };
  std::map<std::string, Host> hosts;
  const json& ranks = b["ranks"];
  for (size_t r = 0; r < ranks.size(); ++r) {
    const json& e = ranks[r];
    const std::string where = "otherData.cpu_binding.ranks[" + std::to_string(r) + "]";
    if (!e.is_object() || !e.contains("cpus") || !e["cpus"].is_array())
      fail(file, -1, where + ": expected {\"host\", \"cpus\": [CPU numbers], \"bound\"}");
    Host& h = hosts[e.contains("host") && e["host"].is_string() ? e["host"].get<std::string>() : std::string()];
    ++h.ranks;
    std::set<int64_t> mine;
    for (const json& c : e["cpus"]) {
      if (!c.is_number_integer() || c.get<int64_t>() < 0) fail(file, -1, where + ".cpus: expected CPU numbers (integers >= 0)");
      mine.insert(c.get<int64_t>());
    }
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

Calibration fit(const json& root, const std::string& file, const CalibrateOptions& options, int& current) {
  Calibration cal;
  const json other = root.contains("otherData") ? root["otherData"] : json::object();
  if (other.is_object()) {
    if (other.contains("schedule") && other["schedule"].is_string()) cal.schedule = other["schedule"].get<std::string>();
    if (other.contains("label") && other["label"].is_string()) cal.label = other["label"].get<std::string>();
    if (other.contains("ranks") && other["ranks"].is_number_integer()) cal.ranks = other["ranks"].get<int>();
    if (other.contains("stages") && other["stages"].is_number_integer()) cal.stages = other["stages"].get<int>();
    if (other.contains("micro_batches") && other["micro_batches"].is_number_integer())
      cal.micro_batches = other["micro_batches"].get<int>();
    if (other.contains("mode")) {
      // The runtime mode the run had (traces/chrome_trace.hpp TraceOptions::mode).
      const json& m = other["mode"];
      auto flag = [&](const char* key) {
        if (!m.contains(key)) return false;
        if (!m[key].is_boolean()) fail(file, -1, std::string("otherData.mode.") + key + ": expected true or false");
        return m[key].get<bool>();
      };
      if (!m.is_object()) fail(file, -1, "otherData.mode: expected an object");
      CheckOptions mode;
      if (m.contains("comm")) {
        if (m["comm"] == "eager") mode.comm = CommMode::Eager;
        else if (m["comm"] != "rendezvous") fail(file, -1, "otherData.mode.comm: expected \"rendezvous\" or \"eager\"");
      }
      mode.overlap_p2p = flag("overlap_p2p");
      mode.mpipe_batched_recv = flag("mpipe_batched_recv");
      mode.dyn_shape = flag("dyn_shape");
      cal.mode = mode;
      if (m.contains("note") && m["note"].is_string()) cal.notes.push_back("the run's mode: " + m["note"].get<std::string>());
    }
  }
  if (other.is_object() && other.contains("cpu_binding")) note_shared_cores(other["cpu_binding"], file, cal.notes);
  if (options.stages > 0) cal.stages = options.stages;
  if (cal.stages > (1 << 20)) fail(file, -1, "otherData.stages is " + std::to_string(cal.stages) + ", beyond 2^20");
  if (cal.stages <= 0)
    fail(file, -1, "the trace does not say how many stages the schedule has (otherData.stages); give --stages");

  // ---- read the events ----------------------------------------------------------------
  std::map<std::pair<int, int>, LaneKind> lanes;  // (pid, tid) -> lane, from thread_name
  std::vector<Slice> slices;
  std::map<int64_t, FlowEnd> flow_start, flow_finish;
  const json& events = root["traceEvents"];
  for (size_t i = 0; i < events.size(); ++i) {
    const int ev = static_cast<int>(i);
    current = ev;
    const json& e = events[i];
    if (!e.is_object()) fail(file, ev, "an event is not an object");
    const std::string ph = e.value("ph", "");
    if (ph == "M") {
      if (e.value("name", "") == "thread_name" && e.contains("args") && e["args"].is_object() &&
          e["args"].contains("name") && e["args"]["name"].is_string())
        lanes[{int_at(e, "pid", file, ev, "thread_name metadata"),
               int_at(e, "tid", file, ev, "thread_name metadata")}] =
            lane_of_thread(e["args"]["name"].get<std::string>());
      continue;
    }
    if (ph == "X") {
      const std::string name = e.value("name", "?");
      const std::string what = "slice '" + name + "'";
      Slice s;
      s.event = ev;
      s.pid = int_at(e, "pid", file, ev, what);
      s.tid = int_at(e, "tid", file, ev, what);
      s.ts = number_at(e, "ts", file, ev, what);
      s.dur = number_at(e, "dur", file, ev, what);
      if (s.dur < 0) fail(file, ev, what + " has a negative duration");
      if (!e.contains("args") || !e["args"].is_object())
        fail(file, ev, what + " has no args: calibration needs each slice's op, stage, micro, step_index and bytes "
                              "(as ppsched simulate --trace and ppsched-exec --trace write them)");
      const json& a = e["args"];
      auto op_it = a.find("op");
      if (op_it == a.end() || !op_it->is_string())
        fail(file, ev, what + " has no args.op: calibration needs the step type of every slice (this trace was "
                              "not written by ppsched simulate --trace or ppsched-exec --trace, or by an older version)");
      auto op = op_from_name(op_it->get<std::string>());
      if (!op) fail(file, ev, what + ": unknown op '" + op_it->get<std::string>() + "' in args.op");
      s.op = *op;
      const std::string where = what + " args";
      s.stage = int_at(a, "stage", file, ev, where);
      s.micro = int_at(a, "micro", file, ev, where);
      s.step_index = int_at(a, "step_index", file, ev, where);
      s.bytes = number_at(a, "bytes", file, ev, where);
      // The cost file's limits (README "Limits"), checked where the number is, so that the
      // fitted model never needs refusing as a whole.
      if (!(s.bytes >= 0 && s.bytes <= kMaxBytes))
        fail(file, ev, where + ": bytes " + a["bytes"].dump() + " is outside 0 to " +
                           std::to_string(static_cast<int64_t>(kMaxBytes)) + " bytes (1 TiB)");
      if (s.dur / 1e3 > kMaxTimeMs)
        fail(file, ev, what + ": dur " + e["dur"].dump() + " us is over the limit of 1e9 ms (11.6 days)");
      if (a.contains("sub")) s.sub = int_at(a, "sub", file, ev, where);
      if (a.contains("meta") && a["meta"].is_boolean()) s.meta = a["meta"].get<bool>();
      if (s.stage >= cal.stages)
        fail(file, ev, what + ": stage " + std::to_string(s.stage) + " but the trace has " + std::to_string(cal.stages) +
                           " stages");
      slices.push_back(s);
      continue;
    }
    if (ph == "s" || ph == "f") {
      if (e.value("cat", "") != "p2p") continue;
      FlowEnd f;
      f.event = ev;
      const std::string what = std::string("flow ") + (ph == "s" ? "start" : "end");
      f.pid = int_at(e, "pid", file, ev, what);
      f.tid = int_at(e, "tid", file, ev, what);
      f.ts = number_at(e, "ts", file, ev, what);
      const int64_t id = int_at(e, "id", file, ev, what);
      auto& dst = ph == "s" ? flow_start : flow_finish;
      if (!dst.emplace(id, f).second) fail(file, ev, what + " repeats flow id " + std::to_string(id));
    }
  }
  current = -1;
  if (slices.empty()) fail(file, -1, "the trace has no slices (X events): nothing to calibrate");
  for (auto& s : slices) {
    auto it = lanes.find({s.pid, s.tid});
    if (it == lanes.end() || it->second == LaneKind::Unknown)
      fail(file, s.event, "slice on pid " + std::to_string(s.pid) + " tid " + std::to_string(s.tid) +
                              ": no thread_name metadata naming its lane (compute, send, recv, collective)");
    s.lane = it->second;
  }
  cal.slices = static_cast<int>(slices.size());
  int max_pid = 0;
  for (const auto& s : slices) max_pid = std::max(max_pid, s.pid);
  if (cal.ranks <= 0) cal.ranks = max_pid + 1;

  double first = slices[0].ts, last = slices[0].end();
  for (const auto& s : slices) first = std::min(first, s.ts), last = std::max(last, s.end());
  cal.measured_makespan_ms = (last - first) / 1e3;

  // ---- flows: bind each end to the one slice of its thread that contains it --------------
  std::map<std::pair<int, int>, std::vector<int>> by_thread;
  for (size_t i = 0; i < slices.size(); ++i) by_thread[{slices[i].pid, slices[i].tid}].push_back(static_cast<int>(i));
  for (auto& [k, v] : by_thread)
    std::sort(v.begin(), v.end(), [&](int a, int b) { return slices[static_cast<size_t>(a)].ts < slices[static_cast<size_t>(b)].ts; });
  auto bind = [&](const FlowEnd& f) {
    auto it = by_thread.find({f.pid, f.tid});
    if (it != by_thread.end()) {
      const auto& v = it->second;
      // the last slice starting at or before f.ts (slices of one thread never overlap)
      auto pos = std::upper_bound(v.begin(), v.end(), f.ts,
                                  [&](double t, int idx) { return t < slices[static_cast<size_t>(idx)].ts; });
      if (pos != v.begin()) {
        const Slice& s = slices[static_cast<size_t>(*(pos - 1))];
        if (f.ts <= s.end()) return *(pos - 1);
      }
    }
    fail(file, f.event, "flow end at pid " + std::to_string(f.pid) + " tid " + std::to_string(f.tid) + " ts " +
                            std::to_string(f.ts) + " lies in no slice of its thread");
  };
  std::vector<std::pair<int, int>> pairs;  // (send slice, recv slice)
  for (const auto& [id, s] : flow_start) {
    auto f = flow_finish.find(id);
    if (f == flow_finish.end()) fail(file, s.event, "flow " + std::to_string(id) + " has a start but no end");
    pairs.push_back({bind(s), bind(f->second)});
  }
  for (const auto& [id, f] : flow_finish)
    if (!flow_start.count(id)) fail(file, f.event, "flow " + std::to_string(id) + " has an end but no start");
  for (const auto& [a, b] : pairs) ++slices[static_cast<size_t>(a)].flows, ++slices[static_cast<size_t>(b)].flows;
  cal.flows = static_cast<int>(pairs.size());

  // ---- compute ---------------------------------------------------------------------------
  CostModel& c = cal.costs;
  c = CostModel{};
  // The protocol: what the options say, else a Gloo run's (measured in the executor's traces),
  // else the cost model's defaults (a GPU's).
  const bool gloo = cal.label == "measured (gloo)";
  const auto protocol = [&](const auto& option, auto& field, auto gloo_value, const char* why) {
    if (option) {
      field = *option;
    } else if (gloo) {
      field = gloo_value;
      cal.notes.push_back(why);
    }
  };
  protocol(options.eager_threshold_bytes, c.eager_threshold_bytes, 0.0,
           "a Gloo run: its sends wait for the receiver, so the fitted model has eager threshold 0");
  protocol(options.compute_blocks_host, c.compute_blocks_host, true,
           "a Gloo run computes on the CPU that posts the communication, so the fitted model has "
           "compute_blocks_host: true (nothing is posted while a compute runs)");
  protocol(options.background_progress, c.background_progress, false,
           "a Gloo run's receiver reads a payload in on its transport thread, which gets a core only "
           "while the rank waits, so the fitted model has background_progress: false");
  const bool fit_handoff = options.send_handoff.value_or(gloo);
  c.source = "calibrated from " + (file.empty() ? std::string("a trace") : file);
  std::map<ComputeKind, std::map<int, std::vector<double>>> samples;
  int composites = 0, sub_slices = 0;
  for (const auto& s : slices) {
    if (s.lane != LaneKind::Compute) continue;
    if (is_composite(s.op)) {
      ++composites;
      continue;
    }
    const ComputeKind kind = info(s.op).compute;
    if (kind == ComputeKind::None) continue;
    if (s.sub >= 0) ++sub_slices;
    samples[kind][s.stage].push_back(s.dur / 1e3);
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
    StageValue* field = compute_field(c, kind);
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
    *compute_field(c, target) = v;
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
  }
  for (const auto& k : compute_keys())
    if (StageValue* f = compute_field(c, k.kind); f && !f->given) *f = StageValue::scalar(0);

  // ---- bytes -----------------------------------------------------------------------------
  std::map<Payload, std::map<int, std::vector<double>>> payloads;
  std::vector<double> metas, tower_params, tied_params;
  for (const auto& s : slices) {
    if (s.lane == LaneKind::Collective) {
      if (info(s.op).collective_bytes == CollectiveBytes::TowerParams) tower_params.push_back(s.bytes);
      if (info(s.op).collective_bytes == CollectiveBytes::TiedParams) tied_params.push_back(s.bytes);
      continue;
    }
    if (s.lane != LaneKind::Send && s.lane != LaneKind::Recv) continue;
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

  // ---- link: least squares over single-message transfers ---------------------------------
  // The end of the last compute slice issued before a step, per rank (a send's payload is
  // ready then at the earliest).
  std::map<int, std::vector<std::pair<int, double>>> compute_ends;  // pid -> (step_index, end), by step
  std::map<int, std::vector<std::pair<double, double>>> computes;   // pid -> (start, end), by start
  for (const auto& s : slices)
    if (s.lane == LaneKind::Compute) {
      compute_ends[s.pid].push_back({s.step_index, s.end()});
      computes[s.pid].push_back({s.ts, s.end()});
    }
  for (auto& [pid, v] : computes) std::sort(v.begin(), v.end());
  for (auto& [pid, v] : compute_ends) {
    std::sort(v.begin(), v.end());
    for (size_t k = 1; k < v.size(); ++k) v[k].second = std::max(v[k].second, v[k - 1].second);
  }
  auto ready_at = [&](int pid, int step) {
    auto it = compute_ends.find(pid);
    if (it == compute_ends.end()) return -1e300;
    const auto& v = it->second;
    auto pos = std::lower_bound(v.begin(), v.end(), std::make_pair(step, -1e300));
    return pos == v.begin() ? -1e300 : (pos - 1)->second;
  };
  // Where compute blocks the host (a Gloo run), a receive posted early and waited later
  // (--overlap-p2p, a batched MPipe receive) ends when its wait returned, which may be long
  // after the payload arrived: the rank computed meanwhile. Such a receive times no transfer.
  // (A simulated trace ends every receive at the arrival.)
  // The end of the last compute of r's rank inside r (-1e300: none).
  auto last_compute_in = [&](const Slice& r) {
    double last = -1e300;
    auto it = computes.find(r.pid);
    if (it == computes.end()) return last;
    for (auto pos = std::lower_bound(it->second.begin(), it->second.end(), std::make_pair(r.ts, -1e300));
         pos != it->second.end() && pos->first < r.end(); ++pos)
      if (pos->second <= r.end()) last = std::max(last, pos->second);
    return last;
  };
  auto computed_during = [&](const Slice& r) { return c.compute_blocks_host && last_compute_in(r) > -1e300; };
  // Receives posted early whose payload was ready before the receiver went to wait: (bytes,
  // ms from that wait to the receive's end), for protocol.deferred_start_ms below.
  std::vector<std::pair<double, double>> deferred;
  std::vector<double> xs, ys;
  double handoff_sum = 0;  // ms from a fitted single transfer's start to its send's return
  int singles = 0, skipped_negative = 0, skipped_deferred = 0, groups = 0;
  // A slice that several flows share (a batch's group, a batched MPipe receive) ends with the
  // last of its messages, as the simulator ends a group: it is one sample, timed from the
  // latest start of its flows (either way), of a message of the group's mean size.
  std::map<int, double> group_start;  // slice -> the latest start of its flows
  for (const auto& [a, b] : pairs) {
    const Slice& snd = slices[static_cast<size_t>(a)];
    const Slice& rcv = slices[static_cast<size_t>(b)];
    if (computed_during(rcv)) {
      ++skipped_deferred;
      const double waited = last_compute_in(rcv);
      if (rcv.flows == 1 && std::max(snd.ts, ready_at(snd.pid, snd.step_index)) < waited - 1e-3)  // 1 ns
        deferred.push_back({rcv.bytes, (rcv.end() - waited) / 1e3});
      continue;
    }
    const double start = std::max({snd.ts, rcv.ts, ready_at(snd.pid, snd.step_index)});
    for (int k : {a, b})
      if (slices[static_cast<size_t>(k)].flows > 1) {
        auto [it, fresh] = group_start.try_emplace(k, start);
        if (!fresh) it->second = std::max(it->second, start);
      }
    if (rcv.flows != 1) continue;
    const double t = (rcv.end() - start) / 1e3;
    if (t < 0) {
      ++skipped_negative;
      continue;
    }
    xs.push_back(rcv.bytes);
    ys.push_back(t);
    // A group's send slice ends with the group; a send posted early and waited after a compute
    // (--overlap-p2p waits its sends at the end) ends with that wait.
    if (snd.flows == 1 && !computed_during(snd)) {
      handoff_sum += std::max(0.0, (snd.end() - start) / 1e3);
      ++singles;
    }
  }
  for (const auto& [k, latest] : group_start) {
    const Slice& rcv = slices[static_cast<size_t>(k)];
    const double t = (rcv.end() - latest) / 1e3;
    if (t < 0) {
      ++skipped_negative;
      continue;
    }
    xs.push_back(rcv.bytes / std::max(rcv.flows, 1));
    ys.push_back(t);
    ++groups;
  }
  if (fit_handoff && singles > 0) {
    c.send_handoff_ms = to_ns_ms(handoff_sum / static_cast<double>(singles));
    cal.notes.push_back("a Gloo send returns once the transport took its payload, before the receive ends: "
                        "send_handoff_ms " + three_places(*c.send_handoff_ms) + " (the mean from the start of the " +
                        std::to_string(singles) + " fitted single transfers to their send's return)");
  }
  if (groups)
    cal.notes.push_back(std::to_string(groups) +
                        " slice(s) carry several messages (a batch's group, a batched receive): each is one sample, "
                        "from the latest start of its messages to its end, at their mean size");
  if (skipped_deferred)
    cal.notes.push_back(std::to_string(skipped_deferred) +
                        " receive(s) were waited after a compute of their rank (posted early): their end is the wait's, "
                        "not the arrival, and they were left out of the link fit");
  if (skipped_negative)
    cal.notes.push_back(std::to_string(skipped_negative) +
                        " transfer(s) ended before both ends were posted (clock skew between ranks) and were left out");
  LinkFit& lf = cal.link;
  lf.transfers = static_cast<int>(xs.size());
  for (double y : ys) lf.mean_transfer_ms += y / static_cast<double>(ys.size());
  // Pipeline-wide collectives (MPIPE_PARAM_BROADCAST, MPIPE_GRAD_REDUCE) are priced by the
  // same link with the simulator's ring formulas, so each instance is a sample too:
  // broadcast (n-1) L + B s, all-reduce 2(n-1) L + 2(n-1)/n B s (s = ms per byte). An
  // instance is the k-th such slice of every rank; it runs from the last arrival to the last
  // end. They reach payload sizes the P2P messages may not.
  std::vector<double> as(xs.size(), 1.0);
  {
    std::map<std::pair<int, int>, std::vector<const Slice*>> by_op_rank;  // (op, pid) -> slices in time order
    for (const auto& s : slices)
      if (s.lane == LaneKind::Collective && info(s.op).collective == CollectiveScope::AllPipelineRanks)
        by_op_rank[{static_cast<int>(s.op), s.pid}].push_back(&s);
    std::map<int, std::vector<std::vector<const Slice*>>> per_op;  // op -> per rank
    for (auto& [key, v] : by_op_rank) {
      std::sort(v.begin(), v.end(), [](const Slice* a, const Slice* b) { return a->ts < b->ts; });
      per_op[key.first].push_back(v);
    }
    for (const auto& [op, per_rank] : per_op) {
      if (static_cast<int>(per_rank.size()) != cal.ranks || cal.ranks < 2) continue;
      size_t count = per_rank[0].size();
      for (const auto& v : per_rank) count = std::min(count, v.size());
      const double n = static_cast<double>(cal.ranks);
      for (size_t k = 0; k < count; ++k) {
        double last_start = -1e300, last_end = -1e300;
        for (const auto& v : per_rank) last_start = std::max(last_start, v[k]->ts), last_end = std::max(last_end, v[k]->end());
        const double bytes = per_rank[0][k]->bytes;
        const bool reduce = info(static_cast<Op>(op)).collective_kind == CollectiveKind::AllReduce;
        as.push_back(reduce ? 2 * (n - 1) : n - 1);
        xs.push_back(reduce ? 2 * (n - 1) / n * bytes : bytes);
        ys.push_back((last_end - last_start) / 1e3);
        ++lf.collectives;
      }
    }
  }
  lf.sizes = static_cast<int>(std::set<double>(xs.begin(), xs.end()).size());
  double slope = 0;  // ms per byte
  if (xs.empty()) {
    lf.note = "no usable P2P transfers: latency 0, infinite bandwidth";
  } else {
    // Least squares for y = L a + s x with L >= 0, s >= 0.
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
  }
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
  // background_progress false starts such a transfer once its receiver waits; what it took
  // beyond a transfer time is the sender's transport thread getting a core.
  if (!c.background_progress && !deferred.empty()) {
    double extra = 0;
    for (const auto& [bytes, ms] : deferred) extra += std::max(0.0, ms - link.transfer_ms(bytes));
    c.deferred_start_ms = to_ns_ms(extra / static_cast<double>(deferred.size()));
    cal.notes.push_back(std::to_string(deferred.size()) + " receive(s) posted early were ready before their rank "
                        "went to wait: they took deferred_start_ms " + three_places(c.deferred_start_ms) +
                        " beyond a transfer time on average from that wait (the sender's thread getting a core)");
  }
  c.intra_node = c.inter_node = link;
  c.pairs.clear();
  return cal;
}

}  // namespace
}  // namespace ppsched
