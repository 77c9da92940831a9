// Traces and pictures: the Chrome Trace Event Format JSON read back with nlohmann::json, and
// the SVG timeline checked for well-formed XML. Until the simulator runs, results are
// fabricated by hand (a GPipe-like timeline with closed-form times); the last test uses a
// real simulation as soon as simulate() returns slices.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "schedule/generators/generator.hpp"
#include "sim/cost_model.hpp"
#include "sim/engine.hpp"
#include "traces/chrome_trace.hpp"
#include "traces/svg_timeline.hpp"
#include "traces/text_grid.hpp"
#include "traces/trace_reader.hpp"
#include "schedule/errors.hpp"
#include "tests/support/trace_validator.hpp"

using namespace ppsched;
using nlohmann::json;

namespace {

// ---- a fabricated simulation ------------------------------------------------------------------

struct Fabricated {
  Schedule s;
  RunRecord r;
};

const char* kTrickyMessage = "peak \"9 GiB\" > budget <8 GiB> & rank\\0\tover";

// GPipe on P ranks (stage = rank), M micro-batches: forward m on rank r starts at
// (m + r)(F + c), a transfer takes c, backwards run in micro order from the last rank. Sends
// and receives sit on their own lanes; each send is matched to its receive by a flow. Memory
// grows by (rank + 1) MiB per forward and shrinks at its backward. One memory violation with
// a step, one with ranks only.
Fabricated fabricate(int P, int M, double F = 1.0, double B = 2.0, double c = 0.25) {
  Fabricated out;
  Schedule& s = out.s;
  RunRecord& r = out.r;
  s.name = "fabricated-gpipe";
  s.ranks = P;
  s.stages = P;
  s.micro_batches = M;
  s.placement = Placement::loop(P, P);
  s.programs.assign(static_cast<size_t>(P), {});

  const double T0 = (M - 1 + P - 1) * (F + c) + F;  // last forward ends
  auto fwd_start = [&](int rank, int m) { return (m + rank) * (F + c); };
  auto bwd_start = [&](int rank, int m) { return T0 + (m + (P - 1 - rank)) * (B + c); };
  auto grid = [&] { return std::vector<std::vector<int>>(static_cast<size_t>(P), std::vector<int>(static_cast<size_t>(M), -1)); };
  auto fsend = grid(), frecv = grid(), bsend = grid(), brecv = grid();

  r.slices.reserve(static_cast<size_t>(6 * P * M));
  r.memory.reserve(static_cast<size_t>(2 * P * M + P));
  for (int rank = 0; rank < P; ++rank) {
    Program& p = s.programs[static_cast<size_t>(rank)];
    auto add = [&](Op op, int m, Lane lane, double a, double b, double bytes) {
      p.push_back(make_step(op, m, rank));
      TimedSlice sl;
      sl.rank = rank;
      sl.step_index = static_cast<int32_t>(p.size() - 1);
      sl.lane = lane;
      sl.start_ms = a;
      sl.end_ms = b;
      sl.bytes = bytes;
      sl.meta = false;
      r.slices.push_back(sl);
      return static_cast<int>(r.slices.size() - 1);
    };
    const double msg = 4.0 * (1 << 20);
    const int64_t act = int64_t{1 << 20} * (rank + 1);
    int64_t live = 0;
    r.memory.push_back({rank, 0.0, 0});
    for (int m = 0; m < M; ++m) {
      if (rank > 0) frecv[rank][m] = add(Op::FWD_RECV, m, Lane::Recv, fwd_start(rank - 1, m) + F, fwd_start(rank, m), msg);
      add(Op::FWD, m, Lane::Compute, fwd_start(rank, m), fwd_start(rank, m) + F, 0);
      live += act;
      r.memory.push_back({rank, fwd_start(rank, m) + F, live});
      if (rank < P - 1)
        fsend[rank][m] = add(Op::FWD_SEND, m, Lane::Send, fwd_start(rank, m) + F, fwd_start(rank, m) + F + c, msg);
    }
    for (int m = 0; m < M; ++m) {
      if (rank < P - 1) brecv[rank][m] = add(Op::BWD_RECV, m, Lane::Recv, bwd_start(rank + 1, m) + B, bwd_start(rank, m), msg);
      add(Op::BWD, m, Lane::Compute, bwd_start(rank, m), bwd_start(rank, m) + B, 0);
      live -= act;
      r.memory.push_back({rank, bwd_start(rank, m) + B, live});
      if (rank > 0)
        bsend[rank][m] = add(Op::BWD_SEND, m, Lane::Send, bwd_start(rank, m) + B, bwd_start(rank, m) + B + c, msg);
    }
  }
  for (int rank = 0; rank < P; ++rank)
    for (int m = 0; m < M; ++m) {
      if (rank < P - 1) r.flows.push_back({static_cast<int32_t>(r.flows.size()), fsend[rank][m], frecv[rank + 1][m]});
      if (rank > 0) r.flows.push_back({static_cast<int32_t>(r.flows.size()), bsend[rank][m], brecv[rank - 1][m]});
    }

  r.completed = true;
  r.makespan_ms = bwd_start(0, M - 1) + B;
  r.steps = s.step_count();
  for (int rank = 0; rank < P; ++rank) {
    RankSummary rs;
    rs.rank = rank;
    rs.busy_ms = M * (F + B);
    rs.idle_ms = r.makespan_ms - rs.busy_ms;
    rs.bubble_fraction = rs.idle_ms / r.makespan_ms;
    rs.peak_memory_bytes = int64_t{1 << 20} * (rank + 1) * M;
    rs.end_ms = r.makespan_ms;
    r.ranks.push_back(rs);
  }
  // The critical path: rank 0's first forward, then the last rank's forwards.
  r.critical_path.push_back({0, 0, Lane::Compute, 0.0, F});

  Violation v;
  v.kind = ViolationKind::Memory;
  v.ranks = {0};
  StepRef ref;
  ref.rank = 0;
  ref.index = 0;  // rank 0's FWD of micro 0
  ref.step = *s.programs[0][0];
  v.steps = {ref};
  v.message = kTrickyMessage;
  r.check.violations.push_back(v);
  Violation w;
  w.kind = ViolationKind::Memory;
  w.ranks = {P - 1};
  w.message = "rank-wide";
  r.check.violations.push_back(w);
  return out;
}

// ---- reading a trace back -------------------------------------------------------------------------

int64_t ns(const json& v) { return std::llround(v.get<double>() * 1000.0); }

struct Bound {
  int pid = -1, tid = -1;
  int64_t ts = 0, end = 0;
  const json* event = nullptr;
};

struct ParsedTrace {
  json doc;
  std::map<std::pair<int, int>, std::vector<Bound>> slices;  // (pid, tid) -> X slices by ts
  std::vector<const json*> of(const char* ph) const {
    std::vector<const json*> out;
    for (const auto& e : doc["traceEvents"])
      if (e["ph"] == ph) out.push_back(&e);
    return out;
  }
  // The X slice of (pid, tid) whose [ts, ts + dur] holds t; nullptr when none does, or when
  // several do (a viewer could bind to either).
  const json* enclosing(int pid, int tid, int64_t t) const {
    auto it = slices.find({pid, tid});
    if (it == slices.end()) return nullptr;
    const json* found = nullptr;
    for (const auto& b : it->second) {
      if (b.ts <= t && t <= b.end) {
        if (found) return nullptr;
        found = b.event;
      }
    }
    return found;
  }
};

ParsedTrace parse_trace(const std::string& text) {
  ParsedTrace t;
  t.doc = json::parse(text);
  for (const auto& e : t.doc.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    Bound b;
    b.pid = e.at("pid").get<int>();
    b.tid = e.at("tid").get<int>();
    b.ts = ns(e.at("ts"));
    b.end = b.ts + ns(e.at("dur"));
    b.event = &e;
    t.slices[{b.pid, b.tid}].push_back(b);
  }
  for (auto& [key, v] : t.slices)
    std::stable_sort(v.begin(), v.end(), [](const Bound& a, const Bound& b) { return a.ts < b.ts; });
  return t;
}

// The structural promises of every trace. Returns "" or the first broken one.
std::string check_trace(const ParsedTrace& t, const RunRecord& r) {
  const json& d = t.doc;
  if (!d.contains("traceEvents") || !d["traceEvents"].is_array()) return "no traceEvents array";
  if (d.value("displayTimeUnit", "") != "ms") return "displayTimeUnit is not ms";
  if (!d.contains("otherData")) return "no otherData";
  // Slices on one thread never overlap (touching ends are fine).
  for (const auto& [key, v] : t.slices)
    for (size_t k = 1; k < v.size(); ++k)
      if (v[k].ts < v[k - 1].end)
        return "overlap on pid " + std::to_string(key.first) + " tid " + std::to_string(key.second) + " at " +
               std::to_string(v[k].ts) + " ns";
  // Every X slice has a name, a category and a duration.
  for (const auto& [key, v] : t.slices)
    for (const auto& b : v)
      if (!b.event->contains("name") || !b.event->contains("cat") || !b.event->contains("dur"))
        return "X slice without name/cat/dur";
  // Metadata: a process_name per pid seen, a thread_name per (pid, tid) with slices.
  std::set<int> named_pids;
  std::set<std::pair<int, int>> named_threads;
  for (const json* e : t.of("M")) {
    if ((*e)["name"] == "process_name") named_pids.insert((*e)["pid"].get<int>());
    if ((*e)["name"] == "thread_name") named_threads.insert({(*e)["pid"].get<int>(), (*e)["tid"].get<int>()});
  }
  for (const auto& [key, v] : t.slices) {
    if (!named_pids.count(key.first)) return "pid " + std::to_string(key.first) + " has no process_name";
    if (!named_threads.count(key)) return "thread without thread_name";
  }
  // Flows: exactly one s and one f per id, same cat and name, each inside a slice of the
  // sender's send lane / the receiver's recv lane.
  std::map<int64_t, std::vector<const json*>> flows;
  for (const json* e : t.of("s")) flows[(*e)["id"].get<int64_t>()].push_back(e);
  for (const json* e : t.of("f")) flows[(*e)["id"].get<int64_t>()].push_back(e);
  for (const auto& [id, ends] : flows) {
    if (ends.size() != 2) return "flow " + std::to_string(id) + " has " + std::to_string(ends.size()) + " ends";
    const json* s = (*ends[0])["ph"] == "s" ? ends[0] : ends[1];
    const json* f = (*ends[0])["ph"] == "f" ? ends[0] : ends[1];
    if ((*s)["ph"] != "s" || (*f)["ph"] != "f") return "flow " + std::to_string(id) + " lacks an s or an f";
    if ((*s)["cat"] != (*f)["cat"] || (*s)["name"] != (*f)["name"]) return "flow ends differ in cat or name";
    if (f->value("bp", "") != "e") return "f without bp:e";
    const json* from = t.enclosing((*s)["pid"].get<int>(), (*s)["tid"].get<int>(), ns((*s)["ts"]));
    const json* to = t.enclosing((*f)["pid"].get<int>(), (*f)["tid"].get<int>(), ns((*f)["ts"]));
    if (!from || !to) return "flow " + std::to_string(id) + " end not inside exactly one slice";
    if ((*from)["tid"].get<int>() % kTraceLanes != static_cast<int>(Lane::Send) &&
        (*from)["tid"].get<int>() % kTraceLanes != static_cast<int>(Lane::Collective))
      return "flow starts outside a send lane";
    if ((*to)["tid"].get<int>() % kTraceLanes != static_cast<int>(Lane::Recv) &&
        (*to)["tid"].get<int>() % kTraceLanes != static_cast<int>(Lane::Collective))
      return "flow ends outside a recv lane";
    // The bound slices are the flow's own (ids number r.flows from 1).
    const MessageFlow& sf = r.flows.at(static_cast<size_t>(id - 1));
    const TimedSlice& a = r.slices.at(static_cast<size_t>(sf.send_slice));
    const TimedSlice& b = r.slices.at(static_cast<size_t>(sf.recv_slice));
    if ((*from)["pid"] != a.rank || (*from)["args"]["step_index"] != a.step_index) return "flow bound to the wrong send";
    if ((*to)["pid"] != b.rank || (*to)["args"]["step_index"] != b.step_index) return "flow bound to the wrong recv";
  }
  return "";
}

// ---- a small XML well-formedness checker ----------------------------------------------------------
// Elements balance, attributes are name="value" (or '...') with no '<' inside, entity
// references are the predefined ones or numeric, one root element, nothing but whitespace
// outside it (after the optional prolog and comments).
std::string check_xml(const std::string& x) {
  std::vector<std::string> stack;
  size_t i = 0, roots = 0;
  auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' || c == '.'; };
  auto check_entities = [&](size_t a, size_t b) -> std::string {
    for (size_t k = a; k < b; ++k) {
      if (x[k] == '<') return "raw '<' at " + std::to_string(k);
      if (x[k] != '&') continue;
      size_t semi = x.find(';', k);
      if (semi == std::string::npos || semi > b) return "unterminated entity at " + std::to_string(k);
      std::string ent = x.substr(k + 1, semi - k - 1);
      static const std::set<std::string> known = {"amp", "lt", "gt", "quot", "apos"};
      if (!known.count(ent) && !(ent.size() > 1 && ent[0] == '#')) return "unknown entity &" + ent + ";";
      k = semi;
    }
    return "";
  };
  while (i < x.size()) {
    if (x[i] != '<') {
      size_t next = x.find('<', i);
      if (next == std::string::npos) next = x.size();
      if (stack.empty()) {
        for (size_t k = i; k < next; ++k)
          if (!std::isspace(static_cast<unsigned char>(x[k]))) return "text outside the root at " + std::to_string(k);
      } else if (auto e = check_entities(i, next); !e.empty()) {
        return e;
      }
      i = next;
      continue;
    }
    if (x.compare(i, 4, "<!--") == 0) {
      size_t end = x.find("-->", i + 4);
      if (end == std::string::npos) return "unterminated comment";
      i = end + 3;
      continue;
    }
    if (x.compare(i, 2, "<?") == 0) {
      if (i != 0) return "processing instruction not at the start";
      size_t end = x.find("?>", i);
      if (end == std::string::npos) return "unterminated prolog";
      i = end + 2;
      continue;
    }
    if (x.compare(i, 2, "</") == 0) {
      size_t k = i + 2, start = k;
      while (k < x.size() && name_char(x[k])) ++k;
      std::string name = x.substr(start, k - start);
      while (k < x.size() && std::isspace(static_cast<unsigned char>(x[k]))) ++k;
      if (k >= x.size() || x[k] != '>') return "bad end tag " + name;
      if (stack.empty() || stack.back() != name)
        return "end tag </" + name + "> does not close <" + (stack.empty() ? "" : stack.back()) + ">";
      stack.pop_back();
      i = k + 1;
      continue;
    }
    // Start tag.
    size_t k = i + 1, start = k;
    while (k < x.size() && name_char(x[k])) ++k;
    std::string name = x.substr(start, k - start);
    if (name.empty()) return "empty tag name at " + std::to_string(i);
    std::set<std::string> attrs;
    for (;;) {
      while (k < x.size() && std::isspace(static_cast<unsigned char>(x[k]))) ++k;
      if (k >= x.size()) return "unterminated tag " + name;
      if (x[k] == '>' || x.compare(k, 2, "/>") == 0) break;
      size_t a = k;
      while (k < x.size() && name_char(x[k])) ++k;
      std::string attr = x.substr(a, k - a);
      if (attr.empty()) return "bad attribute in <" + name + "> at " + std::to_string(k);
      if (!attrs.insert(attr).second) return "duplicate attribute " + attr + " in <" + name + ">";
      if (k >= x.size() || x[k] != '=') return "attribute " + attr + " without value";
      ++k;
      if (k >= x.size() || (x[k] != '"' && x[k] != '\'')) return "unquoted attribute " + attr;
      char q = x[k];
      size_t end = x.find(q, k + 1);
      if (end == std::string::npos) return "unterminated attribute " + attr;
      if (auto e = check_entities(k + 1, end); !e.empty()) return e + " in attribute " + attr;
      k = end + 1;
      if (k < x.size() && !std::isspace(static_cast<unsigned char>(x[k])) && x[k] != '>' && x[k] != '/')
        return "no space after attribute " + attr;
    }
    const bool empty = x[k] == '/';
    if (stack.empty()) ++roots;
    if (roots > 1) return "more than one root element";
    if (!empty) stack.push_back(name);
    i = k + (empty ? 2 : 1);
  }
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  if (roots != 1) return "no root element";
  return "";
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + needle.size())) ++n;
  return n;
}

}  // namespace

