#include "exec/rank_report.hpp"

#include <stdexcept>

#include <nlohmann/json.hpp>

namespace ppsched::exec {
namespace {

using json = nlohmann::json;

json trace_json(const RankTrace& t) {
  json iv = json::array(), msg = json::array();
  for (const TracedInterval& i : t.intervals)
    iv.push_back({i.step_index, i.sub, static_cast<int>(i.lane), i.start_ms, i.end_ms, i.bytes, i.meta, i.first_message, i.messages,
                  i.layer, i.phase});
  for (const LoggedMessage& m : t.messages) msg.push_back({m.peer, m.send, m.meta, m.step_index, m.sub, m.tensor});
  json split = json::array();
  for (const SplitBackwardProbe& p : t.split_backward) split.push_back({p.stage, p.bwd_ms, p.bwd_input_ms, p.bwd_weight_ms});
  return {{"rank", t.rank}, {"host", t.host}, {"epoch_ns", t.epoch_ns}, {"cpus", t.cpus}, {"cpu_bound", t.cpu_bound},
          {"intervals", iv}, {"messages", msg}, {"split_backward", split}};
}

RankTrace trace_from(const json& j) {
  RankTrace t;
  t.rank = j.at("rank").get<int>();
  t.host = j.at("host").get<std::string>();
  t.epoch_ns = j.at("epoch_ns").get<int64_t>();
  t.cpus = j.at("cpus").get<std::vector<int>>();
  for (int c : t.cpus)
    if (c < 0) throw std::runtime_error("malformed CPU list in the trace record of rank " + std::to_string(t.rank));
  t.cpu_bound = j.at("cpu_bound").get<bool>();
  for (const json& e : j.at("intervals")) {
    TracedInterval i;
    const int lane = e.at(2).get<int>();
    if (lane < 0 || lane > static_cast<int>(Lane::Comm))
      throw std::runtime_error("malformed interval in the trace record of rank " + std::to_string(t.rank));
    i.step_index = e.at(0).get<int>();
    i.sub = e.at(1).get<int>();
    i.lane = static_cast<Lane>(lane);
    i.start_ms = e.at(3).get<double>();
    i.end_ms = e.at(4).get<double>();
    i.bytes = e.at(5).get<double>();
    i.meta = e.at(6).get<bool>();
    i.first_message = e.at(7).get<int>();
    i.messages = e.at(8).get<int>();
    i.layer = e.at(9).get<int>();
    i.phase = e.at(10).get<int>();
    t.intervals.push_back(i);
  }
  for (const json& e : j.at("messages"))
    t.messages.push_back({e.at(0).get<int>(), e.at(1).get<bool>(), e.at(2).get<bool>(), e.at(3).get<int>(), e.at(4).get<int>(),
                          e.at(5).get<int>()});
  for (const json& e : j.at("split_backward"))
    t.split_backward.push_back({e.at(0).get<int>(), e.at(1).get<double>(), e.at(2).get<double>(), e.at(3).get<double>()});
  return t;
}

// Host names and reasons are the OS's bytes: replaced, never a throw, when not UTF-8.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string serialize(const RankTrace& t) { return dump(trace_json(t)); }

RankTrace parse_rank_trace(const std::string& text) {
  try {
    return trace_from(json::parse(text));
  } catch (const json::exception& e) {
    throw std::runtime_error(std::string("malformed trace record: ") + e.what());
  }
}

std::string serialize(const RankReport& r) {
  json j = {{"rank", r.rank},
            {"cpu", {{"bound", r.cpu.bound}, {"cpus", r.cpu.cpus}, {"reason", r.cpu.reason}}},
            {"parameter_elements", {r.parameter_elements, r.held_parameter_elements}},
            {"all_to_alls", {r.all_to_alls, r.all_to_alls_overlapped}}};
  if (r.losses) j["losses"] = *r.losses;
  if (r.trace) j["trace"] = trace_json(*r.trace);
  return dump(j);
}

RankReport parse_rank_report(const std::string& text) {
  RankReport r;
  try {
    const json j = json::parse(text);
    r.rank = j.at("rank").get<int>();
    const json& c = j.at("cpu");
    r.cpu.rank = r.rank;
    r.cpu.bound = c.at("bound").get<bool>();
    r.cpu.cpus = c.at("cpus").get<std::string>();
    r.cpu.reason = c.at("reason").get<std::string>();
    r.parameter_elements = j.at("parameter_elements").at(0).get<int64_t>();
    r.held_parameter_elements = j.at("parameter_elements").at(1).get<int64_t>();
    r.all_to_alls = j.at("all_to_alls").at(0).get<int64_t>();
    r.all_to_alls_overlapped = j.at("all_to_alls").at(1).get<int64_t>();
    if (j.contains("losses")) r.losses = j["losses"].get<std::vector<double>>();
    if (j.contains("trace")) r.trace = trace_from(j["trace"]);
  } catch (const json::exception& e) {
    throw std::runtime_error("malformed report of rank " + std::to_string(r.rank) + ": " + e.what());
  }
  return r;
}

}  // namespace ppsched::exec
