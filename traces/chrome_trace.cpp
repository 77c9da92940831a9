// Chrome Trace Event Format writer (reference simulators_and_verification.md §4).
//
// Written by hand into one string buffer: a 10^6-step simulation produces a few hundred MB
// of JSON, and a DOM (nlohmann::json) would cost several times the time and memory. Numbers
// are formatted from integers (times in whole nanoseconds, printed as microseconds with up to
// three decimals), so the output is byte-identical for identical inputs and a slice's end
// (ts + dur) never rounds past the next slice's ts.
#include "traces/chrome_trace.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "schedule/formats/json_string.hpp"
#include "traces/lane_groups.hpp"

namespace ppsched {
namespace {

// Simulated milliseconds -> whole nanoseconds (non-finite values become 0).
int64_t to_ns(double ms) {
  if (!std::isfinite(ms)) return 0;
  const double v = ms * 1e6;
  return static_cast<int64_t>(v >= 0 ? v + 0.5 : v - 0.5);  // round half away from zero
}

// A slice as the trace shows it, in ns. Zero-length slices (a receive whose data had already
// arrived under eager sends, an instant meta message) are drawn kMinDisplayNs long: a flow end
// must lie strictly inside its slice to bind to it alone, since the slices before and after
// on the same thread may touch it at both ends. 2 ns is invisible at the schedules' scale.
constexpr int64_t kMinDisplayNs = 2;

struct Span {
  int64_t ts = 0, dur = 0;  // ns; dur >= kMinDisplayNs
};

Span span_of(const TimedSlice& sl) {
  Span sp;
  sp.ts = to_ns(sl.start_ms);
  const int64_t end = to_ns(sl.end_ms);
  sp.dur = std::max(end - sp.ts, kMinDisplayNs);
  return sp;
}

// ---- a small append-only JSON writer ------------------------------------------------------

// The buffer is a std::string used as raw storage: `used_` bytes are written, the rest is
// capacity. Every write checks room once and copies with memcpy (no per-append bookkeeping of
// std::string::append, which dominated the profile).
class Out {
 public:
  explicit Out(size_t reserve) { s_.resize(std::max<size_t>(reserve, 16)); }
  std::string take() {
    s_.resize(used_);
    return std::move(s_);
  }

  template <size_t N>
  Out& raw(const char (&v)[N]) {  // a literal: the size is a constant
    std::memcpy(room(N - 1), v, N - 1);
    used_ += N - 1;
    return *this;
  }
  Out& raw(std::string_view v) {
    std::memcpy(room(v.size()), v.data(), v.size());
    used_ += v.size();
    return *this;
  }
  Out& ch(char c) {
    *room(1) = c;
    ++used_;
    return *this;
  }
  Out& integer(int64_t v) {
    char* p = room(24);
    used_ += static_cast<size_t>(std::to_chars(p, p + 24, v).ptr - p);
    return *this;
  }
  // Nanoseconds printed as microseconds: 1234567 -> "1234.567", 1000 -> "1".
  Out& micros(int64_t ns) {
    if (ns < 0) {
      ch('-');
      ns = -ns;
    }
    integer(ns / 1000);
    int frac = static_cast<int>(ns % 1000);
    if (frac) {
      char* p = room(4);
      p[0] = '.';
      p[1] = static_cast<char>('0' + frac / 100);
      p[2] = static_cast<char>('0' + frac / 10 % 10);
      p[3] = static_cast<char>('0' + frac % 10);
      size_t n = 4;
      while (p[n - 1] == '0') --n;
      used_ += n;
    }
    return *this;
  }
  // A double as JSON: integral values without a fraction, others in shortest round-trip form.
  Out& number(double v) {
    if (!std::isfinite(v)) return raw("0");
    if (std::abs(v) < 9.0e15 && v == std::floor(v)) return integer(static_cast<int64_t>(v));
    char* p = room(32);
    used_ += static_cast<size_t>(std::to_chars(p, p + 32, v).ptr - p);
    return *this;
  }
  Out& boolean(bool b) { return b ? raw("true") : raw("false"); }
  // A JSON string literal with its quotes.
  Out& str(std::string_view v) {
    write_json_string(v, [this](std::string_view piece) { raw(piece); });
    return *this;
  }
  // The name of a slice, written in place (short names and digits: nothing to escape).
  Out& slice_name(const Step* step, const TimedSlice& sl);

