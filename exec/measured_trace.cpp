#include "exec/measured_trace.hpp"

#include <algorithm>
#include <stdexcept>

#include "lowering/comm_model.hpp"
#include "results/recorder.hpp"

namespace ppsched::exec {

RunRecord assemble_measured_run(const Schedule& s, const std::vector<RankTrace>& ranks, const MeasuredRunInfo& info) {
  return assemble_measured_run(s, ranks, info, build_comm_model(s, info.mode));
}

RunRecord assemble_measured_run(const Schedule& s, const std::vector<RankTrace>& ranks, const MeasuredRunInfo& info,
                                const CommModel& model) {
  RunProvenance p = provenance_of(s, RunSource::Measured);
  p.transport = info.transport;
  // The mode that ran: the Gloo and NCCL transports block a send until its receive is posted
  // (exec/agreement.cpp refuses --comm eager for a schedule that needs buffered sends), so an
  // eager run was a rendezvous run, and calibrate --schedule predicts it as one.
  p.mode = info.mode;
  if (info.mode.comm == CommMode::Eager && info.transport != RunTransport::None) {
    p.mode->comm = CommMode::Rendezvous;
    p.mode_note = std::string("--comm eager was verified with buffered sends and ran with the ") + to_string(info.transport) +
                  " transport's blocking sends (each waits for its receive): a rendezvous run";
  }
  p.mesh = info.mesh;
  p.cpu_bind = to_string(info.cpu_bind);
  p.layers = info.layers;
  p.shared_clock = !ranks.empty() && std::all_of(ranks.begin(), ranks.end(), [&](const RankTrace& t) {
    return !t.host.empty() && t.host == ranks.front().host;
  });
  for (const RankTrace& rt : ranks) p.placement.push_back({rt.host, rt.cpus, rt.cpu_bound});
  // The split-backward probes of every stage, in stage order, when every stage has one.
  for (const RankTrace& rt : ranks) p.split_backward.insert(p.split_backward.end(), rt.split_backward.begin(), rt.split_backward.end());
  std::sort(p.split_backward.begin(), p.split_backward.end(),
            [](const SplitBackwardProbe& a, const SplitBackwardProbe& b) { return a.stage < b.stage; });
  if (static_cast<int>(p.split_backward.size()) != s.stages) p.split_backward.clear();
  const bool shared_clock = p.shared_clock;
  RunRecorder rec(std::move(p), s.ranks);

  std::vector<int32_t> slice_of_message(model.messages.size(), -1);
  int64_t first_epoch = ranks.empty() ? 0 : ranks.front().epoch_ns;
  for (const RankTrace& rt : ranks) first_epoch = std::min(first_epoch, rt.epoch_ns);

  for (const RankTrace& rt : ranks) {
    if (rt.rank < 0 || rt.rank >= s.ranks) throw std::runtime_error("trace record of unknown rank " + std::to_string(rt.rank));
    // The comm model's messages of this rank, in the order the executor exchanges them.
    std::vector<int32_t> want;
    for (const Action& a : model.actions[static_cast<size_t>(rt.rank)]) {
      if (a.kind != ActionKind::Phase && a.kind != ActionKind::Post) continue;
      for (int k = 0; k < a.count; ++k) want.push_back(model.message_of(a, k));
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
        rec.header().provenance.notes.push_back("rank " + std::to_string(rt.rank) + ": message " + std::to_string(g) +
                                                " (step " + std::to_string(got.step_index) +
                                                ") does not follow the comm model; its flows and the later ones are left out");
        break;
      }
      id_of[g] = want[w++];
    }
    const double shift = shared_clock ? static_cast<double>(rt.epoch_ns - first_epoch) / 1e6 : 0.0;
    for (const TracedInterval& iv : rt.intervals) {
      TimedSlice sl;
      sl.rank = rt.rank;
      sl.step_index = iv.step_index;
      sl.sub = iv.sub;
      sl.lane = iv.lane;
      sl.start_ms = iv.start_ms + shift;
      sl.end_ms = std::max(iv.start_ms, iv.end_ms) + shift;
      sl.bytes = iv.bytes;
      sl.meta = iv.meta;
      sl.layer = iv.layer;
      sl.phase = static_cast<int16_t>(iv.phase);
      const int32_t index = rec.slice(sl);
      for (int k = 0; k < iv.messages; ++k) {
        const int g = iv.first_message + k;
        if (g >= 0 && static_cast<size_t>(g) < id_of.size() && id_of[static_cast<size_t>(g)] >= 0)
          slice_of_message[static_cast<size_t>(id_of[static_cast<size_t>(g)])] = index;
      }
    }
  }

  std::vector<int> messages_in_slice(rec.header().slices.size(), 0);
  for (int32_t sl : slice_of_message)
    if (sl >= 0) ++messages_in_slice[static_cast<size_t>(sl)];

  // Flows: every send whose FIFO partner (the k-th receive on its channel) was also timed.
  for (size_t id = 0; id < model.messages.size(); ++id) {
    const Message& m = model.messages[id];
    if (!m.send || slice_of_message[id] < 0) continue;
    const int32_t partner = m.partner;
    if (partner < 0) continue;
    if (slice_of_message[static_cast<size_t>(partner)] < 0) continue;
    const int32_t send = slice_of_message[id], recv = slice_of_message[static_cast<size_t>(partner)];
    // The executor times the blocking calls, not the wire: the payload left no earlier than
    // its send began and had arrived when its receive returned.
    rec.flow(send, recv, rec.slice_at(send).start_ms, rec.slice_at(recv).end_ms);
    // A batch's group slice carries several messages: each gets an equal share of its bytes.
    const Channel& ch = model.channels[static_cast<size_t>(m.channel)];
    rec.link(ch.src, ch.dst, rec.slice_at(send).bytes / std::max(1, messages_in_slice[static_cast<size_t>(send)]));
  }
  RunRecord& r = rec.header();
  r.completed = true;
  r.steps = 0;
  for (const auto& prog : s.programs)
    for (const auto& slot : prog)
      if (slot) ++r.steps;
  return rec.finish();  // busy time, end and bubble of every rank from its slices
}

}  // namespace ppsched::exec
