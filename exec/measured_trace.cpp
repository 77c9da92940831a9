#include "exec/measured_trace.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "lowering/comm_model.hpp"

namespace ppsched::exec {

std::string serialize(const RankTrace& t) {
  // The host name is the last field of its line: it may not contain spaces in practice, and
  // the reader takes the rest of the line anyway.
  std::string out = "rank " + std::to_string(t.rank) + " " + std::to_string(t.epoch_ns) + " " + t.host + "\n";
  if (!t.cpus.empty()) {
    out += "C " + std::to_string(t.cpu_bound ? 1 : 0) + " " + std::to_string(t.cpus.size());
    for (int c : t.cpus) out += " " + std::to_string(c);
    out += "\n";
  }
  char line[256];
  for (const auto& i : t.intervals) {
    std::snprintf(line, sizeof line, "I %d %d %d %.17g %.17g %.17g %d %d %d\n", i.step_index, i.sub,
                  static_cast<int>(i.lane), i.start_ms, i.end_ms, i.bytes, i.meta ? 1 : 0, i.first_message, i.messages);
    out += line;
  }
  for (const auto& m : t.messages) {
    std::snprintf(line, sizeof line, "M %d %d %d %d %d %d\n", m.peer, m.send ? 1 : 0, m.meta ? 1 : 0, m.step_index, m.sub,
                  m.tensor);
    out += line;
  }
  return out;
}

std::string cpu_binding_json(const std::vector<RankTrace>& ranks, CpuBindMode mode) {
  nlohmann::json per_rank = nlohmann::json::array();
  for (const RankTrace& rt : ranks) per_rank.push_back({{"host", rt.host}, {"cpus", rt.cpus}, {"bound", rt.cpu_bound}});
  const nlohmann::json j = {{"mode", to_string(mode)}, {"ranks", per_rank}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

RankTrace parse_rank_trace(const std::string& text) {
  RankTrace t;
  std::istringstream in(text);
  std::string word;
  if (!(in >> word >> t.rank >> t.epoch_ns) || word != "rank")
    throw std::runtime_error("trace record does not start with its rank and epoch");
  std::getline(in, t.host);
  if (!t.host.empty() && t.host[0] == ' ') t.host.erase(0, 1);
  while (in >> word) {
    if (word == "I") {
      TracedInterval i;
      int lane = 0, meta = 0;
      if (!(in >> i.step_index >> i.sub >> lane >> i.start_ms >> i.end_ms >> i.bytes >> meta >> i.first_message >> i.messages) ||
          lane < 0 || lane > static_cast<int>(Lane::Collective))
        throw std::runtime_error("malformed interval in the trace record of rank " + std::to_string(t.rank));
      i.lane = static_cast<Lane>(lane);
      i.meta = meta != 0;
      t.intervals.push_back(i);
    } else if (word == "C") {
      int bound = 0;
      size_t n = 0;
      if (!(in >> bound >> n) || n > (size_t{1} << 20))
        throw std::runtime_error("malformed CPU list in the trace record of rank " + std::to_string(t.rank));
      t.cpu_bound = bound != 0;
      t.cpus.resize(n);
      for (int& c : t.cpus)
        if (!(in >> c) || c < 0) throw std::runtime_error("malformed CPU list in the trace record of rank " + std::to_string(t.rank));
    } else if (word == "M") {
      LoggedMessage m{};
      int send = 0, meta = 0;
      if (!(in >> m.peer >> send >> meta >> m.step_index >> m.sub >> m.tensor))
        throw std::runtime_error("malformed message in the trace record of rank " + std::to_string(t.rank));
      m.send = send != 0;
      m.meta = meta != 0;
      t.messages.push_back(m);
    } else {
      throw std::runtime_error("unknown entry '" + word + "' in the trace record of rank " + std::to_string(t.rank));
    }
  }
  return t;
}

MeasuredRun assemble_measured_run(const Schedule& s, const std::vector<RankTrace>& ranks, const CheckOptions& mode) {
  MeasuredRun run;
  SimResult& r = run.result;
  const CommModel model = build_comm_model(s, mode);
  std::vector<int32_t> slice_of_message(model.messages.size(), -1);
  run.shared_clock = !ranks.empty() && std::all_of(ranks.begin(), ranks.end(), [&](const RankTrace& t) {
    return !t.host.empty() && t.host == ranks.front().host;
  });
  int64_t first_epoch = ranks.empty() ? 0 : ranks.front().epoch_ns;
  for (const RankTrace& rt : ranks) first_epoch = std::min(first_epoch, rt.epoch_ns);

  for (const RankTrace& rt : ranks) {
    if (rt.rank < 0 || rt.rank >= s.ranks) throw std::runtime_error("trace record of unknown rank " + std::to_string(rt.rank));
    // The comm model's messages of this rank, in the order the executor exchanges them.
    std::vector<int32_t> want;
    for (const Action& a : model.actions[static_cast<size_t>(rt.rank)]) {
      if (a.kind != ActionKind::Phase && a.kind != ActionKind::Post) continue;
      for (int k = 0; k < a.count; ++k) want.push_back(model.action_messages[static_cast<size_t>(a.first + k)]);
    }
    // Logged message -> model message, skipping metas this iteration did not exchange.
    std::vector<int32_t> id_of(rt.messages.size(), -1);
    size_t w = 0;
    for (size_t g = 0; g < rt.messages.size(); ++g) {
      const LoggedMessage& got = rt.messages[g];
      auto same = [&](const Message& m) {
        const Channel& ch = model.channels[static_cast<size_t>(m.channel)];
        return (m.send ? ch.dst : ch.src) == got.peer && m.send == got.send && m.meta == got.meta &&
               m.step_index == got.step_index && m.sub == got.sub && m.tensor == got.tensor;
      };
      while (w < want.size() && !same(model.messages[static_cast<size_t>(want[w])]) &&
             model.messages[static_cast<size_t>(want[w])].meta)
        ++w;
      if (w >= want.size() || !same(model.messages[static_cast<size_t>(want[w])])) {
        run.notes.push_back("rank " + std::to_string(rt.rank) + ": message " + std::to_string(g) + " (step " +
                            std::to_string(got.step_index) +
                            ") does not follow the comm model; its flows and the later ones are left out");
        break;
      }
      id_of[g] = want[w++];
    }
    const double shift = run.shared_clock ? static_cast<double>(rt.epoch_ns - first_epoch) / 1e6 : 0.0;
    for (const TracedInterval& iv : rt.intervals) {
      SimSlice sl;
      sl.rank = rt.rank;
      sl.step_index = iv.step_index;
      sl.sub = iv.sub;
      sl.lane = iv.lane;
      sl.start_ms = iv.start_ms + shift;
      sl.end_ms = std::max(iv.start_ms, iv.end_ms) + shift;
      sl.bytes = iv.bytes;
      sl.meta = iv.meta;
      const auto index = static_cast<int32_t>(r.slices.size());
      r.slices.push_back(sl);
      for (int k = 0; k < iv.messages; ++k) {
        const int g = iv.first_message + k;
        if (g >= 0 && static_cast<size_t>(g) < id_of.size() && id_of[static_cast<size_t>(g)] >= 0)
          slice_of_message[static_cast<size_t>(id_of[static_cast<size_t>(g)])] = index;
      }
    }
  }

  std::vector<int> messages_in_slice(r.slices.size(), 0);
  for (int32_t sl : slice_of_message)
    if (sl >= 0) ++messages_in_slice[static_cast<size_t>(sl)];

  // Flows: every send whose FIFO partner (the k-th receive on its channel) was also timed.
  std::vector<double> link_bytes(static_cast<size_t>(s.ranks * s.ranks), 0.0);
  std::vector<int> link_msgs(static_cast<size_t>(s.ranks * s.ranks), 0);
  for (size_t id = 0; id < model.messages.size(); ++id) {
    const Message& m = model.messages[id];
    if (!m.send || slice_of_message[id] < 0) continue;
    const Channel& ch = model.channels[static_cast<size_t>(m.channel)];
    if (m.k >= static_cast<int32_t>(ch.recvs.size())) continue;
    const int32_t partner = ch.recvs[static_cast<size_t>(m.k)];
    if (slice_of_message[static_cast<size_t>(partner)] < 0) continue;
    SimFlow flow{static_cast<int32_t>(r.flows.size()), slice_of_message[id], slice_of_message[static_cast<size_t>(partner)]};
    // The executor times the blocking calls, not the wire: the payload left no earlier than
    // its send began and had arrived when its receive returned.
    flow.leave_ms = r.slices[static_cast<size_t>(flow.send_slice)].start_ms;
    flow.arrive_ms = r.slices[static_cast<size_t>(flow.recv_slice)].end_ms;
    r.flows.push_back(flow);
    const size_t k = static_cast<size_t>(ch.src * s.ranks + ch.dst);
    // A batch's group slice carries several messages: each gets an equal share of its bytes.
    const auto sl = static_cast<size_t>(slice_of_message[id]);
    link_bytes[k] += r.slices[sl].bytes / std::max(1, messages_in_slice[sl]);
    ++link_msgs[k];
  }
  for (int a = 0; a < s.ranks; ++a)
    for (int b = 0; b < s.ranks; ++b) {
      const size_t k = static_cast<size_t>(a * s.ranks + b);
      if (link_msgs[k]) r.links.push_back({a, b, link_bytes[k], link_msgs[k]});
    }

  double makespan = 0;
  for (const auto& sl : r.slices) makespan = std::max(makespan, sl.end_ms);
  r.makespan_ms = makespan;
  r.completed = true;
  r.ranks.resize(static_cast<size_t>(s.ranks));
  for (int q = 0; q < s.ranks; ++q) r.ranks[static_cast<size_t>(q)].rank = q;
  for (const auto& sl : r.slices) {
    RankSummary& rs = r.ranks[static_cast<size_t>(sl.rank)];
    if (sl.lane == Lane::Compute) rs.busy_ms += sl.end_ms - sl.start_ms;
    rs.end_ms = std::max(rs.end_ms, sl.end_ms);
  }
  for (auto& rs : r.ranks) {
    rs.idle_ms = std::max(0.0, makespan - rs.busy_ms);
    rs.bubble_fraction = makespan > 0 ? rs.idle_ms / makespan : 0.0;
  }
  r.steps = 0;
  for (const auto& p : s.programs)
    for (const auto& slot : p)
      if (slot) ++r.steps;
  return run;
}

}  // namespace ppsched::exec