 private:
  char* room(size_t n) {
    if (used_ + n > s_.size()) s_.resize(std::max(s_.size() * 2, used_ + n));
    return s_.data() + used_;
  }
  std::string s_;
  size_t used_ = 0;
};

// Separates the events of the traceEvents array.
struct EventList {
  Out& out;
  bool first = true;
  Out& next() {
    out.raw(first ? "\n" : ",\n");
    first = false;
    return out;
  }
};

// ---- names ---------------------------------------------------------------------------------

Out& Out::slice_name(const Step* step, const TimedSlice& sl) {
  // A phase on the communication stream: "dispatch_fwd L3 F5 s2" (the stage's fourth MoE layer).
  if (const Phase* ph = slice_phase(step, sl)) {
    raw(ph->name);
    if (sl.layer >= 0) raw(" L").integer(sl.layer);
    ch(' ');
    step = phase_step(step, sl);
  }
  if (!step) {
    raw("step ").integer(sl.step_index);
  } else if (is_composite(step->op) && !step->sub_steps().empty()) {
    for (size_t k = 0; k < step->sub_steps().size(); ++k) {
      if (k) ch('|');
      raw(short_label(step->sub_steps()[k]));
    }
  } else {
    raw(info(step->op).short_name);
    if (step->micro >= 0) integer(step->micro);
    if (step->stage >= 0) raw(" s").integer(step->stage);
  }
  if (sl.meta) raw(" meta");
  return *this;
}

std::string_view kind_name(StepKind k) {
  switch (k) {
    case StepKind::Compute: return "compute";
    case StepKind::P2PSend: return "p2p_send";
    case StepKind::P2PRecv: return "p2p_recv";
    case StepKind::Collective: return "collective";
    case StepKind::Local: return "local";
    case StepKind::Composite: return "composite";
  }
  return "step";
}

std::string_view payload_name(Payload p) {
  switch (p) {
    case Payload::None: return "message";
    case Payload::Activation: return "activation";
    case Payload::Gradient: return "gradient";
    case Payload::Data: return "data";
    case Payload::Features: return "features";
    case Payload::TowerInputs: return "tower_inputs";
    case Payload::FeatureGrads: return "feature_grads";
  }
  return "message";
}

int lane_index(Lane l) { return static_cast<int>(l) % kTraceLanes; }

std::string process_name(const Schedule& s, int rank) {
  std::string name = "rank " + std::to_string(rank);
  std::vector<int> stages;
  for (size_t st = 0; st < s.placement.stage_to_rank.size(); ++st)
    if (s.placement.stage_to_rank[st] == rank) stages.push_back(static_cast<int>(st));
  if (!stages.empty()) {
    name += stages.size() == 1 ? " (stage " : " (stages ";
    for (size_t k = 0; k < stages.size(); ++k) {
      if (k) name += ", ";
      name += std::to_string(stages[k]);
    }
    name += ")";
  }
  return name;
}

std::string thread_name(int tid) {
  std::string name(lane_name(static_cast<Lane>(tid % kTraceLanes)));
  if (tid >= kTraceLanes) name += " #" + std::to_string(tid / kTraceLanes + 1);
  return name;
}

// Where a flow's two ends go. A viewer binds a flow end to the slice of its thread that
// encloses its timestamp (Perfetto: the slice open on the track when the event is read, in
// timestamp order), and drops an end it reads before the flow's start. So each end lies
// strictly inside its slice (the slice's own ends may touch its neighbours'), the start as
// near as that allows to the instant the payload left, the end to the instant it arrived, and
// the start never after the end. Returns false when the two slices admit no such pair (a
// receive that ended before the send began: clocks of a measured run that disagree).
bool flow_ends(const MessageFlow& f, const Span& send, const Span& recv, int64_t& start, int64_t& end) {
  const int64_t lo_s = send.ts + 1, hi_s = send.ts + send.dur - 1;  // dur >= kMinDisplayNs = 2
  const int64_t lo_r = recv.ts + 1, hi_r = recv.ts + recv.dur - 1;
  const int64_t leave = std::isfinite(f.leave_ms) ? to_ns(f.leave_ms) : send.ts;
  const int64_t arrive = std::isfinite(f.arrive_ms) ? to_ns(f.arrive_ms) : recv.ts + recv.dur;
  start = std::clamp(leave, lo_s, hi_s);
  end = std::clamp(arrive, lo_r, hi_r);
  if (end < start) {  // rounding or disagreeing clocks: meet where both slices allow
    start = std::max(lo_s, std::min(start, hi_r));
    end = std::clamp(start, lo_r, hi_r);
  }
  return start <= end;
}

}  // namespace

std::string_view lane_name(Lane lane) {
  switch (lane) {
    case Lane::Compute: return "compute";
    case Lane::Send: return "send";
    case Lane::Recv: return "recv";
    case Lane::Collective: return "collective";
    case Lane::Comm: return "comm stream";
  }
  return "lane";
}

const Step* phase_step(const Step* step, const TimedSlice& sl) {
  if (!step || sl.lane != Lane::Comm || sl.phase < 0 || !is_composite(step->op)) return step;
  const auto& subs = step->sub_steps();
  return sl.sub >= 0 && static_cast<size_t>(sl.sub) < subs.size() ? &subs[static_cast<size_t>(sl.sub)] : nullptr;
}

const Phase* slice_phase(const Step* step, const TimedSlice& sl) {
  const Step* leaf = phase_step(step, sl);
  if (!leaf || sl.lane != Lane::Comm || sl.phase < 0) return nullptr;
  const auto& phases = info(leaf->op).moe_phases;
  return static_cast<size_t>(sl.phase) < phases.size() ? &phases[static_cast<size_t>(sl.phase)] : nullptr;
}

const Step* slice_step(const Schedule& s, const TimedSlice& sl) {
  if (sl.rank < 0 || static_cast<size_t>(sl.rank) >= s.programs.size()) return nullptr;
  const Program& p = s.programs[static_cast<size_t>(sl.rank)];
  if (sl.step_index < 0 || static_cast<size_t>(sl.step_index) >= p.size()) return nullptr;
  const Slot& slot = p[static_cast<size_t>(sl.step_index)];
  if (!slot) return nullptr;
  if (sl.sub >= 0 && static_cast<size_t>(sl.sub) < slot->sub_steps().size())
    return &slot->sub_steps()[static_cast<size_t>(sl.sub)];
  return &*slot;
}

std::string slice_name(const Schedule& s, const TimedSlice& sl) {
  Out out(32);
  out.slice_name(slice_step(s, sl), sl);
  return out.take();
}

namespace {

std::vector<Span> spans_of(const RunRecord& r) {
  std::vector<Span> spans(r.slices.size());
  for (size_t i = 0; i < spans.size(); ++i) spans[i] = span_of(r.slices[i]);
  return spans;
}

std::vector<int> thread_ids(const RunRecord& r, const std::vector<Span>& spans) {
  std::vector<int> tid(r.slices.size(), 0);
  int nranks = 0;
  for (const auto& sl : r.slices) nranks = std::max(nranks, sl.rank + 1);
  LaneGroups groups = group_by_lane(r, nranks);
  std::vector<uint32_t>& order = groups.order;
  const std::vector<size_t>& first = groups.first;
  // By start; at equal starts the longer slice first, so it keeps the lane's main thread and
  // a zero-length neighbour moves aside. Ties broken by index: deterministic.
  auto before = [&](uint32_t a, uint32_t b) {
    if (spans[a].ts != spans[b].ts) return spans[a].ts < spans[b].ts;
    if (spans[a].dur != spans[b].dur) return spans[a].dur > spans[b].dur;
    return a < b;
  };
  using Busy = std::pair<int64_t, int>;  // (end, track)
  for (size_t k = 0; k + 1 < first.size(); ++k) {
    const auto b = order.begin() + static_cast<std::ptrdiff_t>(first[k]);
    const auto e = order.begin() + static_cast<std::ptrdiff_t>(first[k + 1]);
    if (b == e) continue;
    if (!std::is_sorted(b, e, before)) std::sort(b, e, before);
    const int lane = static_cast<int>(k % kTraceLanes);
    // Interval partitioning: each slice takes the lowest-numbered track that is free at its
    // start (a track is free once its last slice ended; touching ends do not overlap).
    std::priority_queue<Busy, std::vector<Busy>, std::greater<Busy>> busy;
    std::priority_queue<int, std::vector<int>, std::greater<int>> free_tracks;
    int tracks = 0;
    for (auto it = b; it != e; ++it) {
      const Span& sp = spans[*it];
      while (!busy.empty() && busy.top().first <= sp.ts) {
        free_tracks.push(busy.top().second);
        busy.pop();
      }
      int track;
      if (!free_tracks.empty()) {
        track = free_tracks.top();
        free_tracks.pop();
      } else {
        track = tracks++;
      }
      busy.push({sp.ts + sp.dur, track});
      tid[*it] = lane + kTraceLanes * track;
    }
  }
  return tid;
}

}  // namespace

std::vector<int> trace_thread_ids(const RunRecord& r) { return thread_ids(r, spans_of(r)); }

namespace {

// Writes `items` as JSON array elements, comma-separated, each by `write_one`.
template <class T, class WriteOne>
void comma_separated(Out& out, const std::vector<T>& items, WriteOne write_one) {
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) out.ch(',');
    write_one(items[k]);
  }
}

