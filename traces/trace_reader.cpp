// Reading a Chrome trace back into a RunRecord (see trace_reader.hpp for the layout read).
#include "traces/trace_reader.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "schedule/errors.hpp"
#include "schedule/validate.hpp"
#include "results/recorder.hpp"

namespace ppsched {
namespace {

using json = nlohmann::json;

constexpr int kMaxTraceStages = 1 << 20;

[[noreturn]] void fail(const std::string& file, int event, const std::string& msg) {
  Location where = in_file(file);
  if (event >= 0) where.field = "traceEvents[" + std::to_string(event) + "]";
  throw InputError(where, msg);
}

std::optional<Lane> lane_of_thread(const std::string& name) {
  const std::string word = name.substr(0, name.find(' '));
  if (word == "compute") return Lane::Compute;
  if (word == "send") return Lane::Send;
  if (word == "recv") return Lane::Recv;
  if (word == "collective") return Lane::Collective;
  if (word == "comm") return Lane::Comm;
  return std::nullopt;
}

// A required number of an event; `what` names it in the error.
double number_at(const json& obj, const char* key, const std::string& file, int event, const std::string& what) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) fail(file, event, what + " has no numeric \"" + key + "\"");
  return it->get<double>();
}

// A required integer field (ranks, threads, stages, indices): a number that fits an int.
int int_at(const json& obj, const char* key, const std::string& file, int event, const std::string& what) {
  const double v = number_at(obj, key, file, event, what);
  if (!(v >= -2147483648.0 && v < 2147483648.0) || v != std::floor(v))
    fail(file, event, what + ": \"" + key + "\" is not an integer in range");
  return static_cast<int>(v);
}

// ---- otherData -> provenance ---------------------------------------------------------------
// Fields a trace may lack stay at their defaults; a field that is there but malformed is
// refused, named.

// An optional field: kept at its default when absent or of another type (a trace from an
// older writer lacks it).
void read_optional(const json& obj, const char* key, std::string& into) {
  if (obj.contains(key) && obj[key].is_string()) into = obj[key].get<std::string>();
}
void read_optional(const json& obj, const char* key, bool& into) {
  if (obj.contains(key) && obj[key].is_boolean()) into = obj[key].get<bool>();
}

// A CPU number or a global rank: an integer from 0 to 2^30.
int small_index(const json& v, const std::string& file, const std::string& expected) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (int64_t{1} << 30)) fail(file, -1, expected);
  return static_cast<int>(v.get<int64_t>());
}

// Where the run came from: otherData.source and .transport, or (an older trace) its label.
void read_source(const json& other, const std::string& file, RunProvenance& p) {
  std::string source, transport;
  read_optional(other, "source", source);
  read_optional(other, "transport", transport);
  if (!source.empty() || !transport.empty()) {
    if (source == "measured") p.source = RunSource::Measured;
    else if (source != "simulated" && !source.empty()) fail(file, -1, "otherData.source: expected \"simulated\" or \"measured\"");
    const auto t = transport_from_name(transport);
    if (!t) fail(file, -1, "otherData.transport: expected \"gloo\" or \"nccl\"");
    p.transport = *t;
  } else if (p.label.rfind("measured", 0) == 0) {
    p.source = RunSource::Measured;
    if (p.label == "measured (gloo)") p.transport = RunTransport::Gloo;
    if (p.label == "measured (nccl)") p.transport = RunTransport::Nccl;
  }
}

// otherData.mode; needs p.transport read first (the default P2P backend follows it).
void read_mode(const json& m, const std::string& file, RunProvenance& p) {
  if (!m.is_object()) fail(file, -1, "otherData.mode: expected an object");
  auto flag = [&](const char* key) {
    if (!m.contains(key)) return false;
    if (!m[key].is_boolean()) fail(file, -1, std::string("otherData.mode.") + key + ": expected true or false");
    return m[key].get<bool>();
  };
  CheckOptions mode;
  if (m.contains("comm")) {
    if (m["comm"] == "eager") mode.comm = CommMode::Eager;
    else if (m["comm"] != "rendezvous") fail(file, -1, "otherData.mode.comm: expected \"rendezvous\" or \"eager\"");
  }
  mode.overlap_p2p = flag("overlap_p2p");
  mode.mpipe_batched_recv = flag("mpipe_batched_recv");
  mode.dyn_shape = flag("dyn_shape");
  // What carried the run's posted operations; a trace written before it was recorded: its
  // transport's (a Gloo run's were Gloo's).
  if (m.contains("p2p_backend")) {
    if (m["p2p_backend"] == "gloo") mode.backend = P2PBackend::Gloo;
    else if (m["p2p_backend"] != "nccl") fail(file, -1, "otherData.mode.p2p_backend: expected \"nccl\" or \"gloo\"");
  } else if (p.transport == RunTransport::Gloo) {
    mode.backend = P2PBackend::Gloo;
  }
  p.mode = mode;
  read_optional(m, "note", p.mode_note);
}

