#include "lowering/stream_program.hpp"

#include <algorithm>

#include "schedule/errors.hpp"

namespace ppsched {

std::string_view to_string(StreamOpKind k) {
  switch (k) {
    case StreamOpKind::Compute: return "compute";
    case StreamOpKind::Collective: return "collective";
    case StreamOpKind::Send: return "send";
    case StreamOpKind::Recv: return "recv";
  }
  return "?";
}

std::string StreamProgram::describe(int rank, int op) const {
  const StreamRank& r = ranks[static_cast<size_t>(rank)];
  const StreamOp& o = r.ops[static_cast<size_t>(op)];
  std::string out = "rank " + std::to_string(rank) + " op " + std::to_string(op) + " (" + o.name;
  if (o.kind == StreamOpKind::Collective) out += " on " + comms[static_cast<size_t>(o.comm)].name;
  if (o.kind == StreamOpKind::Send) out += " to rank " + std::to_string(o.peer);
  if (o.kind == StreamOpKind::Recv) out += " from rank " + std::to_string(o.peer);
  return out + ", stream " + r.streams[static_cast<size_t>(o.stream)] + ")";
}

namespace {

// One rank's program under construction: the last operation on each stream, and a fresh event
// per ordering edge (an event recorded once: CUDA's exact binding).
struct RankBuilder {
  StreamRank& r;
  int last[2] = {-1, -1};  // per stream: the last op listed on it