// Threads each rank uses (sorted: deterministic metadata order); compute always exists.
std::vector<std::vector<int>> threads_of_ranks(const RunRecord& r, const std::vector<int>& tid, int nranks) {
  std::vector<std::vector<int>> threads(static_cast<size_t>(nranks));
  std::vector<std::vector<char>> seen(static_cast<size_t>(nranks), std::vector<char>(kTraceLanes, 0));
  for (auto& v : seen) v[0] = 1;
  for (size_t i = 0; i < r.slices.size(); ++i) {
    const int rank = r.slices[i].rank;
    if (rank < 0) continue;
    auto& v = seen[static_cast<size_t>(rank)];
    if (static_cast<size_t>(tid[i]) >= v.size()) v.resize(static_cast<size_t>(tid[i]) + 1, 0);
    v[static_cast<size_t>(tid[i])] = 1;
  }
  for (size_t rank = 0; rank < seen.size(); ++rank)
    for (size_t t = 0; t < seen[rank].size(); ++t)
      if (seen[rank][t]) threads[rank].push_back(static_cast<int>(t));
  return threads;
}

// A memory sample as the counters write it. Ordered by (ts, input index), so ties keep the
// engine's order.
struct CounterSample {
  int64_t ts;
  uint32_t index;
  int64_t bytes, activations;
  bool operator<(const CounterSample& o) const { return ts != o.ts ? ts < o.ts : index < o.index; }
};