// ---- Chrome trace -------------------------------------------------------------------------------------

TEST_CASE("the trace reads back as a Trace Event Format object with every structural promise kept") {
  for (auto [P, M] : {std::pair{2, 3}, std::pair{3, 5}, std::pair{4, 8}}) {
    Fabricated f = fabricate(P, M);
    ParsedTrace t = parse_trace(chrome_trace_json(f.s, f.r));
    INFO("P=" << P << " M=" << M);
    CHECK(check_trace(t, f.r) == "");
    CHECK(t.of("X").size() == f.r.slices.size());
    CHECK(t.of("s").size() == f.r.flows.size());
    CHECK(t.of("f").size() == f.r.flows.size());
    CHECK_FALSE(t.doc.contains("distributedInfo"));
    CHECK(t.doc["otherData"]["ranks"] == P);
    CHECK(t.doc["otherData"]["schedule"] == "fabricated-gpipe");
  }
}

TEST_CASE("every rank is a process named after its stages, with a thread per lane") {
  Fabricated f = fabricate(3, 4);
  ParsedTrace t = parse_trace(chrome_trace_json(f.s, f.r));
  std::map<int, std::string> process;
  std::map<int, int> sort_index;
  std::map<std::pair<int, int>, std::string> thread;
  for (const json* e : t.of("M")) {
    const int pid = (*e)["pid"].get<int>(), tid = (*e)["tid"].get<int>();
    if ((*e)["name"] == "process_name") process[pid] = (*e)["args"]["name"].get<std::string>();
    if ((*e)["name"] == "process_sort_index") sort_index[pid] = (*e)["args"]["sort_index"].get<int>();
    if ((*e)["name"] == "thread_name") thread[{pid, tid}] = (*e)["args"]["name"].get<std::string>();
  }
  REQUIRE(process.size() == 3);
  CHECK(process[0] == "rank 0 (stage 0)");
  CHECK(process[2] == "rank 2 (stage 2)");
  CHECK(sort_index[1] == 1);
  // Rank 0 sends only, the last rank... also receives; the middle rank uses every lane.
  CHECK(thread[{1, 0}] == "compute");
  CHECK(thread[{1, 1}] == "send");
  CHECK(thread[{1, 2}] == "recv");
  CHECK(thread.count({0, 0}) == 1);
  CHECK(thread.count({2, 0}) == 1);
}