  int event_after(int op) {
    auto& recs = r.ops[static_cast<size_t>(op)].records;
    if (!recs.empty()) return recs.front();
    int e = static_cast<int>(r.events.size());
    r.events.push_back("e" + std::to_string(e));
    recs.push_back(e);
    return e;
  }
  // Appends an op on `stream`, ordered after each of `after` that is on the other stream (an
  // op on its own stream is before it already).
  int add(StreamOp op, int stream, std::initializer_list<int> after) {
    op.stream = stream;
    for (int a : after)
      if (a >= 0 && r.ops[static_cast<size_t>(a)].stream != stream) {
        int e = event_after(a);
        if (std::find(op.waits.begin(), op.waits.end(), e) == op.waits.end()) op.waits.push_back(e);
      }
    r.ops.push_back(std::move(op));
    int id = static_cast<int>(r.ops.size()) - 1;
    last[stream] = id;
    return id;
  }
};

constexpr int kCompute = static_cast<int>(Stream::Compute), kComm = static_cast<int>(Stream::Comm);

std::string phase_name(const PhaseItem& it, const Step& st) {
  std::string out(it.phase.name);
  if (it.layer >= 0) out += " L" + std::to_string(it.layer);
  return out + " " + short_label(st);
}

}  // namespace

StreamProgram lower_streams(const Schedule& s, const StreamLowering& l) {
  if (l.ep < 1) throw InputError({}, "lower_streams: the expert-parallel size must be at least 1");
  if (static_cast<int>(l.stages.size()) < s.stages)
    throw InputError({}, "lower_streams: " + std::to_string(l.stages.size()) + " MoE stage descriptions for " +
                             std::to_string(s.stages) + " stages");
  StreamProgram p;
  const int P = s.ranks;
  for (int r = 0; r < P; ++r) {
    Communicator c;
    c.name = "EP(" + std::to_string(r) + ")";
    for (int k = 0; k < l.ep; ++k) c.ranks.push_back(r + k * P);
    p.comms.push_back(std::move(c));
  }
  p.ranks.resize(static_cast<size_t>(P) * static_cast<size_t>(l.ep));
  std::vector<PhaseItem> items[2];
  for (int r = 0; r < P; ++r) {
    StreamRank& base = p.ranks[static_cast<size_t>(r)];
    base.streams = {std::string(to_string(Stream::Compute)), std::string(to_string(Stream::Comm))};
    RankBuilder b{base};
    const Program& prog = s.programs[static_cast<size_t>(r)];
    for (size_t i = 0; i < prog.size(); ++i) {
      if (!prog[i]) continue;
      const Step& st = *prog[i];
      // The join: this step's first op on each stream waits for the other stream's last.
      const int join[2] = {b.last[kCompute], b.last[kComm]};
      // The chains, as the engine runs them (sim/engine_prices.cpp): an overlap's two sub-steps,
      // or the step itself; each its phases, or (where another chain has phases) the whole
      // sub-step as one compute phase.
      const Step* chain_step[2] = {&st, nullptr};
      if (is_overlap(st.op) && !st.sub_steps().empty()) {
        chain_step[0] = &st.sub_steps()[0];
        chain_step[1] = st.sub_steps().size() > 1 ? &st.sub_steps()[1] : nullptr;
      }
      const int chains = chain_step[1] ? 2 : 1;
      bool any_phases = false;
      for (int c = 0; c < chains; ++c) {
        items[c].clear();
        const Step& x = *chain_step[c];
        if (x.stage >= 0 && x.stage < s.stages)
          expand_phases(x.op, l.stages[static_cast<size_t>(x.stage)], items[c], l.delay_wgrad);
        any_phases = any_phases || !items[c].empty();
      }
      for (int c = 0; c < chains; ++c)
        if (items[c].empty()) items[c].push_back(whole_step_phase(chain_step[c]->op));
      bool first_on[2] = {true, true};
      auto add = [&](StreamOp op, int stream, int chain_prev) {
        int other = 1 - stream;
        int j = first_on[stream] ? join[other] : -1;
        first_on[stream] = false;
        return b.add(std::move(op), stream, {chain_prev, j});
      };
      if (!any_phases) {
        StreamOp op;
        op.name = short_label(st);
        op.step = static_cast<int32_t>(i);
        add(std::move(op), kCompute, -1);
        continue;
      }
      // Order the phases of the chains into one listing: with two chains, the backward's
      // items up to and including its next all-to-all, then the forward's, in turn (Megatron's
      // combined 1F1B per layer: comm combine_bwd, dispatch_fwd, dispatch_bwd, combine_fwd;
      // compute attn_fwd, mlp_bwd, mlp_fwd, attn_bwd).
      // The forward sub-step's chain leads the compute stream.
      const int fwd = chains == 2 && !is_forward(chain_step[0]->op) ? 1 : 0;
      const int bwd = chains == 2 ? 1 - fwd : -1;
      size_t pos[2] = {0, 0};
      int prev[2] = {-1, -1};
      // A chain's last phase when it is beside the chain (the weight gradients of the backward's
      // last layer, --delay-wgrad-compute) goes after everything else of the step.
      const PhaseItem* last_beside[2] = {nullptr, nullptr};
      for (int c = 0; c < chains; ++c)
        if (!items[c].empty() && items[c].back().beside) {
          last_beside[c] = &items[c].back();
        }
      auto emit = [&](int c, const PhaseItem& it) {
        StreamOp op;
        op.name = phase_name(it, *chain_step[c]);
        op.step = static_cast<int32_t>(i);
        op.sub = chain_step[c] == &st ? -1 : static_cast<int32_t>(chain_step[c] - st.sub_steps().begin());
        const int stream = static_cast<int>(it.phase.stream);
        if (stream == kComm) {
          op.kind = StreamOpKind::Collective;
          op.comm = r;
        }
        const int id = add(std::move(op), stream, prev[c]);
        if (!it.beside) prev[c] = id;  // nothing in the chain waits for a phase beside it
        return stream;
      };
      auto emit_until_comm = [&](int c) {
        const auto& list = items[c];
        const size_t end = list.size() - (last_beside[c] ? 1 : 0);
        while (pos[c] < end)
          if (emit(c, list[pos[c]++]) == kComm) return;
      };
      const auto left = [&](int c) { return pos[c] < items[c].size() - (last_beside[c] ? 1 : 0); };
      while (left(0) || (chains == 2 && left(1))) {
        if (bwd >= 0) emit_until_comm(bwd);
        emit_until_comm(fwd);
      }
      for (int c = 0; c < chains; ++c)
        if (last_beside[c]) emit(c, *last_beside[c]);
    }
  }
  // The expert-parallel replicas run the same program.
  for (int k = 1; k < l.ep; ++k)
    for (int r = 0; r < P; ++r) p.ranks[static_cast<size_t>(r + k * P)] = p.ranks[static_cast<size_t>(r)];
  return p;
}

void drop_wait(StreamProgram& p, int rank, int op, int k) {
  auto& waits = p.ranks[static_cast<size_t>(rank)].ops[static_cast<size_t>(op)].waits;
  if (k >= 0 && k < static_cast<int>(waits.size())) waits.erase(waits.begin() + k);
}

void move_to_stream(StreamProgram& p, int rank, int op, int stream, const std::string& name) {
  StreamRank& r = p.ranks[static_cast<size_t>(rank)];
  if (stream < 0) {
    stream = static_cast<int>(r.streams.size());
    r.streams.push_back(name);
  }
  r.ops[static_cast<size_t>(op)].stream = stream;
}

}  // namespace ppsched