// One trace (or one rank's, under TraceOptions::only_rank) being written, section by section
// in the order chrome_trace.hpp documents.
class TraceWriter {
 public:
  TraceWriter(const Schedule& s, const RunRecord& r, const TraceOptions& options)
      : s_(s), r_(r), nranks_(shown_ranks(s, r)), only_(options.only_rank), spans_(spans_of(r)),
        tid_(thread_ids(r, spans_)),
        // Bytes per event, a little above the typical (growing past the estimate doubles the buffer).
        out_(r.slices.size() * 190 + r.flows.size() * 220 + r.memory.size() * 60 + 8192) {}

  std::string write() {
    out_.raw("{\"traceEvents\":[");
    metadata();
    slices();
    const int64_t flows_left_out = flows();
    memory_counters();
    violation_instants();
    out_.raw("\n],\"displayTimeUnit\":\"ms\"");
    if (only_ >= 0)
      out_.raw(",\"distributedInfo\":{\"rank\":").integer(only_).raw(",\"world_size\":").integer(nranks_).raw("}");
    other_data(flows_left_out);
    return out_.take();
  }

 private:
  bool wanted(int rank) const { return only_ < 0 || rank == only_; }

  // One process per rank, one thread per lane.
  void metadata() {
    const std::vector<std::vector<int>> threads = threads_of_ranks(r_, tid_, nranks_);
    for (int rank = 0; rank < nranks_; ++rank) {
      if (!wanted(rank)) continue;
      ev_.next().raw("{\"name\":\"process_name\",\"cat\":\"__metadata\",\"ph\":\"M\",\"pid\":").integer(rank)
          .raw(",\"tid\":0,\"args\":{\"name\":").str(process_name(s_, rank)).raw("}}");
      ev_.next().raw("{\"name\":\"process_sort_index\",\"cat\":\"__metadata\",\"ph\":\"M\",\"pid\":").integer(rank)
          .raw(",\"tid\":0,\"args\":{\"sort_index\":").integer(rank).raw("}}");
      for (int t : threads[static_cast<size_t>(rank)]) {
        ev_.next().raw("{\"name\":\"thread_name\",\"cat\":\"__metadata\",\"ph\":\"M\",\"pid\":").integer(rank).raw(",\"tid\":").integer(t)
            .raw(",\"args\":{\"name\":").str(thread_name(t)).raw("}}");
        // Lanes first (compute, send, recv, collective), each lane's extra threads after it.
        ev_.next().raw("{\"name\":\"thread_sort_index\",\"cat\":\"__metadata\",\"ph\":\"M\",\"pid\":").integer(rank).raw(",\"tid\":")
            .integer(t).raw(",\"args\":{\"sort_index\":").integer((t % kTraceLanes) * 1000 + t / kTraceLanes)
            .raw("}}");
      }
    }
  }