TEST_CASE("an interleaved placement names every stage of a rank") {
  Fabricated f = fabricate(2, 2);
  f.s.stages = 4;
  f.s.placement = Placement::loop(2, 4);
  ParsedTrace t = parse_trace(chrome_trace_json(f.s, f.r));
  std::set<std::string> names;
  for (const json* e : t.of("M"))
    if ((*e)["name"] == "process_name") names.insert((*e)["args"]["name"].get<std::string>());
  CHECK(names == std::set<std::string>{"rank 0 (stages 0, 2)", "rank 1 (stages 1, 3)"});
}

TEST_CASE("slices are named like F3 s1, carry their step's args and are timed in microseconds") {
  Fabricated f = fabricate(2, 4);
  ParsedTrace t = parse_trace(chrome_trace_json(f.s, f.r));
  const json* fwd = nullptr;
  const json* send = nullptr;
  for (const json* e : t.of("X")) {
    if ((*e)["name"] == "F3 s1") fwd = e;
    if ((*e)["name"] == "FS2 s0") send = e;
  }
  REQUIRE(fwd);
  REQUIRE(send);
  CHECK((*fwd)["cat"] == "compute");
  CHECK((*fwd)["pid"] == 1);
  CHECK((*fwd)["tid"] == 0);
  CHECK((*fwd)["args"]["micro"] == 3);
  CHECK((*fwd)["args"]["stage"] == 1);
  CHECK((*fwd)["args"]["op"] == "FWD");
  // F3 on rank 1 starts at (3 + 1)(F + c) = 5 ms = 5000 us and lasts F = 1 ms.
  CHECK((*fwd)["ts"].get<double>() == Approx(5000.0));
  CHECK((*fwd)["dur"].get<double>() == Approx(1000.0));
  CHECK((*send)["cat"] == "p2p_send");
  CHECK((*send)["tid"] == 1);
  CHECK((*send)["args"]["bytes"] == 4 * (1 << 20));
  CHECK((*send)["args"]["meta"] == false);
  // The critical path marks its slices.
  bool critical = false;
  for (const json* e : t.of("X"))
    if ((*e)["name"] == "F0 s0") critical = (*e)["args"].value("critical", false);
  CHECK(critical);
}

TEST_CASE("composites, batch sub-steps and meta messages get compact names") {
  Schedule s;
  s.name = "names";
  s.ranks = 1;
  s.stages = 4;
  s.micro_batches = 5;
  s.placement = Placement::loop(1, 4);
  Step bf = make_composite(Op::OVERLAP_B_F, {make_step(Op::BWD, 0, 3), make_step(Op::FWD, 4, 1)});
  Step batch = make_composite(Op::BATCH_SEND_RECV, {make_step(Op::FWD_SEND, 3, 1), make_step(Op::BWD_RECV, 2, 1)});
  s.programs = {{bf, batch, make_step(Op::MPIPE_PARAM_BROADCAST), std::nullopt}};
  TimedSlice a;
  a.rank = 0;
  a.step_index = 0;
  CHECK(slice_name(s, a) == "B0s3|F4s1");
  TimedSlice b = a;
  b.step_index = 1;
  b.sub = 0;
  b.lane = Lane::Send;
  CHECK(slice_name(s, b) == "FS3 s1");
  b.sub = 1;
  b.meta = true;
  CHECK(slice_name(s, b) == "BR2 s1 meta");
  TimedSlice c = a;
  c.step_index = 2;
  CHECK(slice_name(s, c) == "BCAST");
  TimedSlice idle = a;
  idle.step_index = 3;
  CHECK(slice_step(s, idle) == nullptr);
  CHECK(slice_name(s, idle) == "step 3");
}

TEST_CASE("overlapping slices of one lane go on extra threads, so no thread has overlaps") {
  Fabricated f = fabricate(2, 2);
  // Three concurrent sends on rank 0 (a batch's transfers), one after them.
  auto send_at = [&](double a, double b) {
    f.s.programs[0].push_back(make_step(Op::FWD_SEND, 0, 0));
    TimedSlice sl;
    sl.rank = 0;
    sl.step_index = static_cast<int32_t>(f.s.programs[0].size() - 1);
    sl.lane = Lane::Send;
    sl.start_ms = a;
    sl.end_ms = b;
    f.r.slices.push_back(sl);
  };
  send_at(100, 110);
  send_at(101, 105);
  send_at(102, 103);
  send_at(110, 111);  // touches the first one's end: reuses its thread
  const std::vector<int> tid = trace_thread_ids(f.r);
  const size_t n = f.r.slices.size();
  CHECK(tid[n - 4] == 1);
  CHECK(tid[n - 3] == 1 + kTraceLanes);
  CHECK(tid[n - 2] == 1 + 2 * kTraceLanes);
  CHECK(tid[n - 1] == 1);
  ParsedTrace t = parse_trace(chrome_trace_json(f.s, f.r));
  CHECK(check_trace(t, f.r) == "");
  std::set<std::string> names;
  for (const json* e : t.of("M"))
    if ((*e)["name"] == "thread_name" && (*e)["pid"] == 0) names.insert((*e)["args"]["name"].get<std::string>());
  CHECK(names.count("send #2"));
  CHECK(names.count("send #3"));
}

TEST_CASE("a zero-length receive between touching neighbours still binds its flow alone") {
  // Eager sends: a receive whose data already arrived takes no time, and sits exactly where
  // the previous receive ends and the next one starts.
  Schedule s;
  s.name = "eager";
  s.ranks = 2;
  s.stages = 2;
  s.micro_batches = 3;
  s.placement = Placement::loop(2, 2);
  RunRecord r;
  auto add = [&](int rank, Op op, int m, Lane lane, double a, double b) {
    s.programs.resize(2);
    s.programs[static_cast<size_t>(rank)].push_back(make_step(op, m, rank));
    TimedSlice sl;
    sl.rank = rank;
    sl.step_index = static_cast<int32_t>(s.programs[static_cast<size_t>(rank)].size() - 1);
    sl.lane = lane;
    sl.start_ms = a;
    sl.end_ms = b;
    r.slices.push_back(sl);
    return static_cast<int32_t>(r.slices.size() - 1);
  };
  const int32_t s0 = add(0, Op::FWD_SEND, 0, Lane::Send, 0, 5);
  const int32_t s1 = add(0, Op::FWD_SEND, 1, Lane::Send, 5, 5);
  const int32_t s2 = add(0, Op::FWD_SEND, 2, Lane::Send, 5, 9);
  const int32_t r0 = add(1, Op::FWD_RECV, 0, Lane::Recv, 0, 5);
  const int32_t r1 = add(1, Op::FWD_RECV, 1, Lane::Recv, 5, 5);
  const int32_t r2 = add(1, Op::FWD_RECV, 2, Lane::Recv, 5, 9);
  r.flows = {{0, s0, r0}, {1, s1, r1}, {2, s2, r2}};
  r.makespan_ms = 9;
  ParsedTrace t = parse_trace(chrome_trace_json(s, r));
  CHECK(check_trace(t, r) == "");
  const std::vector<int> tid = trace_thread_ids(r);
  CHECK(tid[static_cast<size_t>(r0)] == 2);
  CHECK(tid[static_cast<size_t>(r2)] == 2);  // the long slices keep the lane's main thread
  CHECK(tid[static_cast<size_t>(r1)] == 2 + kTraceLanes);
}

TEST_CASE("memory is a counter track per rank, in time order") {
  Fabricated f = fabricate(3, 4);
  ParsedTrace t = parse_trace(chrome_trace_json(f.s, f.r));
  std::map<int, std::vector<std::pair<double, int64_t>>> counters;
  for (const json* e : t.of("C")) {
    CHECK((*e)["name"] == "memory");
    counters[(*e)["pid"].get<int>()].push_back({(*e)["ts"].get<double>(), (*e)["args"]["bytes"].get<int64_t>()});
  }
  REQUIRE(counters.size() == 3);
  for (const auto& [rank, v] : counters) {
    CHECK(v.size() == 1 + 2 * 4);
    CHECK(std::is_sorted(v.begin(), v.end(), [](auto& a, auto& b) { return a.first < b.first; }));
    int64_t peak = 0;
    for (auto& p : v) peak = std::max(peak, p.second);
    CHECK(peak == int64_t{1 << 20} * (rank + 1) * 4);
    CHECK(v.back().second == 0);
  }
}

