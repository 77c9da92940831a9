// The engine's transfer protocol (sim/engine_state.hpp, the engine in sim/engine.cpp): a posted
// send or receive meets its partner, each transfer is timed, eager or rendezvous, on its link,
// completions wake the ranks that wait for them; with background_progress false, a receiver
// takes a payload in only while it waits.
#include <algorithm>
#include <limits>

#include "sim/engine_state.hpp"

namespace ppsched::des {

// ---- posting -------------------------------------------------------------------------------
void Engine::post(int r, int32_t id, int32_t slice) {
  const size_t ri = static_cast<size_t>(r);
  const Message& m = model_.messages[static_cast<size_t>(id)];
  MsgState& st = msgs_.open(id);
  assert(slice >= 0 && slices_[static_cast<size_t>(slice)].start_ms == host_[ri]);
  st.slice = slice;  // created now, starting at host_[ri]: the message's post time
  const int32_t partner = m.partner;
  if (m.send) {
    st.ready = std::max(host_[ri], compute_free_[ri]);
    st.ready_cause = compute_free_[ri] > host_[ri] ? compute_last_[ri] : host_cause_[ri];
    settle(id, partner);
    if (o_.record_trace && partner >= 0) pending_flows_.push_back({id, partner});
  } else {
    if (partner >= 0 && msgs_[partner].slice >= 0) settle(partner, id);
  }
}

// A blocked rank whose messages all completed resumes at the latest completion.
void Engine::maybe_wake(int r) {
  const size_t ri = static_cast<size_t>(r);
  if (!blocked_[ri]) return;
  const auto& acts = model_.actions[ri];
  const Action& a = acts[static_cast<size_t>(pc_[ri])];
  if (a.kind != ActionKind::Phase && a.kind != ActionKind::Wait) return;
  double t = host_[ri];
  int32_t cause = host_cause_[ri];
  if (!completion(a, t, cause)) return;
  blocked_[ri] = false;
  wake_cause_[ri] = cause;
  end_wait(r, t);
  push(t, r);
}

// ---- transfers ------------------------------------------------------------------------------
void Engine::complete(int32_t id, double end, int32_t cause) {
  MsgState& ms = msgs_[id];
  ms.end = end;
  ms.cause = cause;
  msgs_.completed(id);
  maybe_wake(model_.rank_of(model_.messages[static_cast<size_t>(id)]));
}

// Both ends (or an eager sender) known: decide the transfer's times. The critical path
// runs producer -> send slice -> consumer, so a completion's cause is the send slice when
// the payload was what everybody waited for, else the receiver's own slice.
void Engine::settle(int32_t send_id, int32_t recv_id) {
  const Message& ms = model_.messages[static_cast<size_t>(send_id)];
  MsgState& s = msgs_[send_id];
  const Channel& ch = model_.channels[static_cast<size_t>(ms.channel)];
  const Link& link = *channel_link_[static_cast<size_t>(ms.channel)];
  const double bytes = price(ms);
  const bool is_eager = prices_.eager(bytes);
  if (s.end == kUnknown && is_eager) {
    // Leaves when ready, completes without its receiver.
    double end = s.ready + link.transfer_ms(bytes);
    if (s.slice >= 0) slices_[static_cast<size_t>(s.slice)].cause = s.ready_cause;
    complete(send_id, end, s.slice);
    account(ch, bytes);
  }
  if (recv_id < 0) return;
  MsgState& rv = msgs_[recv_id];
  if (rv.end != kUnknown || rv.slice < 0 || s.slice < 0) return;
  const double rv_post = posted_at(rv);
  if (is_eager) {
    complete(recv_id, std::max(rv_post, s.end), s.end >= rv_post ? s.slice : rv.slice);
    return;
  }
  double start = std::max(s.ready, rv_post);
  if (!c_.protocol.background_progress) {
    const int q = model_.rank_of(model_.messages[static_cast<size_t>(recv_id)]);
    const double t = known_wait(q, start, recv_id);
    if (t == kUnknown) {
      stalled_[static_cast<size_t>(q)].push_back({send_id, recv_id, start});
      return;
    }
    start = deferred(start, t);
  }
  transfer(send_id, recv_id, start, bytes);
}

// A rendezvous transfer of `bytes` (the send's price) leaves at `start`: both complete a
// transfer time later.
void Engine::transfer(int32_t send_id, int32_t recv_id, double start, double bytes) {
  const Message& ms = model_.messages[static_cast<size_t>(send_id)];
  MsgState& s = msgs_[send_id];
  MsgState& rv = msgs_[recv_id];
  int32_t cause = rv.slice;
  if (s.ready >= posted_at(rv)) {
    if (s.slice >= 0) slices_[static_cast<size_t>(s.slice)].cause = s.ready_cause;
    cause = s.slice;
  }
  rv.ready = start;  // a receive's `ready`: when its transfer left (for the trace's flow)
  const Link& link = *channel_link_[static_cast<size_t>(ms.channel)];
  const double end = start + link.transfer_ms(bytes);
  account(model_.channels[static_cast<size_t>(ms.channel)], bytes);
  // send_handoff_ms (Gloo): the sender goes on once the transport took the payload.
  complete(send_id, c_.protocol.send_handoff_ms ? std::min(start + *c_.protocol.send_handoff_ms, end) : end, cause);
  complete(recv_id, end, cause);
}

// A trace's flow per matched pair, from the send's slice to the receive's.
void Engine::record_flows() {
  for (auto& [sid, rid] : pending_flows_) {
    const MsgState& a = msgs_[sid];
    const MsgState& b = msgs_[rid];
    if (a.slice < 0 || b.slice < 0) continue;
    // As settle() and transfer() timed it: an eager payload leaves when ready and arrives
    // when its send completes; a rendezvous one leaves when its transfer starts (the
    // receive's `ready`) and arrives when the receive completes.
    double leave = std::numeric_limits<double>::quiet_NaN(), arrive = leave;
    if (a.end != kUnknown) {
      const bool is_eager = prices_.eager(price(model_.messages[static_cast<size_t>(sid)]));
      leave = is_eager ? a.ready : b.ready;
      arrive = is_eager ? a.end : b.end;
    }
    rec_.flow(a.slice, b.slice, leave, arrive);
  }
}

// ---- background_progress false: a receiver takes a payload in only while it waits -------
// A CPU run with a core per rank (Gloo): a send's payload goes out when the sender posts it,
// and the receiving rank's transport thread reads it in on a free core, which it finds only
// while the receiver's host waits (or once it has finished): it does not get one while the
// rank computes, nor while it posts. So a rendezvous transfer that could start at t starts
// at the receiver's first waiting moment from t on. Each rank keeps the spans in which it
// waited. Ranks run ahead of each other: when the receiver's record does not reach t yet,
// the transfer is stalled under the receiver and tried again when it starts or stops
// waiting.

// The first moment >= t at which rank q is known to wait for receive `recv`, or kUnknown
// when its record does not tell yet. A rank that has waited since before t and is not woken
// yet still waits at t when it waits for `recv` itself (it cannot be woken before that
// arrives); otherwise only `assume_waiting` says so (see run()).
double Engine::known_wait(int q, double t, int32_t recv, bool assume_waiting) const {
  const auto& w = waits_[static_cast<size_t>(q)];
  auto it = std::partition_point(w.begin(), w.end(), [t](const WaitSpan& x) { return x.to != kUnknown && x.to <= t; });
  if (it == w.end()) return kUnknown;
  if (it->to != kUnknown || t <= it->from) return std::max(it->from, t);
  return assume_waiting || waits_for(q, recv) ? t : kUnknown;
}

bool Engine::waits_for(int q, int32_t msg) const {
  const size_t qi = static_cast<size_t>(q);
  if (!blocked_[qi] || pc_[qi] >= static_cast<int>(model_.actions[qi].size())) return false;
  const Action& a = model_.actions[qi][static_cast<size_t>(pc_[qi])];
  if (a.kind != ActionKind::Phase && a.kind != ActionKind::Wait) return false;
  for (int j = 0; j < a.count; ++j)
    if (model_.message_of(a, j) == msg) return true;
  return false;
}

bool Engine::start_any_stalled() {
  bool started = false;
  for (int q = 0; q < static_cast<int>(stalled_.size()); ++q) started = start_stalled(q, true) || started;
  return started;
}

// Starts rank q's stalled transfers whose start is known now; true when one started.
bool Engine::start_stalled(int q, bool assume_waiting) {
  auto& list = stalled_[static_cast<size_t>(q)];
  bool started = false;
  for (size_t k = 0; k < list.size();) {
    const Stalled x = list[k];
    const double t = known_wait(q, x.start, x.recv, assume_waiting);
    if (t == kUnknown) {
      ++k;
      continue;
    }
    list[k] = list.back();
    list.pop_back();
    transfer(x.send, x.recv, deferred(x.start, t), price(model_.messages[static_cast<size_t>(x.send)]));  // may wake a rank, which retries its own
    started = true;
  }
  return started;
}

}  // namespace ppsched::des