  // Complete ("X") slices, in r.slices order.
  void slices() {
    std::unordered_set<uint64_t> critical;  // (rank, step) keys per lane
    for (const auto& c : r_.critical_path)
      critical.insert(step_key(c.rank, c.step_index) * kTraceLanes + static_cast<uint64_t>(lane_index(c.lane)));
    for (size_t i = 0; i < r_.slices.size(); ++i) {
      const TimedSlice& sl = r_.slices[i];
      if (sl.rank < 0 || !wanted(sl.rank)) continue;
      const Step* step = slice_step(s_, sl);
      Out& o = ev_.next();
      o.raw("{\"name\":\"").slice_name(step, sl).raw("\",\"cat\":\"").raw(step ? kind_name(info(step->op).kind) : "step").raw("\",\"ph\":\"X\",\"pid\":")
          .integer(sl.rank).raw(",\"tid\":").integer(tid_[i]).raw(",\"ts\":").micros(spans_[i].ts)
          .raw(",\"dur\":").micros(spans_[i].dur).raw(",\"args\":{\"micro\":")
          .integer(step ? step->micro : -1).raw(",\"stage\":").integer(step ? step->stage : -1)
          .raw(",\"step_index\":").integer(sl.step_index);
      if (sl.sub >= 0) o.raw(",\"sub\":").integer(sl.sub);
      if (sl.lane == Lane::Comm && sl.phase >= 0) o.raw(",\"phase\":").integer(sl.phase).raw(",\"layer\":").integer(sl.layer);
      o.raw(",\"bytes\":").number(sl.bytes).raw(",\"meta\":").boolean(sl.meta);
      if (step) o.raw(",\"op\":\"").raw(info(step->op).name).ch('"');
      if (!critical.empty() &&
          critical.count(step_key(sl.rank, sl.step_index) * kTraceLanes + static_cast<uint64_t>(lane_index(sl.lane))))
        o.raw(",\"critical\":true");
      o.raw("}}");
    }
  }