TEST_CASE("counter samples at one timestamp keep their peak and final value, repeats are dropped") {
  Fabricated f = fabricate(2, 1);
  f.r.memory = {{0, 0.0, 0},  {0, 1.0, 10}, {0, 1.0, 30}, {0, 1.0, 20}, {0, 2.0, 20},
                {0, 3.0, 5},  {0, 3.0, 5},  {1, 1.0, 7},  {1, 1.0, 9},  {0, 4.0, 0}};
  std::vector<std::tuple<int, double, int64_t>> got;
  const ParsedTrace t = parse_trace(chrome_trace_json(f.s, f.r));
  for (const json* e : t.of("C"))
    got.emplace_back((*e)["pid"].get<int>(), (*e)["ts"].get<double>(), (*e)["args"]["bytes"].get<int64_t>());
  const std::vector<std::tuple<int, double, int64_t>> want = {
      {0, 0.0, 0}, {0, 1000.0, 30}, {0, 1000.0, 20}, {0, 3000.0, 5}, {0, 4000.0, 0}, {1, 1000.0, 9}};
  CHECK(got == want);
}

TEST_CASE("violations become instant events at their steps, with their message intact") {
  Fabricated f = fabricate(3, 2);
  ParsedTrace t = parse_trace(chrome_trace_json(f.s, f.r));
  auto instants = t.of("i");
  REQUIRE(instants.size() == 2);
  const json& at_step = *instants[0];
  CHECK(at_step["name"] == std::string(to_string(ViolationKind::Memory)));
  CHECK(at_step["s"] == "t");
  CHECK(at_step["pid"] == 0);
  CHECK(at_step["tid"] == 0);
  CHECK(at_step["ts"].get<double>() == Approx(0.0));
  CHECK(at_step["args"]["message"] == kTrickyMessage);
  CHECK(at_step["args"]["step_index"] == 0);
  const json& rank_wide = *instants[1];
  CHECK(rank_wide["s"] == "p");
  CHECK(rank_wide["pid"] == 2);
}

TEST_CASE("the per-rank variant holds one rank's events and distributedInfo for HTA") {
  Fabricated f = fabricate(3, 4);
  for (int rank = 0; rank < 3; ++rank) {
    TraceOptions o;
    o.only_rank = rank;
    ParsedTrace t = parse_trace(chrome_trace_json(f.s, f.r, o));
    INFO("rank " << rank);
    REQUIRE(t.doc.contains("distributedInfo"));
    CHECK(t.doc["distributedInfo"]["rank"] == rank);
    CHECK(t.doc["otherData"]["label"] == "simulated");
    size_t slices = 0;
    for (const auto& e : t.doc["traceEvents"]) {
      CHECK(e["pid"] == rank);
      if (e["ph"] == "X") ++slices;
    }
    size_t expected = 0;
    for (const auto& sl : f.r.slices) expected += sl.rank == rank;
    CHECK(slices == expected);
    CHECK(check_trace(t, f.r) == "");  // no dangling flow ends (cross-rank flows are left out)
    CHECK(t.of("s").empty());
    CHECK_FALSE(t.of("C").empty());
  }
}

TEST_CASE("the same result gives byte-identical traces and pictures") {
  Fabricated f = fabricate(4, 6);
  CHECK(chrome_trace_json(f.s, f.r) == chrome_trace_json(f.s, f.r));
  TraceOptions o;
  o.only_rank = 1;
  CHECK(chrome_trace_json(f.s, f.r, o) == chrome_trace_json(f.s, f.r, o));
  CHECK(svg_timeline(f.s, f.r) == svg_timeline(f.s, f.r));
  // A copy (different addresses, same values) too.
  Fabricated g = fabricate(4, 6);
  CHECK(chrome_trace_json(f.s, f.r) == chrome_trace_json(g.s, g.r));
}

TEST_CASE("names and labels with quotes, backslashes and control characters stay valid JSON") {
  Fabricated f = fabricate(2, 2);
  f.s.name = "odd \"name\" \\ with\ttab\x01 and ünïcode";
  f.r.provenance.label = "a\nb";
  json d = json::parse(chrome_trace_json(f.s, f.r));
  CHECK(d["otherData"]["schedule"] == f.s.name);
  CHECK(d["otherData"]["label"] == "a\nb");
}

TEST_CASE("an empty result still gives a loadable trace and picture") {
  Schedule s;
  s.name = "empty";
  s.ranks = 2;
  s.stages = 2;
  s.placement = Placement::loop(2, 2);
  s.programs.resize(2);
  RunRecord r;
  ParsedTrace t = parse_trace(chrome_trace_json(s, r));
  CHECK(check_trace(t, r) == "");
  CHECK(t.of("M").size() == 2 * 4);  // process name and sort index, compute thread name and sort index
  const std::string svg = svg_timeline(s, r);
  CHECK(check_xml(svg) == "");
  CHECK(count(svg, ">rank 0<") == 1);
  CHECK(count(svg, ">rank 1<") == 1);
}

// ---- SVG ------------------------------------------------------------------------------------------------

TEST_CASE("the XML checker of these tests rejects broken documents") {
  CHECK(check_xml("<svg><g></svg>") != "");
  CHECK(check_xml("<svg a=\"1\" a=\"2\"/>") != "");
  CHECK(check_xml("<svg a=1/>") != "");
  CHECK(check_xml("<svg><text>a < b</text></svg>") != "");
  CHECK(check_xml("<svg><text>a &b c</text></svg>") != "");
  CHECK(check_xml("<svg/><svg/>") != "");
  CHECK(check_xml("<?xml version=\"1.0\"?>\n<svg a='x'><g/><!-- c --><text>&lt;&#8212;</text></svg>\n") == "");
}

TEST_CASE("the SVG timeline is a standalone, well-formed picture with a row per rank") {
  Fabricated f = fabricate(4, 6);
  f.s.name = "gpipe <P=4> & \"M=6\"";
  const std::string svg = svg_timeline(f.s, f.r);
  CHECK(check_xml(svg) == "");
  CHECK(svg.rfind("<?xml", 0) == 0);
  CHECK(svg.find("viewBox=\"0 0 ") != std::string::npos);
  CHECK(svg.find("<style>") != std::string::npos);
  CHECK(svg.find("width=\"") != std::string::npos);
  CHECK(svg.find("height=\"") != std::string::npos);
  CHECK(svg.find("href") == std::string::npos);  // nothing external
  CHECK(svg.find("@import") == std::string::npos);
  for (int rank = 0; rank < 4; ++rank) CHECK(count(svg, ">rank " + std::to_string(rank) + "<") == 1);
  CHECK(count(svg, ">rank 4<") == 0);
  // The title gives the makespan, escaped.
  CHECK(svg.find("gpipe &lt;P=4&gt; &amp; &quot;M=6&quot;") != std::string::npos);
  char makespan[32];
  std::snprintf(makespan, sizeof makespan, "makespan %.3f ms", f.r.makespan_ms);
  CHECK(svg.find(makespan) != std::string::npos);
  // Forward and backward colours, micro-batch labels, memory curves with their peaks, arrows.
  CHECK(svg.find("class=\"f\"") != std::string::npos);
  CHECK(svg.find("class=\"b\"") != std::string::npos);
  CHECK(svg.find("class=\"lb\"") != std::string::npos);
  CHECK(count(svg, "<polyline class=\"mem\"") == 4);
  CHECK(count(svg, "<text class=\"pk\"") == 4);
  CHECK(svg.find(">peak 24.0 MiB<") != std::string::npos);  // rank 3: 4 MiB x 6 micro-batches
  CHECK(count(svg, "<line class=\"ar\"") == f.r.flows.size() + 1);  // + the legend's
  CHECK(svg.find(">forward<") != std::string::npos);
  CHECK(svg.find(">backward<") != std::string::npos);
  CHECK(svg.find("class=\"vi\"") != std::string::npos);  // the violation marker
  // The violation message is escaped in its tooltip.
  CHECK(svg.find("peak &quot;9 GiB&quot; &gt; budget &lt;8 GiB&gt; &amp;") != std::string::npos);
}

TEST_CASE("every rank's memory strip is on one scale, topped by the largest peak or the budget, with the "
          "budget drawn") {
  Fabricated f = fabricate(4, 6);
  std::vector<int64_t> peak(4, 0);
  for (const auto& m : f.r.memory) peak[static_cast<size_t>(m.rank)] = std::max(peak[static_cast<size_t>(m.rank)], m.bytes);
  const int64_t top = *std::max_element(peak.begin(), peak.end());
  REQUIRE(peak[0] < top);  // ranks differ, else one scale and per-rank scales look alike
  // The y of each row's strip bottom ("mb"), each peak dot ("pkd") and each budget line ("bud").
  const auto ys = [](const std::string& svg, const std::string& prefix) {
    std::vector<double> out;
    for (size_t at = svg.find(prefix); at != std::string::npos; at = svg.find(prefix, at + 1)) {
      const size_t y = svg.find(prefix.find("circle") != std::string::npos ? "cy=\"" : "y1=\"", at);
      out.push_back(std::strtod(svg.c_str() + svg.find('"', y) + 1, nullptr));
    }
    return out;
  };
  for (const double budget_over_top : {0.0, 2.0}) {
    CAPTURE(budget_over_top);
    SvgOptions o;
    if (budget_over_top > 0) o.memory_budget = static_cast<int64_t>(budget_over_top * static_cast<double>(top));
    const std::string svg = svg_timeline(f.s, f.r, o);
    CHECK(check_xml(svg) == "");
    const std::vector<double> bottom = ys(svg, "<line class=\"mb\""), dot = ys(svg, "<circle class=\"pkd\""),
                              bud = ys(svg, "<line class=\"bud\"");
    REQUIRE(bottom.size() == 4);
    REQUIRE(dot.size() == 4);
    // Heights over the strip's bottom, as fractions of the tallest: each rank's peak over the scale's top.
    const double scale_top = o.memory_budget ? static_cast<double>(*o.memory_budget) : static_cast<double>(top);
    double usable = 0;
    for (size_t r = 0; r < 4; ++r)
      if (peak[r] == top) usable = (bottom[r] - dot[r]) * scale_top / static_cast<double>(top);
    REQUIRE(usable > 0);
    for (size_t r = 0; r < 4; ++r) {
      CAPTURE(r);
      CHECK(bottom[r] - dot[r] == Approx(usable * static_cast<double>(peak[r]) / scale_top).margin(0.02));
    }
    if (o.memory_budget) {
      REQUIRE(bud.size() == 5);  // one per rank's strip, then the legend's
      for (size_t r = 0; r < 4; ++r) CHECK(bottom[r] - bud[r] == Approx(usable).margin(0.02));
      CHECK(svg.find("memory budget 48.0 MiB (usable capacity)") != std::string::npos);
      CHECK(svg.find("% of the budget") != std::string::npos);
    } else {
      CHECK(bud.empty());
    }
  }
}