void read_cpu_binding(const json& b, const std::string& file, RunProvenance& p) {
  if (!b.is_object() || !b.contains("ranks") || !b["ranks"].is_array())
    fail(file, -1, "otherData.cpu_binding: expected an object with a \"ranks\" array");
  read_optional(b, "mode", p.cpu_bind);
  const json& ranks = b["ranks"];
  for (size_t r = 0; r < ranks.size(); ++r) {
    const json& e = ranks[r];
    const std::string where = "otherData.cpu_binding.ranks[" + std::to_string(r) + "]";
    if (!e.is_object() || !e.contains("cpus") || !e["cpus"].is_array())
      fail(file, -1, where + ": expected {\"host\", \"cpus\": [CPU numbers], \"bound\"}");
    RankPlacement pl;
    read_optional(e, "host", pl.host);
    read_optional(e, "bound", pl.bound);
    for (const json& c : e["cpus"]) pl.cpus.push_back(small_index(c, file, where + ".cpus: expected CPU numbers (integers >= 0)"));
    p.placement.push_back(std::move(pl));
  }
}

RunMesh read_mesh(const json& m, const std::string& file) {
  auto dim = [&](size_t k) {
    return m.is_object() && m.contains("shape") && m["shape"].is_array() && m["shape"].size() == 2 &&
                   m["shape"][k].is_number_integer()
               ? m["shape"][k].get<int64_t>()
               : int64_t{-1};
  };
  if (dim(0) < 1 || dim(1) < 1 || dim(0) > kMaxTraceStages || dim(1) > kMaxTraceStages)
    fail(file, -1, "otherData.mesh: expected {\"shape\": [dp, pp], \"order\", \"replica\", \"global_ranks\"}");
  RunMesh mesh;
  mesh.dp = static_cast<int>(dim(0));
  mesh.pp = static_cast<int>(dim(1));
  read_optional(m, "order", mesh.order);
  if (m.contains("replica") && m["replica"].is_number_integer())
    mesh.replica = static_cast<int>(std::clamp<int64_t>(m["replica"].get<int64_t>(), 0, kMaxTraceStages));
  if (m.contains("global_ranks") && m["global_ranks"].is_array())
    for (const json& g : m["global_ranks"])
      mesh.global_ranks.push_back(small_index(g, file, "otherData.mesh.global_ranks: expected ranks (integers >= 0)"));
  return mesh;
}

// The "stage" of a per-stage entry of otherData (its shape checked by the caller).
int stage_of(const json& e, const std::string& where, int stages, const std::string& file) {
  const int64_t st = e["stage"].get<int64_t>();
  if (st < 0 || st >= std::max(stages, 1))
    fail(file, -1, where + ".stage: " + std::to_string(st) + " is not a stage of the trace's " + std::to_string(stages));
  return static_cast<int>(st);
}

// otherData.layers; needs p.stages read first.
void read_layers(const json& l, const std::string& file, RunProvenance& p) {
  if (!l.is_array()) fail(file, -1, "otherData.layers: expected [{\"stage\": s, \"layers\": [names]}, ...]");
  for (size_t k = 0; k < l.size(); ++k) {
    const std::string where = "otherData.layers[" + std::to_string(k) + "]";
    const json& e = l[k];
    if (!e.is_object() || !e.contains("stage") || !e["stage"].is_number_integer() || !e.contains("layers") ||
        !e["layers"].is_array())
      fail(file, -1, where + ": expected {\"stage\": s, \"layers\": [names]}");
    StageLayers sl;
    sl.stage = stage_of(e, where, p.stages, file);
    for (const json& n : e["layers"]) {
      if (!n.is_string()) fail(file, -1, where + ".layers: expected layer names (strings)");
      sl.layers.push_back(n.get<std::string>());
    }
    p.layers.push_back(std::move(sl));
  }
}