  // Flows, send slice -> receive slice: v1 flow events; the identity is (id, cat, name), so
  // both ends carry the same cat and name. Ids are numeric (Perfetto parses string ids as hex)
  // and numbered 1.. in flow order. The per-rank variant keeps only flows with both ends on
  // its rank (a file with one end would hold a dangling flow). Returns the flows left out.
  int64_t flows() {
    int64_t flows_left_out = 0;
    for (size_t k = 0; k < r_.flows.size(); ++k) {
      const MessageFlow& f = r_.flows[k];
      if (f.send_slice < 0 || f.recv_slice < 0 || static_cast<size_t>(f.send_slice) >= r_.slices.size() ||
          static_cast<size_t>(f.recv_slice) >= r_.slices.size())
        continue;
      const size_t send = static_cast<size_t>(f.send_slice), recv = static_cast<size_t>(f.recv_slice);
      const TimedSlice& a = r_.slices[send];
      const TimedSlice& b = r_.slices[recv];
      if (a.rank < 0 || b.rank < 0 || !wanted(a.rank) || !wanted(b.rank)) continue;
      const Step* sent = slice_step(s_, a);
      std::string_view name = a.meta ? std::string_view("meta") : payload_name(sent ? info(sent->op).payload : Payload::None);
      int64_t start = 0, end = 0;
      if (!flow_ends(f, spans_[send], spans_[recv], start, end)) {
        ++flows_left_out;  // a viewer would drop it: leave it out and say so in otherData
        continue;
      }
      const int64_t id = static_cast<int64_t>(k) + 1;
      ev_.next().raw("{\"name\":\"").raw(name).raw("\",\"cat\":\"p2p\",\"ph\":\"s\",\"id\":").integer(id)
          .raw(",\"pid\":").integer(a.rank).raw(",\"tid\":").integer(tid_[send]).raw(",\"ts\":").micros(start).raw("}");
      ev_.next().raw("{\"name\":\"").raw(name).raw("\",\"cat\":\"p2p\",\"ph\":\"f\",\"bp\":\"e\",\"id\":").integer(id)
          .raw(",\"pid\":").integer(b.rank).raw(",\"tid\":").integer(tid_[recv]).raw(",\"ts\":").micros(end).raw("}");
    }
    return flows_left_out;
  }

  // The wanted ranks' samples, bucketed by rank (the engine records samples in global time
  // order, ranks interleaved), each rank's in time order. Copied out in one sequential pass
  // (reading r.memory rank by rank would miss the cache at every sample); a rank's samples
  // are sorted only if they are not in time order already.
  std::vector<std::vector<CounterSample>> samples_by_rank() const {
    std::vector<std::vector<CounterSample>> of_rank(static_cast<size_t>(nranks_));
    for (size_t i = 0; i < r_.memory.size(); ++i) {
      const MemorySample& m = r_.memory[i];
      if (m.rank >= 0 && wanted(m.rank))
        of_rank[static_cast<size_t>(m.rank)].push_back({to_ns(m.time_ms), static_cast<uint32_t>(i), m.bytes, m.activations});
    }
    for (auto& v : of_rank)
      if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
    return of_rank;
  }

  // Memory counters, per rank in time order.
  void memory_counters() {
    const std::vector<std::vector<CounterSample>> of_rank = samples_by_rank();
    // Beside the whole ("bytes": what the rank holds, resident weights, gradients and optimizer
    // state included), the kept activations alone and the resident part, when the run has them
    // (a model's costs): Perfetto draws each as a series of the rank's memory track.
    std::vector<int64_t> resident(static_cast<size_t>(nranks_), 0);
    bool breakdown = false;
    for (const auto& x : r_.ranks)
      if (x.rank >= 0 && x.rank < nranks_) {
        resident[static_cast<size_t>(x.rank)] = x.memory.resident_bytes();
        breakdown = breakdown || x.memory.resident_bytes() > 0;
      }
    for (const auto& m : r_.memory) breakdown = breakdown || m.activations > 0;
    auto counter = [&](int rank, int64_t ts, const CounterSample& x) {
      Out& o = ev_.next();
      o.raw("{\"name\":\"memory\",\"cat\":\"memory\",\"ph\":\"C\",\"pid\":").integer(rank).raw(",\"tid\":0,\"ts\":")
          .micros(ts).raw(",\"args\":{\"bytes\":").integer(x.bytes);
      if (breakdown)
        o.raw(",\"activations\":").integer(x.activations).raw(",\"resident\":").integer(resident[static_cast<size_t>(rank)]);
      o.raw("}}");
    };
    // A counter is a step function: of the samples at one timestamp only the highest (when it
    // exceeds the final one, so the peak stays queryable) and the final one are visible, and a
    // sample repeating the current value adds nothing. The engine records about two samples
    // per step, half of them redundant: this halves the counters' share of the file.
    const auto same = [](const CounterSample& a, const CounterSample& b) {
      return a.bytes == b.bytes && a.activations == b.activations;
    };
    for (size_t rank = 0; rank < of_rank.size(); ++rank) {
      const auto& v = of_rank[rank];
      bool any = false;
      CounterSample current{};
      for (size_t k = 0; k < v.size();) {
        const int64_t ts = v[k].ts;
        CounterSample high = v[k], last = high;
        for (++k; k < v.size() && v[k].ts == ts; ++k) {
          if (v[k].bytes > high.bytes) high = v[k];
          last = v[k];
        }
        if (high.bytes > last.bytes && (!any || !same(high, current)))
          counter(static_cast<int>(rank), ts, high), current = high, any = true;
        if (!any || !same(last, current)) counter(static_cast<int>(rank), ts, last), current = last, any = true;
      }
    }
  }