TEST_CASE("the SVG leaves out arrows above max_arrows and the memory curve on request") {
  Fabricated f = fabricate(3, 4);
  SvgOptions o;
  o.max_arrows = 2;
  o.memory = false;
  const std::string svg = svg_timeline(f.s, f.r, o);
  CHECK(check_xml(svg) == "");
  CHECK(count(svg, "<line class=\"ar\"") == 0);
  CHECK(count(svg, "<polyline") == 0);
  CHECK(svg.find("arrows left out") != std::string::npos);
}

TEST_CASE("a large schedule's SVG merges sub-pixel slices and stays small") {
  Fabricated f = fabricate(8, 4000);  // ~190,000 slices
  const std::string svg = svg_timeline(f.s, f.r);
  CHECK(check_xml(svg) == "");
  for (int rank = 0; rank < 8; ++rank) CHECK(count(svg, ">rank " + std::to_string(rank) + "<") == 1);
  CHECK(svg.size() < 4u * 1024 * 1024);
  CHECK(count(svg, "<rect") < 8u * 4 * 1600);  // O(width x lanes), not O(slices)
  CHECK(svg.find("<title>F") == std::string::npos);  // no per-slice tooltips at this size
}

TEST_CASE("xmllint agrees that the SVG is well-formed") {
  // tools/setup installs xmllint (libxml2-utils): a missing one fails, it is not skipped.
  REQUIRE(std::system("command -v xmllint >/dev/null 2>&1") == 0);
  Fabricated f = fabricate(3, 5);
  f.s.name = "a < b & c";
  const std::string path = "test_traces_timeline.svg";
  {
    std::ofstream out(path, std::ios::binary);
    out << svg_timeline(f.s, f.r);
  }
  CHECK(std::system(("xmllint --noout " + path).c_str()) == 0);
  std::remove(path.c_str());
}

// ---- size and speed ------------------------------------------------------------------------------------

TEST_CASE("a 10^6-slice result serializes to one trace with an event per slice, two per flow and one per "
          "memory sample, and to an SVG whose size follows the picture, not the slice count") {
  // Counts only: how long this takes is bench_trace's (BM_ChromeTrace, BM_SvgTimeline at M = 10870).
  Fabricated f = fabricate(16, 10870);  // 10^6 slices, ~3x10^5 flows, ~3x10^5 memory samples
  REQUIRE(f.r.slices.size() >= 1000000);
  const std::string text = chrome_trace_json(f.s, f.r);
  CHECK(text.rfind("{\"traceEvents\":[", 0) == 0);
  CHECK(text.substr(text.size() - 3) == "}}\n");
  CHECK(count(text, "\"ph\":\"X\"") == f.r.slices.size());
  CHECK(count(text, "\"ph\":\"s\"") == f.r.flows.size());
  CHECK(count(text, "\"ph\":\"f\"") == f.r.flows.size());
  // Every fabricated sample changes its rank's value at a time of its own: none is redundant.
  CHECK(count(text, "\"ph\":\"C\"") == f.r.memory.size());
  CHECK(text.find("\"flows_left_out\":0") != std::string::npos);
  // The file grows with the events and nothing else: 138 bytes an event when this was written
  // (276 MB for 2.0 x 10^6 events); 200 leaves room for longer names, not for a second copy.
  const size_t events = f.r.slices.size() + 2 * f.r.flows.size() + f.r.memory.size();
  CHECK(text.size() < 200 * events);
  // The SVG merges sub-pixel slices: 0.29 MiB and 112 rectangles here, O(width x lanes).
  const std::string svg = svg_timeline(f.s, f.r);
  CHECK(check_xml(svg) == "");
  for (int rank = 0; rank < 16; ++rank) CHECK(count(svg, ">rank " + std::to_string(rank) + "<") == 1);
  CHECK(svg.size() < 1u << 20);
  CHECK(count(svg, "<rect") < 16u * 4 * 1600);
  CHECK(svg.find("<title>F") == std::string::npos);  // no per-slice tooltips at this size
}

// ---- a real simulation -----------------------------------------------------------------------------------

TEST_CASE("simulated schedules give traces whose flows bind and whose threads never overlap") {
  struct Case {
    const char* family;
    int pp, vpp, micro;
    bool overlap_p2p, eager;
  };
  // overlap_p2p and eager leave several transfers of one lane in flight: extra threads.
  const Case cases[] = {
      {"1f1b", 4, 1, 8, false, false},          {"interleaved-1f1b", 4, 2, 8, true, false},
      {"zb-h1", 4, 1, 8, false, true},          {"dualpipev", 4, 2, 8, false, false},
      {"mpipe-transpose", 4, 1, 8, true, false},
  };
  for (const Case& c : cases) {
    INFO(c.family << " P=" << c.pp << " V=" << c.vpp << " M=" << c.micro << " overlap_p2p=" << c.overlap_p2p
                  << " eager=" << c.eager);
    GenerateOptions g;
    g.pp = c.pp;
    g.vpp = c.vpp;
    g.micro = c.micro;
    Schedule s = generate(c.family, g);
    SimOptions so;
    so.check.overlap_p2p = c.overlap_p2p;
    if (c.eager) so.check.comm = CommMode::Eager;
    RunRecord r = simulate(s, default_cost_model(s.stages), so);
    REQUIRE(r.completed);
    REQUIRE(!r.slices.empty());  // a simulation that records nothing has no trace to check
    ParsedTrace t = parse_trace(chrome_trace_json(s, r));
    CHECK(check_trace(t, r) == "");
    const ppsched::testing::TraceCheck strict = ppsched::testing::validate_trace(chrome_trace_json(s, r));
    INFO(strict.summary());
    CHECK(strict.problem_count() == 0);
    CHECK(t.of("X").size() == r.slices.size());
    CHECK(t.of("s").size() == r.flows.size());
    CHECK(t.of("f").size() == r.flows.size());
    // Counters: no more than the samples, and per rank the same peak and the same final value.
    CHECK(t.of("C").size() <= r.memory.size());
    std::map<int, std::pair<int64_t, int64_t>> counter_peak_last, sample_peak_last;
    for (const json* e : t.of("C")) {
      auto& pl = counter_peak_last[(*e)["pid"].get<int>()];
      pl.first = std::max(pl.first, (*e)["args"]["bytes"].get<int64_t>());
      pl.second = (*e)["args"]["bytes"].get<int64_t>();
    }
    std::vector<MemorySample> by_time = r.memory;
    std::stable_sort(by_time.begin(), by_time.end(),
                     [](const MemorySample& a, const MemorySample& b) { return a.time_ms < b.time_ms; });
    for (const MemorySample& m : by_time) {
      auto& pl = sample_peak_last[m.rank];
      pl.first = std::max(pl.first, m.bytes);
      pl.second = m.bytes;
    }
    CHECK(counter_peak_last == sample_peak_last);
    std::set<int> pids;
    for (const json* e : t.of("M"))
      if ((*e)["name"] == "process_name") pids.insert((*e)["pid"].get<int>());
    CHECK(pids.size() == static_cast<size_t>(c.pp));
    for (int rank = 0; rank < c.pp; ++rank) {
      TraceOptions o;
      o.only_rank = rank;
      ParsedTrace one = parse_trace(chrome_trace_json(s, r, o));
      CHECK(one.doc["distributedInfo"]["rank"] == rank);
      CHECK(check_trace(one, r) == "");
    }
    const std::string svg = svg_timeline(s, r);
    CHECK(check_xml(svg) == "");
    for (int rank = 0; rank < c.pp; ++rank) CHECK(count(svg, ">rank " + std::to_string(rank) + "<") == 1);
    // Same inputs, same bytes (a second simulation included).
    RunRecord again = simulate(s, default_cost_model(s.stages), so);
    CHECK(chrome_trace_json(s, r) == chrome_trace_json(s, again));
    CHECK(svg == svg_timeline(s, again));
  }
}