// otherData.split_backward; needs p.stages read first.
void read_split_backward(const json& l, const std::string& file, RunProvenance& p) {
  const std::string shape = "expected [{\"stage\": s, \"bwd_ms\": t, \"bwd_input_ms\": t, \"bwd_weight_ms\": t}, ...]";
  if (!l.is_array()) fail(file, -1, "otherData.split_backward: " + shape);
  for (size_t k = 0; k < l.size(); ++k) {
    const std::string where = "otherData.split_backward[" + std::to_string(k) + "]";
    const json& e = l[k];
    if (!e.is_object() || !e.contains("stage") || !e["stage"].is_number_integer()) fail(file, -1, where + ": " + shape);
    SplitBackwardProbe b;
    b.stage = stage_of(e, where, p.stages, file);
    for (auto [key, field] : {std::pair{"bwd_ms", &SplitBackwardProbe::bwd_ms},
                              std::pair{"bwd_input_ms", &SplitBackwardProbe::bwd_input_ms},
                              std::pair{"bwd_weight_ms", &SplitBackwardProbe::bwd_weight_ms}}) {
      if (!e.contains(key) || !e[key].is_number() || !std::isfinite(e[key].get<double>()) || e[key].get<double>() < 0 ||
          e[key].get<double>() > 1e9)
        fail(file, -1, where + "." + key + ": expected a time in ms from 0 to 1e9");
      b.*field = e[key].get<double>();
    }
    p.split_backward.push_back(b);
  }
}

RunProvenance read_provenance(const json& root, const std::string& file) {
  RunProvenance p;
  const json other = root.contains("otherData") ? root["otherData"] : json::object();
  if (!other.is_object()) return p;
  auto count = [&](const char* key) {
    return other.contains(key) && other[key].is_number_integer() ? other[key].get<int64_t>() : int64_t{0};
  };
  read_optional(other, "schedule", p.schedule);
  read_optional(other, "label", p.label);
  const int64_t stages = count("stages");
  if (stages > kMaxTraceStages) fail(file, -1, "otherData.stages is " + std::to_string(stages) + ", beyond 2^20");
  p.stages = static_cast<int>(std::max<int64_t>(0, stages));
  p.ranks = static_cast<int>(std::clamp<int64_t>(count("ranks"), 0, kMaxTraceStages));
  p.micro_batches = static_cast<int>(std::clamp<int64_t>(count("micro_batches"), 0, int64_t{1} << 30));
  read_source(other, file, p);
  if (other.contains("mode")) read_mode(other["mode"], file, p);
  read_optional(other, "shared_clock", p.shared_clock);
  if (other.contains("cpu_binding")) read_cpu_binding(other["cpu_binding"], file, p);
  if (other.contains("mesh")) p.mesh = read_mesh(other["mesh"], file);
  if (other.contains("layers")) read_layers(other["layers"], file, p);
  if (other.contains("split_backward")) read_split_backward(other["split_backward"], file, p);
  if (other.contains("notes") && other["notes"].is_array())
    for (const json& n : other["notes"])
      if (n.is_string()) p.notes.push_back(n.get<std::string>());
  return p;
}

struct RawSlice {
  TimedSlice slice;  // in ms
  SliceStep step;
  int tid = -1;
  double ts = 0, end = 0;  // us, as written (flow ends are bound in the file's own unit)
};

struct FlowEnd {
  int event = -1;
  int pid = -1, tid = -1;
  double ts = 0;
};

// The events as read, before lanes and flows are resolved.
struct TraceEvents {
  std::map<std::pair<int, int>, std::optional<Lane>> lanes;  // (pid, tid) -> lane, from thread_name
  std::vector<RawSlice> slices;
  std::map<int64_t, FlowEnd> flow_start, flow_finish;
};

void read_thread_name(const json& e, const std::string& file, int ev, TraceEvents& out) {
  if (e.value("name", "") == "thread_name" && e.contains("args") && e["args"].is_object() &&
      e["args"].contains("name") && e["args"]["name"].is_string())
    out.lanes[{int_at(e, "pid", file, ev, "thread_name metadata"), int_at(e, "tid", file, ev, "thread_name metadata")}] =
        lane_of_thread(e["args"]["name"].get<std::string>());
}