  void instant(const Violation& v, int rank, int thread, int64_t ts, int step_index, char scope) {
    Out& o = ev_.next();
    o.raw("{\"name\":").str(to_string(v.kind)).raw(",\"cat\":\"violation\",\"ph\":\"i\",\"s\":\"")
        .ch(scope).raw("\",\"pid\":").integer(rank).raw(",\"tid\":").integer(thread).raw(",\"ts\":").micros(ts)
        .raw(",\"args\":{\"message\":").str(v.message);
    if (step_index >= 0) o.raw(",\"step_index\":").integer(step_index);
    o.raw("}}");
  }

  // Instants at violations: at each of a violation's steps (scope thread), or on its ranks
  // (scope process) when it names no step.
  void violation_instants() {
    if (r_.check.violations.empty()) return;
    // First slice of every (rank, step): where the marker goes (its thread, its start).
    std::unordered_map<uint64_t, uint32_t> first_slice;
    std::vector<int64_t> rank_end(static_cast<size_t>(nranks_), 0);
    for (size_t i = 0; i < r_.slices.size(); ++i) {
      const TimedSlice& sl = r_.slices[i];
      if (sl.rank < 0) continue;
      first_slice.emplace(step_key(sl.rank, sl.step_index), static_cast<uint32_t>(i));
      rank_end[static_cast<size_t>(sl.rank)] =
          std::max(rank_end[static_cast<size_t>(sl.rank)], spans_[i].ts + spans_[i].dur);
    }
    for (const Violation& v : r_.check.violations) {
      if (!v.steps.empty()) {
        for (const StepRef& ref : v.steps) {
          if (ref.rank < 0 || ref.rank >= nranks_ || !wanted(ref.rank)) continue;
          auto it = first_slice.find(step_key(ref.rank, ref.index));
          if (it != first_slice.end())
            instant(v, ref.rank, tid_[it->second], spans_[it->second].ts, ref.index, 't');
          else  // the step never ran (a deadlock stopped the rank before it): mark where the rank stopped
            instant(v, ref.rank, 0, rank_end[static_cast<size_t>(ref.rank)], ref.index, 't');
        }
      } else {
        for (int rank : v.ranks)
          if (rank >= 0 && rank < nranks_ && wanted(rank))
            instant(v, rank, 0, rank_end[static_cast<size_t>(rank)], -1, 'p');
      }
    }
  }