// ---- the strict validator (tests/support/trace_validator.hpp) ------------------------------------

namespace {

using ppsched::testing::TraceCheck;
using ppsched::testing::validate_trace;

// The schedules the quick start (tools/quickstart) generates, traces and shows: P=4, M=8.
std::vector<std::pair<std::string, GenerateOptions>> quickstart_schedules() {
  auto opts = [](int vpp) {
    GenerateOptions g;
    g.pp = 4;
    g.micro = 8;
    g.vpp = vpp;
    return g;
  };
  std::vector<std::pair<std::string, GenerateOptions>> v = {
      {"gpipe", opts(1)},         {"1f1b", opts(1)}, {"interleaved-1f1b", opts(2)}, {"looped-bfs", opts(2)},
      {"zb-h1", opts(1)},         {"zbv", opts(2)},  {"dualpipev", opts(2)},
  };
  GenerateOptions full = opts(2), min = opts(2), owner = opts(2);
  min.overflow = Overflow::Min;
  owner.owner_backward = true;
  v.push_back({"mpipe-transpose", full});
  v.push_back({"mpipe-transpose", min});
  v.push_back({"mpipe-transpose", owner});
  return v;
}

std::string problems_of(const TraceCheck& c) {
  std::string s = c.summary();
  for (const auto& p : c.problems) s += "\n  " + p;
  return s;
}

// A minimal trace around the given events: one process with a named thread 0 and 1.
std::string wrap_events(const std::string& events) {
  return std::string("{\"traceEvents\":[") +
         "{\"name\":\"process_name\",\"cat\":\"__metadata\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"p\"}}," +
         "{\"name\":\"thread_name\",\"cat\":\"__metadata\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"a\"}}," +
         "{\"name\":\"thread_name\",\"cat\":\"__metadata\",\"ph\":\"M\",\"pid\":0,\"tid\":1,\"args\":{\"name\":\"b\"}}" +
         (events.empty() ? "" : ",") + events + "]}";
}
const char* kSliceA = R"({"name":"a","cat":"c","ph":"X","pid":0,"tid":0,"ts":10,"dur":10})";
const char* kSliceB = R"({"name":"b","cat":"c","ph":"X","pid":0,"tid":1,"ts":0,"dur":30})";

}  // namespace

TEST_CASE("the trace validator accepts a clean trace and counts each kind of problem it is built to find") {
  const std::string flow_ok = std::string(kSliceA) + "," + kSliceB +
                              R"(,{"name":"m","cat":"p2p","ph":"s","id":1,"pid":0,"tid":0,"ts":11})"
                              R"(,{"name":"m","cat":"p2p","ph":"f","bp":"e","id":1,"pid":0,"tid":1,"ts":29})";
  TraceCheck clean = validate_trace(wrap_events(flow_ok));
  INFO(problems_of(clean));
  CHECK(clean.parsed);
  CHECK(clean.problem_count() == 0);
  CHECK(clean.slices == 2);
  CHECK(clean.flows == 1);

  auto one = [](const std::string& events, size_t TraceCheck::*kind) {
    TraceCheck c = validate_trace(wrap_events(events));
    INFO(events << "\n" << problems_of(c));
    CHECK(c.*kind == 1);
    CHECK(c.problem_count() == 1);
  };
  // An end read before its start: Perfetto drops it.
  one(std::string(kSliceA) + "," + kSliceB +
          R"(,{"name":"m","cat":"p2p","ph":"s","id":1,"pid":0,"tid":0,"ts":19})"
          R"(,{"name":"m","cat":"p2p","ph":"f","bp":"e","id":1,"pid":0,"tid":1,"ts":5})",
      &TraceCheck::flows_backwards);
  // A flow end on a slice boundary (which slice?) and one outside every slice.
  one(std::string(kSliceA) + "," + kSliceB +
          R"(,{"name":"m","cat":"p2p","ph":"s","id":1,"pid":0,"tid":0,"ts":10})"
          R"(,{"name":"m","cat":"p2p","ph":"f","bp":"e","id":1,"pid":0,"tid":1,"ts":29})",
      &TraceCheck::flows_unbound);
  one(std::string(kSliceA) + "," + kSliceB +
          R"(,{"name":"m","cat":"p2p","ph":"s","id":1,"pid":0,"tid":0,"ts":11})"
          R"(,{"name":"m","cat":"p2p","ph":"f","bp":"e","id":1,"pid":0,"tid":1,"ts":31})",
      &TraceCheck::flows_unbound);
  // A start without an end; an end that would bind to the next slice.
  one(std::string(kSliceA) + R"(,{"name":"m","cat":"p2p","ph":"s","id":1,"pid":0,"tid":0,"ts":11})",
      &TraceCheck::flows_unpaired);
  one(std::string(kSliceA) + "," + kSliceB +
          R"(,{"name":"m","cat":"p2p","ph":"s","id":1,"pid":0,"tid":0,"ts":11})"
          R"(,{"name":"m","cat":"p2p","ph":"f","id":1,"pid":0,"tid":1,"ts":29})",
      &TraceCheck::flows_unpaired);
  // Partly overlapping slices of one thread; nesting is fine, touching is fine.
  one(std::string(kSliceA) + R"(,{"name":"o","cat":"c","ph":"X","pid":0,"tid":0,"ts":15,"dur":10})",
      &TraceCheck::slice_overlaps);
  CHECK(validate_trace(wrap_events(std::string(kSliceA) + R"(,{"name":"n","cat":"c","ph":"X","pid":0,"tid":0,"ts":12,"dur":3})"
                                                             R"(,{"name":"t","cat":"c","ph":"X","pid":0,"tid":0,"ts":20,"dur":1})"))
            .problem_count() == 0);
  // The double artefact of ts + dur, and a time below a nanosecond.
  one(R"({"name":"x","cat":"c","ph":"X","pid":0,"tid":0,"ts":624013.1780000001,"dur":1})", &TraceCheck::inexact_times);
  one(R"({"name":"x","cat":"c","ph":"X","pid":0,"tid":0,"ts":1e3,"dur":1})", &TraceCheck::inexact_times);
  CHECK(validate_trace(wrap_events(R"({"name":"x","cat":"c","ph":"X","pid":0,"tid":0,"ts":624013.178,"dur":0.5})")).problem_count() == 0);
  // No cat (a counter, as ppsched wrote them), no pid, no metadata for a thread.
  one(R"({"name":"memory","ph":"C","pid":0,"tid":0,"ts":1,"args":{"bytes":5}})", &TraceCheck::missing_cat);
  one(R"({"name":"x","cat":"c","ph":"X","tid":0,"ts":1,"dur":1})", &TraceCheck::missing_fields);
  one(R"({"name":"x","cat":"c","ph":"X","pid":0,"tid":7,"ts":1,"dur":1})", &TraceCheck::missing_metadata);
  CHECK_FALSE(validate_trace("{\"traceEvents\": [").parsed);
}

TEST_CASE("every trace the quick start writes passes the strict validator, one file and per rank") {
  for (const auto& [family, g] : quickstart_schedules()) {
    INFO(family << " V=" << g.vpp << " overflow=" << to_string(g.overflow) << " owner_backward=" << g.owner_backward);
    Schedule s = generate(family, g);
    SimOptions so;
    so.record_trace = true;
    RunRecord r = simulate(s, default_cost_model(s.stages), so);
    REQUIRE_FALSE(r.flows.empty());
    TraceCheck c = validate_trace(chrome_trace_json(s, r));
    INFO(problems_of(c));
    CHECK(c.problem_count() == 0);
    CHECK(c.slices == r.slices.size());
    CHECK(c.flows == r.flows.size());  // none left out
    for (int rank = 0; rank < s.ranks; ++rank) {
      TraceOptions o;
      o.only_rank = rank;
      TraceCheck one = validate_trace(chrome_trace_json(s, r, o));
      INFO("rank " << rank << ": " << problems_of(one));
      CHECK(one.problem_count() == 0);
    }
  }
}

TEST_CASE("a flow starts where its payload leaves the send and ends where it arrives at the receive") {
  for (const auto& [family, g] : quickstart_schedules()) {
    INFO(family);
    Schedule s = generate(family, g);
    SimOptions so;
    so.record_trace = true;
    RunRecord r = simulate(s, default_cost_model(s.stages), so);
    ParsedTrace t = parse_trace(chrome_trace_json(s, r));
    CHECK(check_trace(t, r) == "");
    std::map<int64_t, const json*> start, end;
    for (const json* e : t.of("s")) start[(*e)["id"].get<int64_t>()] = e;
    for (const json* e : t.of("f")) end[(*e)["id"].get<int64_t>()] = e;
    REQUIRE(start.size() == r.flows.size());
    for (size_t k = 0; k < r.flows.size(); ++k) {
      const MessageFlow& f = r.flows[k];
      REQUIRE(std::isfinite(f.leave_ms));
      REQUIRE(std::isfinite(f.arrive_ms));
      const TimedSlice& a = r.slices[static_cast<size_t>(f.send_slice)];
      const TimedSlice& b = r.slices[static_cast<size_t>(f.recv_slice)];
      // The engine's times: the payload leaves within its send slice and arrives no later than
      // its receive returns, never before it left.
      CHECK(f.leave_ms >= a.start_ms - 1e-9);
      CHECK(f.leave_ms <= a.end_ms + 1e-9);
      CHECK(f.arrive_ms >= f.leave_ms);
      CHECK(f.arrive_ms <= b.end_ms + 1e-9);
      // The trace's ends: at those instants, moved at most 1 ns to lie strictly inside the
      // slices (or to the receive's start, when the payload arrived before it was posted).
      const int64_t s_ts = ns((*start.at(static_cast<int64_t>(k) + 1))["ts"]);
      const int64_t f_ts = ns((*end.at(static_cast<int64_t>(k) + 1))["ts"]);
      const int64_t leave = std::llround(f.leave_ms * 1e6), arrive = std::llround(f.arrive_ms * 1e6);
      const int64_t recv_start = std::llround(b.start_ms * 1e6);
      CHECK(s_ts <= f_ts);
      CHECK(std::llabs(s_ts - leave) <= 1);
      CHECK((std::llabs(f_ts - arrive) <= 1 || (arrive <= recv_start && f_ts == recv_start + 1)));
    }
  }
}

