// The discrete-event engine.
//
// Each rank has a host that issues its lowered actions (lowering/comm_model.hpp) in order,
// a compute stream, and communication. Compute is launched asynchronously: it starts when
// the stream is free and the host has reached it (with the cost model's compute_blocks_host,
// a CPU run, the host itself runs it and goes on only when it has finished). A send's payload
// is ready when the compute launched before it has finished. Blocking actions (phases, waits,
// collectives) hold the host until every message in them completed. A transfer takes latency
// + bytes / bandwidth of its link and starts when both ends are posted (with the cost model's
// background_progress false, a CPU run with a core per rank, once the receiver waits);
// its send completes with it (with send_handoff_ms, Gloo, that long after it
// started). Payloads up to the eager threshold (and every payload in eager mode)
// leave as soon as they are ready and the send completes without its receiver, as small
// NCCL sends do.
//
// Data parallelism (options.check.dp, README "Pipeline x data parallel"): the replicas of a
// pipeline run the same programs in lockstep, so one replica is simulated and each FSDP_*
// step runs its DP-group collective on its rank's compute stream, priced by the ring formula
// over the group's link (sim/engine_prices.cpp); the pipeline's own links are those between
// the global ranks of replica 0.
//
// Events (host wake-ups) are ordered by (time, sequence) in a binary heap: the same inputs
// give the same outputs, and every event costs O(log n).
//
// The parts: this file holds the event loop, the host's actions (compute, P2P posts and waits,
// collectives) and the results; sim/engine_transfers.cpp the transfer protocol;
// sim/engine_state.hpp the engine's per-rank state. What it reads and keeps apart:
// sim/engine_prices.hpp (what an action costs), sim/memory_ledger.hpp (live bytes and peaks),
// sim/engine_messages.hpp (message state), sim/engine_slices.hpp (the recorded slices).
#include "sim/engine.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "checkers/checks.hpp"
#include "schedule/errors.hpp"
#include "sim/engine_state.hpp"