  // otherData: the run's provenance (results/run_record.hpp), which traces/trace_reader.cpp
  // reads back.
  void other_data(int64_t flows_left_out) {
    const RunProvenance& p = r_.provenance;
    out_.raw(",\"otherData\":{\"tool\":\"ppsched\",\"schedule\":").str(s_.name).raw(",\"label\":").str(p.display_label())
        .raw(",\"source\":").str(to_string(p.source));
    if (p.transport != RunTransport::None) out_.raw(",\"transport\":").str(to_string(p.transport));
    out_.raw(",\"ranks\":").integer(nranks_).raw(",\"stages\":").integer(s_.stages)
        .raw(",\"micro_batches\":").integer(s_.micro_batches).raw(",\"makespan_ms\":").number(r_.makespan_ms)
        .raw(",\"completed\":").boolean(r_.completed).raw(",\"steps\":").integer(static_cast<int64_t>(r_.steps))
        .raw(",\"violations\":").integer(static_cast<int64_t>(r_.check.violations.size()))
        .raw(",\"flows_left_out\":").integer(flows_left_out);
    if (p.mode) {
      out_.raw(",\"mode\":{\"comm\":").str(p.mode->comm == CommMode::Eager ? "eager" : "rendezvous")
          .raw(",\"overlap_p2p\":").boolean(p.mode->overlap_p2p)
          .raw(",\"mpipe_batched_recv\":").boolean(p.mode->mpipe_batched_recv)
          .raw(",\"dyn_shape\":").boolean(p.mode->dyn_shape)
          .raw(",\"p2p_backend\":").str(to_string(p.mode->backend));
      if (!p.mode_note.empty()) out_.raw(",\"note\":").str(p.mode_note);
      out_.raw("}");
    }
    if (p.source == RunSource::Measured) out_.raw(",\"shared_clock\":").boolean(p.shared_clock);
    measured_run_fields(p);
    if (!p.notes.empty()) {
      out_.raw(",\"notes\":[");
      comma_separated(out_, p.notes, [&](const std::string& n) { out_.str(n); });
      out_.raw("]");
    }
    out_.raw(",\"time_unit\":\"ts and dur in microseconds; simulated times are milliseconds\"}}\n");
  }

  // What ppsched-exec knows of a real run: where it ran (mesh, cores) and what each stage held
  // and timed.
  void measured_run_fields(const RunProvenance& p) {
    const auto integer = [&](int v) { out_.integer(v); };
    if (p.mesh) {
      // Which replica this is (--dp): the DP degree and, per pipeline rank of the trace, the
      // global rank that ran it.
      out_.raw(",\"mesh\":{\"dim_names\":[\"dp\",\"pp\"],\"shape\":[").integer(p.mesh->dp).raw(",").integer(p.mesh->pp)
          .raw("],\"order\":").str(p.mesh->order).raw(",\"replica\":").integer(p.mesh->replica).raw(",\"global_ranks\":[");
      comma_separated(out_, p.mesh->global_ranks, integer);
      out_.raw("]}");
    }
    if (!p.placement.empty()) {
      // Where each rank ran (--cpu-bind): calibrate notes ranks that shared cores.
      out_.raw(",\"cpu_binding\":{\"mode\":").str(p.cpu_bind).raw(",\"ranks\":[");
      comma_separated(out_, p.placement, [&](const RankPlacement& pl) {
        out_.raw("{\"host\":").str(pl.host).raw(",\"cpus\":[");
        comma_separated(out_, pl.cpus, integer);
        out_.raw("],\"bound\":").boolean(pl.bound).raw("}");
      });
      out_.raw("]}");
    }
    if (!p.layers.empty()) {
      // The model layers each stage held (calibrate --model reads the traced layout from here).
      out_.raw(",\"layers\":[");
      comma_separated(out_, p.layers, [&](const StageLayers& l) {
        out_.raw("{\"stage\":").integer(l.stage).raw(",\"layers\":[");
        comma_separated(out_, l.layers, [&](const std::string& n) { out_.str(n); });
        out_.raw("]}");
      });
      out_.raw("]");
    }
    if (!p.split_backward.empty()) {
      // Each stage's backward timed whole and split by the executor (calibrate --model prices
      // split steps with these ratios).
      out_.raw(",\"split_backward\":[");
      comma_separated(out_, p.split_backward, [&](const SplitBackwardProbe& b) {
        out_.raw("{\"stage\":").integer(b.stage).raw(",\"bwd_ms\":").number(b.bwd_ms);
        out_.raw(",\"bwd_input_ms\":").number(b.bwd_input_ms).raw(",\"bwd_weight_ms\":").number(b.bwd_weight_ms).raw("}");
      });
      out_.raw("]");
    }
  }

  const Schedule& s_;
  const RunRecord& r_;
  const int nranks_;
  const int only_;
  const std::vector<Span> spans_;
  const std::vector<int> tid_;
  Out out_;
  EventList ev_{out_};
};

}  // namespace

std::string chrome_trace_json(const Schedule& s, const RunRecord& r, const TraceOptions& options) {
  return TraceWriter(s, r, options).write();
}

}  // namespace ppsched