TEST_CASE("an early-posted receive no longer makes its flow end before it starts") {
  // The issue's shape: a long receive posted early (midpoint 5.5 ms) for a short send late in
  // it (midpoint 10.5 ms). Without the engine's times the trace takes the send's start and the
  // receive's end.
  Schedule s;
  s.name = "early-recv";
  s.ranks = 2;
  s.stages = 2;
  s.micro_batches = 2;
  s.placement = Placement::loop(2, 2);
  s.programs = {{make_step(Op::FWD_SEND, 0, 0), make_step(Op::FWD_SEND, 1, 0)},
                {make_step(Op::FWD_RECV, 0, 1), make_step(Op::FWD_RECV, 1, 1)}};
  RunRecord r;
  auto slice = [&](int rank, int index, Lane lane, double a, double b) {
    TimedSlice sl;
    sl.rank = rank;
    sl.step_index = index;
    sl.lane = lane;
    sl.start_ms = a;
    sl.end_ms = b;
    r.slices.push_back(sl);
    return static_cast<int32_t>(r.slices.size() - 1);
  };
  const int32_t s0 = slice(0, 0, Lane::Send, 10, 11), r0 = slice(1, 0, Lane::Recv, 0, 11);
  // A second pair whose receive (say, clocks of two hosts) ended before its send began.
  const int32_t s1 = slice(0, 1, Lane::Send, 20, 21), r1 = slice(1, 1, Lane::Recv, 12, 19);
  r.flows = {{0, s0, r0}, {1, s1, r1}};
  r.makespan_ms = 21;
  const std::string text = chrome_trace_json(s, r);
  ParsedTrace t = parse_trace(text);
  REQUIRE(t.of("s").size() == 1);
  CHECK(ns((*t.of("s")[0])["ts"]) == 10000001);  // 1 ns into the send
  CHECK(ns((*t.of("f")[0])["ts"]) == 10999999);  // 1 ns before the receive returns
  CHECK(t.doc["otherData"]["flows_left_out"] == 1);
  TraceCheck c = validate_trace(text);
  INFO(problems_of(c));
  CHECK(c.problem_count() == 0);
}

TEST_CASE("times are whole nanoseconds in fixed point, so abutting slices touch and never overlap") {
  Schedule s;
  s.name = "abutting";
  s.ranks = 1;
  s.stages = 1;
  s.micro_batches = 3;
  s.placement = Placement::loop(1, 1);
  RunRecord r;
  // Times whose doubles are not exact: 624.013178 ms, then slices that abut at sums of
  // tenths (0.1 + 0.2 != 0.3 in binary).
  const double marks[] = {624.013178 - 0.0001, 624.013178, 624.013178 + 0.1 + 0.2, 624.013178 + 0.3 + 0.1};
  for (int k = 0; k < 3; ++k) {
    s.programs.resize(1);
    s.programs[0].push_back(make_step(Op::FWD, k, 0));
    TimedSlice sl;
    sl.rank = 0;
    sl.step_index = k;
    sl.start_ms = marks[k];
    sl.end_ms = marks[k + 1];
    r.slices.push_back(sl);
  }
  const std::string text = chrome_trace_json(s, r);
  CHECK(text.find("\"ts\":624013.178,") != std::string::npos);
  CHECK(text.find("0000001") == std::string::npos);
  CHECK(text.find("9999999") == std::string::npos);
  TraceCheck c = validate_trace(text);
  INFO(problems_of(c));
  CHECK(c.problem_count() == 0);
  ParsedTrace t = parse_trace(text);
  const auto& v = t.slices.at({0, 0});
  REQUIRE(v.size() == 3);
  CHECK(v[0].end == v[1].ts);
  CHECK(v[1].end == v[2].ts);
}

TEST_CASE("every event carries a cat, metadata and counters included") {
  Fabricated f = fabricate(3, 4);
  ParsedTrace t = parse_trace(chrome_trace_json(f.s, f.r));
  for (const auto& e : t.doc["traceEvents"]) {
    INFO(e.dump());
    REQUIRE(e.contains("cat"));
    CHECK(e["cat"].is_string());
    CHECK_FALSE(e["cat"].get<std::string>().empty());
  }
  CHECK((*t.of("M").front())["cat"] == "__metadata");
  CHECK((*t.of("C").front())["cat"] == "memory");
}

// ---- the text grid of `ppsched show` -------------------------------------------------------------

TEST_CASE("the grid wraps every line to the width it is given, header and legend included") {
  GenerateOptions g;
  g.pp = 4;
  g.vpp = 2;
  g.micro = 8;
  Schedule s = generate("mpipe-transpose", g);  // long labels, a long header and legend
  for (int width : {40, 60, 80, 130}) {
    GridOptions o;
    o.width = width;
    const std::string text = render_grid(s, o);
    INFO("width " << width << "\n" << text);
    size_t lines = 0, longest = 0, widest_label = 0;
    for (size_t a = 0, b; a < text.size(); a = b + 1) {
      b = text.find('\n', a);
      longest = std::max(longest, b - a);
      ++lines;
    }
    for (const auto& p : s.programs)
      for (const auto& slot : p)
        if (slot) widest_label = std::max(widest_label, short_label(*slot).size());
    REQUIRE(widest_label + 5 <= static_cast<size_t>(width));  // so every line can fit
    CHECK(longest <= static_cast<size_t>(width));
    // Wrapping loses nothing: rank 0's rows, read in order, are its program.
    std::vector<std::string> want, got;
    for (const auto& slot : s.programs[0]) want.push_back(slot ? short_label(*slot) : ".");
    for (size_t a = 0, b; a < text.size(); a = b + 1) {
      b = text.find('\n', a);
      const std::string line = text.substr(a, b - a);
      if (line.rfind("r0 | ", 0) != 0) continue;
      std::istringstream cells(line.substr(5));
      for (std::string c; cells >> c;) got.push_back(c);
    }
    CHECK(got == want);
    if (width == 40) CHECK(lines > 20);
  }
}

TEST_CASE("the compute view keeps each rank's compute steps in program order and nothing else") {
  GenerateOptions g;
  g.pp = 4;
  g.vpp = 2;
  g.micro = 8;
  Schedule s = generate("dualpipev", g);  // OVERLAP composites and split backwards among the P2P steps
  GridOptions o;
  o.compute_only = true;
  o.width = 100000;
  const std::string text = render_grid(s, o);
  INFO(text);
  for (int r = 0; r < s.ranks; ++r) {
    std::vector<std::string> want, got;
    for (const auto& slot : s.programs[static_cast<size_t>(r)])
      if (slot && shown_as_compute(*slot)) want.push_back(short_label(*slot));
    const std::string head = "r" + std::to_string(r) + " | ";
    const size_t at = text.find("\n" + head);
    REQUIRE(at != std::string::npos);
    std::istringstream cells(text.substr(at + 1 + head.size(), text.find('\n', at + 1) - at - 1 - head.size()));
    for (std::string c; cells >> c;) got.push_back(c);
    CHECK(got == want);
    CHECK(std::find(got.begin(), got.end(), ".") == got.end());
  }
  CHECK(text.find("FS") == std::string::npos);
  CHECK(text.find("compute steps only, in program order") != std::string::npos);
}