// An X event: its place (pid, tid, ts, dur) and the args a record needs.
RawSlice read_slice(const json& e, const std::string& file, int ev) {
  const std::string name = e.value("name", "?");
  const std::string what = "slice '" + name + "'";
  RawSlice s;
  s.step.event = ev;
  s.slice.rank = int_at(e, "pid", file, ev, what);
  s.tid = int_at(e, "tid", file, ev, what);
  s.ts = number_at(e, "ts", file, ev, what);
  const double dur = number_at(e, "dur", file, ev, what);
  if (dur < 0) fail(file, ev, what + " has a negative duration");
  s.end = s.ts + dur;
  s.slice.start_ms = s.ts / 1e3;
  s.slice.end_ms = s.end / 1e3;
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
  s.step.op = *op;
  const std::string where = what + " args";
  const int stage = int_at(a, "stage", file, ev, where);
  if (stage < kNone || stage >= kMaxStages)
    fail(file, ev, where + ": \"stage\" " + std::to_string(stage) + " is not a stage (-1 to " +
                       std::to_string(kMaxStages - 1) + ")");
  s.step.stage = static_cast<int16_t>(stage);
  s.step.micro = int_at(a, "micro", file, ev, where);
  s.slice.step_index = int_at(a, "step_index", file, ev, where);
  s.slice.bytes = number_at(a, "bytes", file, ev, where);
  if (a.contains("sub")) s.slice.sub = int_at(a, "sub", file, ev, where);
  // A communication-stream slice's phase (an MoE layer's all-to-all).
  if (a.contains("phase")) s.slice.phase = static_cast<int16_t>(std::clamp(int_at(a, "phase", file, ev, where), -1, 255));
  if (a.contains("layer")) s.slice.layer = int_at(a, "layer", file, ev, where);
  if (a.contains("meta") && a["meta"].is_boolean()) s.slice.meta = a["meta"].get<bool>();
  if (s.slice.rank < 0) fail(file, ev, what + ": pid " + std::to_string(s.slice.rank) + " is not a rank");
  return s;
}

// An "s" (start) or "f" (end) event of a P2P flow; other flows are not the record's.
void read_flow_end(const json& e, const std::string& ph, const std::string& file, int ev, TraceEvents& out) {
  if (e.value("cat", "") != "p2p") return;
  FlowEnd f;
  f.event = ev;
  const std::string what = std::string("flow ") + (ph == "s" ? "start" : "end");
  f.pid = int_at(e, "pid", file, ev, what);
  f.tid = int_at(e, "tid", file, ev, what);
  f.ts = number_at(e, "ts", file, ev, what);
  const int64_t id = int_at(e, "id", file, ev, what);
  auto& dst = ph == "s" ? out.flow_start : out.flow_finish;
  if (!dst.emplace(id, f).second) fail(file, ev, what + " repeats flow id " + std::to_string(id));
}

// `current` follows the event being read, so that a JSON type error names it.
TraceEvents read_events(const json& events, const std::string& file, int& current) {
  TraceEvents out;
  for (size_t i = 0; i < events.size(); ++i) {
    const int ev = static_cast<int>(i);
    current = ev;
    const json& e = events[i];
    if (!e.is_object()) fail(file, ev, "an event is not an object");
    const std::string ph = e.value("ph", "");
    if (ph == "M") read_thread_name(e, file, ev, out);
    else if (ph == "X") out.slices.push_back(read_slice(e, file, ev));
    else if (ph == "s" || ph == "f") read_flow_end(e, ph, file, ev, out);
  }
  current = -1;
  return out;
}

// The record has a summary per rank: as many as the trace says, or its highest pid + 1,
// which the file itself must justify (one slice per rank at least), so that a small file
// cannot ask for a large table.
int rank_count(const std::vector<RawSlice>& slices, int trace_ranks, const std::string& file) {
  int max_pid = 0;
  for (const auto& s : slices) max_pid = std::max(max_pid, s.slice.rank);
  const size_t allowed = std::max(static_cast<size_t>(trace_ranks), slices.size());
  if (static_cast<size_t>(max_pid) >= allowed)
    fail(file, -1, "a slice's pid is " + std::to_string(max_pid) + " but the trace has " + std::to_string(allowed) +
                       " ranks (otherData.ranks) and " + std::to_string(slices.size()) + " slices");
  return std::max(trace_ranks, max_pid + 1);
}

void assign_lanes(TraceEvents& t, const std::string& file) {
  for (auto& s : t.slices) {
    auto it = t.lanes.find({s.slice.rank, s.tid});
    if (it == t.lanes.end() || !it->second)
      fail(file, s.step.event, "slice on pid " + std::to_string(s.slice.rank) + " tid " + std::to_string(s.tid) +
                                   ": no thread_name metadata naming its lane (compute, send, recv, collective, comm stream)");
    s.slice.lane = *it->second;
  }
}

// A flow's two ends bound to their slices (indices into the slices), with their times in us.
struct BoundFlow {
  int send, recv;
  double leave_us, arrive_us;
};

