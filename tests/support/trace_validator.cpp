#include "tests/support/trace_validator.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

namespace ppsched::testing {
namespace {

using nlohmann::json;

// Builds the document with nlohmann's own DOM builder and keeps, beside it, the text of every
// event's ts and dur exactly as written (a double would already have rounded it).
class RawTimes {
 public:
  explicit RawTimes(json& root) : dom_(root, false) {}
  std::vector<std::string> ts, dur;  // per event of traceEvents; "" when absent or not a number

  bool null() { return value(""), dom_.null(); }
  bool boolean(bool v) { return value(""), dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return value(std::to_string(v)), dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return value(std::to_string(v)), dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const std::string& s) { return value(s), dom_.number_float(v, s); }
  bool string(std::string& v) { return value(""), dom_.string(v); }
  bool binary(json::binary_t& v) { return value(""), dom_.binary(v); }
  bool start_object(std::size_t n) {
    if (events_depth_ && depth_ == events_depth_) {
      ts.emplace_back();
      dur.emplace_back();
    }
    ++depth_;
    key_.clear();
    return dom_.start_object(n);
  }
  bool end_object() {
    --depth_;
    key_.clear();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    value("");
    if (depth_ == 1 && key_ == "traceEvents" && !events_depth_) events_depth_ = 2;
    ++depth_;
    key_.clear();
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    if (events_depth_ && depth_ < events_depth_) events_depth_ = -1;  // the events array is closed
    return dom_.end_array();
  }
  bool key(std::string& k) {
    key_ = k;
    return dom_.key(k);
  }
  bool parse_error(std::size_t pos, const std::string& token, const nlohmann::detail::exception& e) {
    error = e.what();
    return dom_.parse_error(pos, token, e);
  }
  std::string error;

 private:
  void value(const std::string& text) {
    if (events_depth_ > 0 && depth_ == events_depth_) {  // an element that is not an object
      ts.emplace_back();
      dur.emplace_back();
    }
    if (events_depth_ > 0 && depth_ == events_depth_ + 1 && !ts.empty()) {
      if (key_ == "ts") ts.back() = text;
      if (key_ == "dur") dur.back() = text;
    }
  }
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  int depth_ = 0;
  int events_depth_ = 0;  // depth of the traceEvents array's elements' parent; -1 once closed
  std::string key_;
};

// "624013.178" -> 624013178 ns; nullopt unless the text is -?digits[.digits] with at most three
// non-zero decimals and no exponent.
std::optional<int64_t> exact_ns(const std::string& t) {
  size_t i = 0;
  bool neg = false;
  if (i < t.size() && t[i] == '-') neg = true, ++i;
  if (i >= t.size() || !std::isdigit(static_cast<unsigned char>(t[i]))) return std::nullopt;
  int64_t whole = 0;
  for (; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])); ++i) {
    if (whole > (INT64_MAX / 1000 - 9) / 10) return std::nullopt;
    whole = whole * 10 + (t[i] - '0');
  }
  int64_t frac = 0;
  int digits = 0;
  if (i < t.size() && t[i] == '.') {
    ++i;
    if (i >= t.size()) return std::nullopt;
    for (; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])); ++i, ++digits) {
      if (digits < 3) frac = frac * 10 + (t[i] - '0');
      else if (t[i] != '0') return std::nullopt;  // below a nanosecond
    }
  }
  if (i != t.size()) return std::nullopt;  // an exponent or junk
  for (; digits < 3; ++digits) frac *= 10;
  const int64_t v = whole * 1000 + frac;
  return neg ? -v : v;
}

std::string raw(const std::vector<std::string>& v, size_t i) { return i < v.size() ? v[i] : std::string(); }

struct Slice {
  int64_t ts, end;
  size_t event;
};

std::string where(size_t event, const json& e) {
  std::string s = "event " + std::to_string(event);
  if (e.is_object() && e.contains("ph") && e["ph"].is_string()) s += " (ph " + e["ph"].get<std::string>() + ")";
  if (e.is_object() && e.contains("name") && e["name"].is_string()) s += " '" + e["name"].get<std::string>() + "'";
  return s;
}

}  // namespace