TEST_CASE("a timeline cell holds the compute step running at the middle of its column") {
  Schedule s;
  s.name = "t";
  s.ranks = 2;
  s.stages = 2;
  s.micro_batches = 2;
  s.placement = Placement::loop(2, 2);
  s.programs = {{make_step(Op::FWD, 0, 0), make_step(Op::FWD, 1, 0)}, {make_step(Op::FWD, 0, 1), make_step(Op::BWD, 0, 1)}};
  RunRecord r;
  r.completed = true;
  r.makespan_ms = 45;
  const auto slice = [](int rank, int index, double a, double b) {
    TimedSlice t;
    t.rank = rank;
    t.step_index = index;
    t.start_ms = a;
    t.end_ms = b;
    return t;
  };
  // Rank 0: one unit from 0, then one unit starting half a unit late: it holds column 1's
  // middle (15) and not column 2's (25, where it ends). Rank 1: the same unit, then two units
  // from 25 (the middles of columns 2 and 3).
  r.slices = {slice(0, 0, 0, 10), slice(0, 1, 15, 25), slice(1, 0, 15, 25), slice(1, 1, 25, 45)};
  CHECK(shortest_compute_ms(s, r) == Approx(10));
  CHECK(timeline_columns(r, 10) == 5);
  CHECK(timeline_columns(r, 15) == 3);  // 45 ms is three columns of 15 exactly, despite rounding
  TimelineGrid g = timeline_grid(s, r, 10);
  CHECK(g.cells[0] == std::vector<std::string>{"F0", "F1", "", "", ""});
  CHECK(g.cells[1] == std::vector<std::string>{"", "F0", "B0", "B0", ""});
  CHECK(g.hidden_steps == 0);
  CHECK(g.compute_steps == 4);
  // A coarser unit hides what covers no middle (20 and 60 ms), and counts it.
  g = timeline_grid(s, r, 40);
  CHECK(g.cells[0] == std::vector<std::string>{"F1", ""});
  CHECK(g.cells[1] == std::vector<std::string>{"F0", ""});
  CHECK(g.hidden_steps == 2);  // rank 0's F0, rank 1's B0
  const std::string text = render_timeline(s, g);
  CHECK(text.find("2 of 4 compute steps are shorter than a column") != std::string::npos);
}

TEST_CASE("a zero-time transfer that no flow can draw forward is left out, counted, and the trace stays valid") {
  // Links priced at zero: a receive posted early ends exactly where its send begins, and the
  // next receive on its thread starts there too, so no end inside the receive can follow a
  // start inside the send. Those flows go, counted; the rest bind and run forward.
  GenerateOptions g;
  g.pp = 4;
  g.vpp = 2;
  g.micro = 8;
  Schedule s = generate("interleaved-1f1b", g);
  CostModel c = default_cost_model(s.stages);
  c.links.intra_node = Link{};
  c.links.inter_node = Link{};
  SimOptions so;
  so.record_trace = true;
  RunRecord r = simulate(s, c, so);
  const std::string text = chrome_trace_json(s, r);
  TraceCheck check = validate_trace(text);
  INFO(problems_of(check));
  CHECK(check.problem_count() == 0);
  const int64_t left_out = json::parse(text)["otherData"]["flows_left_out"].get<int64_t>();
  CHECK(left_out > 0);  // this schedule has such transfers (6 when written)
  CHECK(check.flows + static_cast<size_t>(left_out) == r.flows.size());
}

TEST_CASE("a trace reads back into the record it was written from: slices, flows and provenance") {
  GenerateOptions g;
  g.pp = 4;
  g.vpp = 2;
  g.micro = 8;
  for (const char* family : {"interleaved-1f1b", "zbv", "mpipe-transpose"}) {
    INFO(family);
    const Schedule s = generate(family, g);
    SimOptions so;
    so.check.overlap_p2p = std::string(family) == "zbv";
    RunRecord r = simulate(s, default_cost_model(s.stages), so);
    REQUIRE(r.completed);
    // A measured run's provenance, as the executor fills it.
    r.provenance.source = RunSource::Measured;
    r.provenance.transport = RunTransport::Gloo;
    r.provenance.shared_clock = true;
    r.provenance.mesh = RunMesh{2, s.ranks, "pp,dp", 0, {0, 2, 4, 6}};
    r.provenance.cpu_bind = "auto";
    for (int k = 0; k < s.ranks; ++k) r.provenance.placement.push_back({"node0", {k}, true});
    for (int st = 0; st < s.stages; ++st) r.provenance.layers.push_back({st, {"block" + std::to_string(st)}});
    r.provenance.notes = {"a note"};
    const ReadTrace back = read_chrome_trace(chrome_trace_json(s, r), "t.json");
    const RunProvenance& p = back.record.provenance;
    CHECK(p.source == RunSource::Measured);
    CHECK(p.transport == RunTransport::Gloo);
    CHECK(p.display_label() == "measured (gloo)");
    CHECK(p.schedule == s.name);
    CHECK(p.stages == s.stages);
    CHECK(p.micro_batches == s.micro_batches);
    REQUIRE(p.mode);
    CHECK(p.mode->overlap_p2p == so.check.overlap_p2p);
    CHECK(p.shared_clock);
    REQUIRE(p.mesh);
    CHECK(p.mesh->dp == 2);
    CHECK(p.mesh->order == "pp,dp");
    CHECK(p.mesh->global_ranks == std::vector<int>{0, 2, 4, 6});
    REQUIRE(p.placement.size() == static_cast<size_t>(s.ranks));
    CHECK(p.placement[3].cpus == std::vector<int>{3});
    CHECK(p.cpu_bind == "auto");
    REQUIRE(p.layers.size() == static_cast<size_t>(s.stages));
    CHECK(p.layers[5].layers == std::vector<std::string>{"block5"});
    CHECK(p.notes == std::vector<std::string>{"a note"});
    // Slices in the writer's order (r.slices), to the nanosecond the trace keeps.
    REQUIRE(back.record.slices.size() == r.slices.size());
    REQUIRE(back.steps.size() == r.slices.size());
    for (size_t k = 0; k < r.slices.size(); ++k) {
      const TimedSlice& a = r.slices[k];
      const TimedSlice& b = back.record.slices[k];
      INFO("slice " << k);
      CHECK(b.rank == a.rank);
      CHECK(b.step_index == a.step_index);
      CHECK(b.sub == a.sub);
      CHECK(b.lane == a.lane);
      CHECK(b.meta == a.meta);
      CHECK(b.bytes == a.bytes);
      CHECK(b.start_ms == Approx(a.start_ms).margin(1e-6));
      if (a.end_ms - a.start_ms >= 2e-6) CHECK(b.end_ms == Approx(a.end_ms).margin(1e-6));
      const Step* st = slice_step(s, a);
      REQUIRE(st);
      CHECK(back.steps[k].op == st->op);
      CHECK(back.steps[k].stage == st->stage);
    }
    // Every flow the trace could draw, between the same two slices.
    std::set<std::pair<int, int>> wrote, read;
    for (const auto& f : r.flows) wrote.insert({f.send_slice, f.recv_slice});
    for (const auto& f : back.record.flows) read.insert({f.send_slice, f.recv_slice});
    const int left_out = json::parse(chrome_trace_json(s, r))["otherData"]["flows_left_out"].get<int>();
    CHECK(read.size() + static_cast<size_t>(left_out) == wrote.size());
    for (const auto& pr : read) CHECK(wrote.count(pr) == 1);
    // The record's per-rank summary comes from its slices (the recorder's one definition).
    REQUIRE(back.record.ranks.size() == static_cast<size_t>(s.ranks));
    for (const auto& rs : back.record.ranks) CHECK(rs.bubble_fraction == Approx(rs.idle_ms / back.record.makespan_ms));
  }
}

TEST_CASE("a trace whose otherData says what it cannot hold is refused where it says it") {
  Fabricated f = fabricate(2, 2);
  json d = json::parse(chrome_trace_json(f.s, f.r));
  auto refused = [&](const json& doc) {
    try {
      read_chrome_trace(doc.dump(), "p.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  json bad = d;
  bad["otherData"]["transport"] = "carrier pigeon";
  CHECK_THAT(refused(bad), Catch::Contains("otherData.transport: expected \"gloo\" or \"nccl\""));
  bad = d;
  bad["otherData"]["layers"] = json::array({{{"stage", 9}, {"layers", {"x"}}}});
  CHECK_THAT(refused(bad), Catch::Contains("otherData.layers[0].stage: 9 is not a stage"));
  bad = d;
  bad["otherData"]["split_backward"] = json::array({{{"stage", 9}, {"bwd_ms", 1}, {"bwd_input_ms", 1}, {"bwd_weight_ms", 1}}});
  CHECK_THAT(refused(bad), Catch::Contains("otherData.split_backward[0].stage: 9 is not a stage"));
  bad["otherData"]["split_backward"] = json::array({{{"stage", 1}, {"bwd_ms", 1}, {"bwd_input_ms", -1}, {"bwd_weight_ms", 1}}});
  CHECK_THAT(refused(bad), Catch::Contains("otherData.split_backward[0].bwd_input_ms: expected a time in ms from 0 to 1e9"));
  // Written and read back as it was.
  bad["otherData"]["split_backward"] = json::array({{{"stage", 1}, {"bwd_ms", 2}, {"bwd_input_ms", 1}, {"bwd_weight_ms", 1.5}}});
  CHECK(refused(bad).empty());
  const auto probes = read_chrome_trace(bad.dump(), "p.json").record.provenance.split_backward;
  REQUIRE(probes.size() == 1);
  CHECK(probes[0].stage == 1);
  CHECK(probes[0].bwd_weight_ms == 1.5);
  bad = d;
  bad["otherData"]["mesh"] = {{"shape", {0, 2}}};
  CHECK_THAT(refused(bad), Catch::Contains("otherData.mesh: expected"));
  // A pid the file cannot justify (it would size the record's rank table).
  bad = d;
  for (auto& e : bad["traceEvents"])
    if (e["ph"] == "X") {
      e["pid"] = 2000000000;
      break;
    }
  CHECK_THAT(refused(bad), Catch::Contains("a slice's pid is 2000000000"));
  CHECK(refused(d).empty());
}