// Binds each flow end to the one slice of its thread that contains it.
std::vector<BoundFlow> bind_flows(const TraceEvents& t, const std::string& file) {
  const std::vector<RawSlice>& slices = t.slices;
  std::map<std::pair<int, int>, std::vector<int>> by_thread;
  for (size_t i = 0; i < slices.size(); ++i) by_thread[{slices[i].slice.rank, slices[i].tid}].push_back(static_cast<int>(i));
  for (auto& [k, v] : by_thread)
    std::sort(v.begin(), v.end(), [&](int a, int b) { return slices[static_cast<size_t>(a)].ts < slices[static_cast<size_t>(b)].ts; });
  auto bind = [&](const FlowEnd& f) {
    auto it = by_thread.find({f.pid, f.tid});
    if (it != by_thread.end()) {
      const auto& v = it->second;
      // the last slice starting at or before f.ts (slices of one thread never overlap)
      auto pos = std::upper_bound(v.begin(), v.end(), f.ts,
                                  [&](double ts, int idx) { return ts < slices[static_cast<size_t>(idx)].ts; });
      if (pos != v.begin()) {
        const RawSlice& s = slices[static_cast<size_t>(*(pos - 1))];
        if (f.ts <= s.end) return *(pos - 1);
      }
    }
    fail(file, f.event, "flow end at pid " + std::to_string(f.pid) + " tid " + std::to_string(f.tid) + " ts " +
                            std::to_string(f.ts) + " lies in no slice of its thread");
  };
  std::vector<BoundFlow> flows;
  for (const auto& [id, s] : t.flow_start) {
    auto f = t.flow_finish.find(id);
    if (f == t.flow_finish.end()) fail(file, s.event, "flow " + std::to_string(id) + " has a start but no end");
    flows.push_back({bind(s), bind(f->second), s.ts, f->second.ts});
  }
  for (const auto& [id, f] : t.flow_finish)
    if (!t.flow_start.count(id)) fail(file, f.event, "flow " + std::to_string(id) + " has an end but no start");
  return flows;
}

// The record as a measured run's would be recorded: slices in file order, then the flows.
ReadTrace recorded(RunProvenance provenance, int ranks, const std::vector<RawSlice>& slices,
                   const std::vector<BoundFlow>& flows, bool completed) {
  RunRecorder rec(std::move(provenance), ranks);
  ReadTrace out;
  out.steps.reserve(slices.size());
  rec.reserve_slices(slices.size());
  for (const auto& s : slices) {
    rec.slice(s.slice);
    out.steps.push_back(s.step);
  }
  out.flows_of_slice.assign(slices.size(), 0);
  for (const auto& b : flows) {
    rec.flow(b.send, b.recv, b.leave_us / 1e3, b.arrive_us / 1e3);
    ++out.flows_of_slice[static_cast<size_t>(b.send)];
    ++out.flows_of_slice[static_cast<size_t>(b.recv)];
  }
  // A batch's group slice carries several messages: each gets an equal share of its bytes.
  for (const auto& b : flows) {
    const TimedSlice& rcv = rec.slice_at(b.recv);
    rec.link(rec.slice_at(b.send).rank, rcv.rank, rcv.bytes / std::max(1, out.flows_of_slice[static_cast<size_t>(b.recv)]));
  }
  rec.header().completed = completed;
  out.record = rec.finish();
  return out;
}

ReadTrace read_document(const json& root, const std::string& file, int& current) {
  RunProvenance provenance = read_provenance(root, file);
  TraceEvents events = read_events(root["traceEvents"], file, current);
  if (events.slices.empty()) fail(file, -1, "the trace has no slices (X events): nothing to calibrate");
  const int ranks = rank_count(events.slices, provenance.ranks, file);
  assign_lanes(events, file);
  const std::vector<BoundFlow> flows = bind_flows(events, file);
  const bool completed = root.contains("otherData") && root["otherData"].is_object() &&
                                 root["otherData"].contains("completed") && root["otherData"]["completed"].is_boolean()
                             ? root["otherData"]["completed"].get<bool>()
                             : true;
  return recorded(std::move(provenance), ranks, events.slices, flows, completed);
}

}  // namespace

ReadTrace read_chrome_trace(std::string_view text, const std::string& file) {
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
  try {
    return read_document(root, file, current);
  } catch (const json::exception& e) {
    fail(file, current, "unexpected JSON type: " + library_message(e.what()));
  }
}

}  // namespace ppsched