std::string TraceCheck::summary() const {
  return std::string(parsed ? "" : "NOT PARSED; ") + std::to_string(events) + " events (" + std::to_string(slices) +
         " slices, " + std::to_string(flows) + " flows, " + std::to_string(counters) + " counters, " +
         std::to_string(metadata) + " metadata): missing_fields " + std::to_string(missing_fields) + ", missing_cat " +
         std::to_string(missing_cat) + ", inexact_times " + std::to_string(inexact_times) + ", slice_overlaps " +
         std::to_string(slice_overlaps) + ", flows_unpaired " + std::to_string(flows_unpaired) + ", flows_unbound " +
         std::to_string(flows_unbound) + ", flows_backwards " + std::to_string(flows_backwards) +
         ", missing_metadata " + std::to_string(missing_metadata);
}

TraceCheck validate_trace(const std::string& text) {
  TraceCheck c;
  auto problem = [&](size_t& counter, std::string what) {
    ++counter;
    if (c.problems.size() < 20) c.problems.push_back(std::move(what));
  };
  json doc;
  RawTimes sax(doc);
  const bool ok = json::sax_parse(text, &sax, json::input_format_t::json, false);
  if (!ok || !doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    c.problems.push_back(ok ? "no traceEvents array" : "not JSON: " + sax.error);
    return c;
  }
  c.parsed = true;
  const json& events = doc["traceEvents"];
  c.events = events.size();

  using Thread = std::pair<int64_t, int64_t>;
  std::map<Thread, std::vector<Slice>> slices;
  struct FlowEnd {
    size_t event;
    Thread thread;
    int64_t ts;
  };
  std::map<std::tuple<std::string, std::string, std::string>, std::pair<std::vector<FlowEnd>, std::vector<FlowEnd>>> flows;
  std::set<int64_t> named_pids;
  std::set<Thread> named_threads;

  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    if (!e.is_object()) {
      problem(c.missing_fields, "event " + std::to_string(i) + " is not an object");
      continue;
    }
    auto has_string = [&](const char* k) { return e.contains(k) && e[k].is_string(); };
    auto has_int = [&](const char* k) { return e.contains(k) && e[k].is_number_integer(); };
    if (!has_string("ph")) {
      problem(c.missing_fields, where(i, e) + " has no ph");
      continue;
    }
    const std::string ph = e["ph"].get<std::string>();
    if (!has_string("cat")) problem(c.missing_cat, where(i, e) + " has no cat");
    if (!has_string("name")) problem(c.missing_fields, where(i, e) + " has no name");
    if (!has_int("pid")) problem(c.missing_fields, where(i, e) + " has no integer pid");
    if (ph != "C" && !has_int("tid")) problem(c.missing_fields, where(i, e) + " has no integer tid");
    const bool timed = ph != "M";
    std::optional<int64_t> ts, dur;
    if (timed) {
      if (!e.contains("ts") || !e["ts"].is_number()) {
        problem(c.missing_fields, where(i, e) + " has no numeric ts");
      } else if (!(ts = exact_ns(raw(sax.ts, i)))) {
        problem(c.inexact_times, where(i, e) + ": ts " + raw(sax.ts, i) + " is not whole nanoseconds");
      }
    }
    if (ph == "X") {
      ++c.slices;
      if (!e.contains("dur") || !e["dur"].is_number()) {
        problem(c.missing_fields, where(i, e) + " has no numeric dur");
      } else if (!(dur = exact_ns(raw(sax.dur, i)))) {
        problem(c.inexact_times, where(i, e) + ": dur " + raw(sax.dur, i) + " is not whole nanoseconds");
      } else if (*dur < 0) {
        problem(c.missing_fields, where(i, e) + " has a negative dur");
      }
      if (ts && dur && has_int("pid") && has_int("tid"))
        slices[{e["pid"].get<int64_t>(), e["tid"].get<int64_t>()}].push_back({*ts, *ts + *dur, i});
    } else if (ph == "s" || ph == "t" || ph == "f") {
      if (!e.contains("id") || !(e["id"].is_number_integer() || e["id"].is_string())) {
        problem(c.missing_fields, where(i, e) + " has no id");
        continue;
      }
      if (ph == "t") continue;  // steps: none are written; nothing to pair
      if (ph == "f" && e.value("bp", "") != "e")
        problem(c.flows_unpaired, where(i, e) + " is a flow end without \"bp\":\"e\" (it would bind to the next slice)");
      const std::string id = e["id"].dump();
      auto& ends = flows[{id, has_string("cat") ? e["cat"].get<std::string>() : "", has_string("name") ? e["name"].get<std::string>() : ""}];
      if (ts && has_int("pid") && has_int("tid"))
        (ph == "s" ? ends.first : ends.second).push_back({i, {e["pid"].get<int64_t>(), e["tid"].get<int64_t>()}, *ts});
    } else if (ph == "C") {
      ++c.counters;
      if (!e.contains("args") || !e["args"].is_object() || e["args"].empty()) {
        problem(c.missing_fields, where(i, e) + " has no args of values");
      } else {
        for (const auto& [k, v] : e["args"].items())
          if (!v.is_number()) problem(c.missing_fields, where(i, e) + ": counter value '" + k + "' is not a number");
      }
    } else if (ph == "M") {
      ++c.metadata;
      const std::string name = has_string("name") ? e["name"].get<std::string>() : "";
      const bool named = e.contains("args") && e["args"].is_object() && e["args"].contains("name") && e["args"]["name"].is_string();
      if ((name == "process_name" || name == "thread_name") && !named)
        problem(c.missing_fields, where(i, e) + " has no args.name");
      if (name == "process_name" && named && has_int("pid")) named_pids.insert(e["pid"].get<int64_t>());
      if (name == "thread_name" && named && has_int("pid") && has_int("tid"))
        named_threads.insert({e["pid"].get<int64_t>(), e["tid"].get<int64_t>()});
    }
  }

  // Nesting, per thread: by start, the longer first at equal starts; a stack of open slices.
  for (auto& [thread, v] : slices) {
    std::sort(v.begin(), v.end(), [](const Slice& a, const Slice& b) {
      return a.ts != b.ts ? a.ts < b.ts : a.end != b.end ? a.end > b.end : a.event < b.event;
    });
    std::vector<const Slice*> open;
    for (const Slice& s : v) {
      while (!open.empty() && open.back()->end <= s.ts) open.pop_back();
      if (!open.empty() && s.end > open.back()->end)
        problem(c.slice_overlaps, "event " + std::to_string(s.event) + " on pid " + std::to_string(thread.first) + " tid " +
                                      std::to_string(thread.second) + " overlaps event " + std::to_string(open.back()->event) +
                                      " without nesting in it");
      open.push_back(&s);
    }
    if (!named_pids.count(thread.first))
      problem(c.missing_metadata, "pid " + std::to_string(thread.first) + " has slices but no process_name");
    if (!named_threads.count(thread))
      problem(c.missing_metadata, "pid " + std::to_string(thread.first) + " tid " + std::to_string(thread.second) +
                                      " has slices but no thread_name");
  }

  // Flows.
  auto binds = [&](const FlowEnd& f) {
    auto it = slices.find(f.thread);
    if (it == slices.end()) return false;
    bool inside = false;
    for (const Slice& s : it->second) {
      if (s.ts == f.ts || s.end == f.ts) return false;  // on a boundary: which slice is meant?
      if (s.ts < f.ts && f.ts < s.end) inside = true;
    }
    return inside;
  };
  for (const auto& [key, ends] : flows) {
    ++c.flows;
    const std::string what = "flow id " + std::get<0>(key) + " '" + std::get<2>(key) + "'";
    if (ends.first.size() != 1 || ends.second.size() != 1) {
      problem(c.flows_unpaired, what + " has " + std::to_string(ends.first.size()) + " starts and " +
                                    std::to_string(ends.second.size()) + " ends");
      continue;
    }
    const FlowEnd& s = ends.first[0];
    const FlowEnd& f = ends.second[0];
    if (!binds(s)) problem(c.flows_unbound, what + ": its start (event " + std::to_string(s.event) + ") lies strictly inside no slice of its thread");
    if (!binds(f)) problem(c.flows_unbound, what + ": its end (event " + std::to_string(f.event) + ") lies strictly inside no slice of its thread");
    if (f.ts < s.ts)
      problem(c.flows_backwards, what + " ends at " + std::to_string(f.ts) + " ns, before it starts at " + std::to_string(s.ts) + " ns");
  }
  return c;
}

}  // namespace ppsched::testing