namespace ppsched {
namespace des {
namespace {

// A simulated run's provenance: the schedule's shape and the runtime mode it was priced in.
RunProvenance provenance(const Schedule& s, const SimOptions& o) {
  RunProvenance p = provenance_of(s, RunSource::Simulated);
  p.mode = o.check;
  return p;
}

}  // namespace

Engine::Engine(const Schedule& s, const CostModel& c, const SimOptions& o)
    : s_(s), c_(c), o_(o), model_(build_comm_model(s, o.check)), rec_(provenance(s, o), s.ranks, o.record_trace) {
  const size_t R = static_cast<size_t>(s.ranks);
  host_.assign(R, 0.0);
  host_cause_.assign(R, -1);
  compute_free_.assign(R, 0.0);
  compute_last_.assign(R, -1);
  busy_.assign(R, 0.0);
  pc_.assign(R, 0);
  posted_.assign(R, false);
  action_slice_.assign(R, -1);
  done_.assign(R, false);
  blocked_.assign(R, false);
  wake_cause_.assign(R, -1);
  arrived_.assign(R, false);
  // Per channel, not per rank pair: memory follows the pairs that talk, not ranks^2.
  link_bytes_.assign(model_.channels.size(), 0.0);
  link_msgs_.assign(model_.channels.size(), 0);
  channel_link_.resize(model_.channels.size());
  for (size_t k = 0; k < model_.channels.size(); ++k)
    channel_link_[k] = &c_.link(prices_.global(model_.channels[k].src), prices_.global(model_.channels[k].dst));
  dp_ms_.assign(R, 0.0);
  dp_exposed_.assign(R, 0.0);
  a2a_ms_.assign(R, 0.0);
  a2a_exposed_.assign(R, 0.0);
  contention_ms_.assign(R, 0.0);
  if (!c.protocol.background_progress) {
    waits_.resize(R);
    stalled_.resize(R);
    dirty_flag_.assign(R, false);
  }
}

RunRecord Engine::run() {
  RunRecord& res = rec_.header();
  if (o_.run_checks) res.check = verify(s_, o_.check, model_);
  res.checked = o_.run_checks;
  // After the checks: their temporaries are freed by now, and the slices reuse that memory.
  size_t actions = 0;
  for (const auto& a : model_.actions) actions += a.size();
  slices_.first_block(actions);
  for (int r = 0; r < s_.ranks; ++r) push(0.0, r);
  do {
    while (!queue_.empty()) {
      Event e = queue_.top();
      queue_.pop();
      ++events_;
      if (done_[static_cast<size_t>(e.rank)]) continue;
      host_[static_cast<size_t>(e.rank)] = std::max(host_[static_cast<size_t>(e.rank)], e.time);
      advance(e.rank);
      retry_stalled();
      msgs_.sweep();
      if (slices_.collection_due()) collect_slices();
    }
    // Every rank waits or has finished, and transfers are still stalled on receivers that
    // wait for something else: nothing timed can wake those any more, so they wait still.
  } while (start_any_stalled());
  res.completed = std::all_of(done_.begin(), done_.end(), [](bool d) { return d; });
  return finish();
}

// ---- the host ---------------------------------------------------------------------------
// Runs rank r's actions from its program counter until it blocks or finishes.
void Engine::advance(int r) {
  const size_t ri = static_cast<size_t>(r);
  const auto& acts = model_.actions[ri];
  if (wake_cause_[ri] >= 0) {
    host_cause_[ri] = wake_cause_[ri];
    wake_cause_[ri] = -1;
  }
  while (true) {
    if (pc_[ri] >= static_cast<int>(acts.size())) {
      done_[ri] = true;
      begin_wait(r, std::numeric_limits<double>::infinity());
      return;
    }
    const Action& a = acts[static_cast<size_t>(pc_[ri])];
    memory_.at_step(a.step_index);
    switch (a.kind) {
      case ActionKind::Local:
        launch_compute(r, a);
        break;
      case ActionKind::Post:
      case ActionKind::Phase:
      case ActionKind::Wait:
        if (!run_p2p(r, a)) return;
        break;
      case ActionKind::Collective:
        if (!run_collective(r, a)) return;
        break;
    }
    ++pc_[ri];
  }
}

// ---- compute ------------------------------------------------------------------------------
// The compute of action `a`'s step; the step itself is read only when it is a composite.
void Engine::launch_compute(int r, const Action& a) {
  const size_t ri = static_cast<size_t>(r);
  const int index = a.step_index;
  // A step on stages with MoE layers runs its phases on the compute and communication streams.
  const StreamTimeline* tl = prices_.has_moe() ? prices_.streams(step_at(r, index), r) : nullptr;
  const double d = tl ? tl->span_ms
                      : a.composite() ? prices_.duration(step_at(r, index)) : prices_.duration(leaf_of(r, a));
  double start = std::max(host_[ri], compute_free_[ri]);
  int32_t cause = compute_free_[ri] >= host_[ri] ? compute_last_[ri] : host_cause_[ri];
  double end = start + d;
  memory_.at_step(index);
  Delta mem = timing_only_ ? Delta{} : memory_.action_effects(r, a);
  if (memory_.gathers() && !a.composite() && !timing_only_) memory_.gather(r, leaf_of(r, a), mem);
  // A recomputing backward holds what it recomputes while it runs, on top of its inputs.
  const int64_t workspace = timing_only_ ? 0 : memory_.workspace_of(r, a);
  if (workspace > 0) memory_.hold_workspace(r, workspace, start);
  memory_.release(r, mem, start);
  int32_t sl = add_slice(r, index, Lane::Compute, start, end, 0, false, cause);
  if (workspace > 0) memory_.free_workspace(r, workspace, end);
  memory_.deliver(r, mem, end);
  compute_free_[ri] = end;
  compute_last_[ri] = sl;
  if (c_.protocol.compute_blocks_host) {
    host_[ri] = end;
    host_cause_[ri] = sl;
  }
  busy_[ri] += d;
  if (tl) record_streams(r, index, a.composite(), start, *tl);
  if (o_.check.dp.degree > 1 && !a.composite()) {
    dp_ms_[ri] += prices_.dp_busy_ms(leaf_of(r, a));
    dp_exposed_[ri] += prices_.dp_exposed_ms(leaf_of(r, a));
  }
}

// The all-to-alls of a step's phases: their time and, with a trace, their slices on the
// communication stream (the step's compute slice spans them all).
void Engine::record_streams(int r, int index, bool composite, double start, const StreamTimeline& tl) {
  const size_t ri = static_cast<size_t>(r);
  a2a_ms_[ri] += tl.a2a_ms;
  a2a_exposed_[ri] += tl.a2a_exposed_ms;
  contention_ms_[ri] += tl.slowdown_ms;
  phases_ += static_cast<size_t>(tl.phases);
  if (!o_.record_trace || timing_only_) return;
  for (const CommSpan& c : tl.comm) {
    TimedSlice sl;
    sl.rank = r;
    sl.step_index = index;
    sl.sub = composite ? c.chain : -1;
    sl.layer = c.item.layer;
    sl.phase = c.item.index;
    sl.lane = Lane::Comm;
    sl.start_ms = start + c.start_ms;
    sl.end_ms = start + c.end_ms;
    sl.bytes = c.item.bytes;
    comm_slices_.push_back(sl);
  }
}

// ---- P2P actions: posting and waiting (the protocol: sim/engine_transfers.cpp) --------------
bool Engine::run_p2p(int r, const Action& a) {
  const size_t ri = static_cast<size_t>(r);
  if (a.kind != ActionKind::Wait && !posted_[ri]) post_action(r, a);
  if (a.kind == ActionKind::Post) {
    // A posted receive's buffer exists from its post on (PyTorch allocates it just
    // before the irecv), as the checks' cache walk counts it; nothing later delivers it.
    memory_.deliver_posted(r, host_[ri]);
    pass(a);
    posted_[ri] = false;
    return true;
  }
  double t = host_[ri];
  int32_t cause = host_cause_[ri];
  if (!completion(a, t, cause)) {
    blocked_[ri] = true;
    begin_wait(r);
    return false;
  }
  if (t > host_[ri]) {
    // Resume at the completion through the event queue, in time order.
    begin_wait(r, t);
    host_[ri] = t;
    host_cause_[ri] = cause;
  }
  if (a.kind == ActionKind::Phase && action_slice_[ri] >= 0) {
    slices_.set_end(action_slice_[ri], host_[ri]);
    bool meta_only = slices_[static_cast<size_t>(action_slice_[ri])].meta;
    if (!meta_only && last_action_of_step(r)) {
      memory_.deliver_posted(r, host_[ri]);  // a receive delivers its buffer
      if (info(a.op).compute != ComputeKind::None && is_p2p(a.op)) launch_compute(r, a);
    }
  } else if (a.kind == ActionKind::Wait) {
    for (int j = 0; j < a.count; ++j) {
      const MsgState& m = msgs_[model_.message_of(a, j)];
      if (m.slice >= 0) slices_.set_end(m.slice, std::max(slices_[static_cast<size_t>(m.slice)].end_ms, m.end));
    }
  }
  pass(a);
  posted_[ri] = false;
  action_slice_[ri] = -1;
  return true;
}

// Posts action `a`'s messages under one slice, starting now on rank r's host.
void Engine::post_action(int r, const Action& a) {
  const size_t ri = static_cast<size_t>(r);
  posted_[ri] = true;
  bool sends = false;
  double bytes = 0;
  bool meta = a.count > 0;
  for (int j = 0; j < a.count; ++j) {
    const int32_t id = model_.message_of(a, j);
    const Message& m = model_.messages[static_cast<size_t>(id)];
    sends = sends || m.send;
    meta = meta && m.meta;
    if (o_.record_trace) bytes += price(m);  // the slice's bytes, kept only in a trace
  }
  action_slice_[ri] =
      add_slice(r, a.step_index, sends ? Lane::Send : Lane::Recv, host_[ri], host_[ri], bytes, meta, host_cause_[ri]);
  // Once per step: a multi-tensor transfer posts one payload action per tensor.
  if (!meta && !timing_only_) memory_.release_posted(r, a, host_[ri]);
  for (int j = 0; j < a.count; ++j) post(r, model_.message_of(a, j), action_slice_[ri]);
}

// ---- collectives --------------------------------------------------------------------------
// Rank r arrives at a pipeline collective: the group's last arrival times the instance, from
// the latest ready member, and wakes the others at its end.
bool Engine::run_collective(int r, const Action& a) {
  const size_t ri = static_cast<size_t>(r);
  const CollectiveCall& call = model_.collective_calls[static_cast<size_t>(a.collective)];
  const auto& members = model_.groups[static_cast<size_t>(call.group)].members;
  auto key = std::make_pair(call.group, call.position);
  auto& inst = instances_[key];
  if (!arrived_[ri]) {
    arrived_[ri] = true;
    double ready = std::max(host_[ri], compute_free_[ri]);
    if (ready >= inst.start) {
      inst.start = ready;
      inst.cause = ready > host_[ri] ? compute_last_[ri] : host_cause_[ri];
    }
    inst.arrived++;
    if (inst.arrived == static_cast<int>(members.size())) {
      const int32_t stage = step_at(r, a.step_index).stage;
      inst.end = inst.start + prices_.collective_ms(a.op, stage, members);
      for (int q : members) {
        add_slice(q, collective_step(q, call), Lane::Collective, inst.start, inst.end,
                  prices_.collective_bytes(a.op, stage), false, inst.cause);
        wake_cause_[static_cast<size_t>(q)] = static_cast<int32_t>(slices_.size()) - 1;
        if (q != r) {
          end_wait(q, inst.end);
          push(inst.end, q);
        }
      }
      begin_wait(r, inst.end);
      host_[ri] = inst.end;
      host_cause_[ri] = wake_cause_[ri];
      wake_cause_[ri] = -1;
    } else {
      begin_wait(r);
      return false;  // wait for the group
    }
  }
  if (inst.end == kUnknown) return false;
  host_[ri] = std::max(host_[ri], inst.end);
  arrived_[ri] = false;
  return true;
}

int Engine::collective_step(int q, const CollectiveCall& call) const {
  for (int32_t c : model_.calls_by_rank[static_cast<size_t>(q)]) {
    const auto& other = model_.collective_calls[static_cast<size_t>(c)];
    if (other.group == call.group && other.position == call.position) return other.step_index;
  }
  return -1;
}

// ---- results --------------------------------------------------------------------------------
RunRecord Engine::finish() {
  RunRecord& res = rec_.header();
  res.steps = res.check.stats.steps;  // counted once, by the checks (the cache walk)
  res.events = events_;
  double makespan = slices_.last() >= 0 ? std::max(0.0, slices_.last_end()) : 0.0;
  for (int r = 0; r < s_.ranks; ++r) makespan = std::max(makespan, host_[static_cast<size_t>(r)]);
  if (timing_only_) return rec_.finish(makespan);
  summarize_ranks();
  res.dp_degree = o_.check.dp.degree;
  res.phases = phases_;
  // Critical path: from the slice that ends last, follow the causes back.
  rec_.critical_path(slices_.critical_path());
  for (size_t k = 0; k < model_.channels.size(); ++k)
    if (link_msgs_[k]) rec_.link(model_.channels[k].src, model_.channels[k].dst, link_bytes_[k], link_msgs_[k]);
  if (o_.record_trace) {
    slices_.record(rec_);
    for (const TimedSlice& sl : comm_slices_) rec_.slice(sl);
    record_flows();
  }
  // The checks replayed the same lowering (their deadlock pass): a timed run that stops is
  // explained there, either by a deadlock or by the unmatched message or collective the
  // static passes located. Timing's eager protocol cannot stop where that replay completes.
  if (!res.completed && res.checked && res.check.completes)
    throw std::logic_error("simulate: the timed run of '" + s_.name +
                           "' stopped although the replay of its lowering completes (an engine bug)");
  return rec_.finish(makespan);
}

void Engine::summarize_ranks() {
  for (int r = 0; r < s_.ranks; ++r) {
    const size_t ri = static_cast<size_t>(r);
    RankSummary rs;
    rs.rank = r;
    rs.busy_ms = busy_[ri];
    memory_.summarize(r, rs);
    rs.end_ms = std::max(host_[ri], compute_free_[ri]);
    rs.dp_collective_ms = dp_ms_[ri];
    rs.dp_exposed_ms = dp_exposed_[ri];
    rs.a2a_ms = a2a_ms_[ri];
    rs.a2a_exposed_ms = a2a_exposed_[ri];
    rs.contention_ms = contention_ms_[ri];
    rs.dp_ring_inter_node = prices_.dp_ring_inter_node(r);
    rec_.rank(rs);
  }
}

}  // namespace des

RunRecord simulate(const Schedule& s, const CostModel& costs, const SimOptions& options) {
  if (const std::string why = data_parallel_problem(options.check.dp, s.ranks); !why.empty())
    throw InputError({}, why);
  if (options.timing_only && (options.run_checks || options.record_trace)) {
    SimOptions timing = options;
    timing.run_checks = timing.record_trace = false;
    return des::Engine(s, costs, timing).run();
  }
  return des::Engine(s, costs, options).run();
}

}  // namespace ppsched
