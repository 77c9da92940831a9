#include "exec/runtime.hpp"

#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <thread>

#include "lowering/comm_model.hpp"

namespace ppsched::exec {
namespace {

constexpr int64_t kMetaMagic = 0x7070;  // "pp": a meta that does not start with it means channel drift
constexpr int kMetaSlots = 16;
constexpr int kMaxDims = kMetaSlots - 4;

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

std::string message_of(const std::exception& e) {
  // c10::Error's what() carries a C++ backtrace; the user needs the message.
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

// ---- handler table ---------------------------------------------------------------------

const HandlerTable& handler_table() {
  static const HandlerTable table = [] {
    HandlerTable t{};
    register_compute_handlers(t);
    register_p2p_handlers(t);
    register_mpipe_handlers(t);
    return t;
  }();
  return table;
}

bool has_handler(Op op) {
  // Composites are run by the runtime itself (their leaves go through the table).
  if (is_composite(op)) return true;
  const Handler& h = handler_table()[static_cast<size_t>(op)];
  return h.run || (h.begin && h.finish);
}

// ---- context helpers -------------------------------------------------------------------

std::string RunContext::who(const StepAt& at) const {
  return "rank " + std::to_string(rank) + " step " + std::to_string(at.index) + " (" + at.label() + ")";
}

TensorMeta meta_of(const at::Tensor& t) {
  TensorMeta m;
  m.shape = t.sizes().vec();
  m.dtype = t.scalar_type();
  m.requires_grad = t.requires_grad();
  return m;
}

at::Tensor empty_like_meta(const TensorMeta& m, at::Device device) {
  return torch::empty(m.shape, torch::TensorOptions().dtype(m.dtype).device(device));
}

void RunContext::send_meta(const StepAt& at, int to, const TensorMeta& m, int tensor) {
  if (static_cast<int>(m.shape.size()) > kMaxDims) throw std::runtime_error("tensor has more than 12 dimensions");
  std::vector<int64_t> v(kMetaSlots, 0);
  v[0] = kMetaMagic;
  v[1] = static_cast<int64_t>(m.dtype);
  v[2] = m.requires_grad ? 1 : 0;
  v[3] = static_cast<int64_t>(m.shape.size());
  for (size_t k = 0; k < m.shape.size(); ++k) v[4 + k] = m.shape[k];
  at::Tensor t = torch::tensor(v, torch::kLong).to(device);
  messages.push_back({to, true, true, at.index, at.sub, tensor});
  timed(interval_of(at, Lane::Send, static_cast<double>(t.nbytes()), true, static_cast<int>(messages.size()) - 1, 1),
        [&] { transport.send(t, to); });
}

TensorMeta RunContext::recv_meta_from(const StepAt& at, int from, int tensor) {
  at::Tensor t = torch::empty({kMetaSlots}, torch::TensorOptions().dtype(torch::kLong).device(device));
  messages.push_back({from, false, true, at.index, at.sub, tensor});
  timed(interval_of(at, Lane::Recv, static_cast<double>(t.nbytes()), true, static_cast<int>(messages.size()) - 1, 1),
        [&] { transport.recv(t, from); });
  at::Tensor h = t.cpu();
  const int64_t* v = h.data_ptr<int64_t>();
  if (v[0] != kMetaMagic || v[3] < 0 || v[3] > kMaxDims)
    throw std::runtime_error(who(at) + " received a malformed shape/dtype meta from rank " + std::to_string(from) +
                             ": the channel drifted (a payload arrived where a meta was expected)");
  TensorMeta m;
  m.dtype = static_cast<at::ScalarType>(v[1]);
  m.requires_grad = v[2] != 0;
  m.shape.assign(v + 4, v + 4 + v[3]);
  return m;
}

double bytes_of(const std::vector<at::Tensor>& ts) {
  double b = 0;
  for (const auto& t : ts) b += static_cast<double>(t.nbytes());
  return b;
}

void RunContext::collective(const StepAt& at, const std::vector<int>& members) {
  collectives.push_back({at.step.op, members, at.index});
}

StepFailure::StepFailure(int r, int it, int idx, std::string lbl, std::string what, bool c, int p)
    : std::runtime_error("rank " + std::to_string(r) + " failed at iteration " + std::to_string(it) + ", step " +
                         std::to_string(idx) + " (" + lbl + "): " + what),
      rank(r), iteration(it), index(idx), label(std::move(lbl)), reason(std::move(what)), comm(c), peer(p) {}

// ---- the run loop ----------------------------------------------------------------------

void Runtime::reset() {
  refuse_leftovers(ctx_.caches);
  const auto& s = ctx_.schedule;
  ctx_.mpipe = MPipeState{};
  if (s.mpipe && s.mpipe->owner_backward && ctx_.model.tower_trainable) {
    // GRAD_REDUCE sums only this run's tower-gradient delta over the replicas.
    for (const auto& p : ctx_.model.tower.trainable_parameters())
      ctx_.mpipe.grad_snapshot.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
    ctx_.mpipe.snapshot_taken = true;
  }
  // Tied parameters: ALL_REDUCE sums this run's delta too, so accumulating over iterations
  // without an optimizer step does not count earlier iterations twice.
  ctx_.tied_snapshot.clear();
  for (const auto& p : ctx_.model.tied)
    ctx_.tied_snapshot.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
}

void Runtime::abort() noexcept {
  ctx_.caches.clear();
  ctx_.mpipe = MPipeState{};
}

void Runtime::inject_fault(int index) {
  if (!fault_ || fault_->rank != ctx_.rank || fault_->step != index || fault_->iteration != ctx_.iteration) return;
  switch (fault_->mode) {
    case FaultInjection::Mode::Throw: throw std::runtime_error("injected fault (--fail-at)");
    case FaultInjection::Mode::Kill:
      // Give the heartbeat a moment to publish this step, then die without any cleanup.
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
      std::raise(SIGKILL);
      break;
    case FaultInjection::Mode::Hang:
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    case FaultInjection::Mode::Corrupt: break;  // after the step, see corrupt_after()
  }
}

void Runtime::corrupt_after(int index) {
  if (!fault_ || fault_->mode != FaultInjection::Mode::Corrupt || fault_->rank != ctx_.rank ||
      fault_->step != index || fault_->iteration != ctx_.iteration)
    return;
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : ctx_.model.named_parameters())
    if (p.grad().defined()) p.mutable_grad().mul_(1.001);
}

void Runtime::run_iteration(int iteration) {
  ctx_.iteration = iteration;
  ctx_.loss = 0;
  ctx_.messages.clear();
  ctx_.collectives.clear();
  progress_.iteration = iteration;
  progress_.step = -1;
  const auto& prog = ctx_.schedule.programs[static_cast<size_t>(ctx_.rank)];
  int index = -1;
  std::string label = "before the first step";
  try {
    reset();
    for (index = 0; index < static_cast<int>(prog.size()); ++index) {
      const Slot& slot = prog[static_cast<size_t>(index)];
      if (!slot) continue;  // a bubble: kept for display, skipped when run
      label = short_label(*slot);
      progress_.step = index;
      poll_peers_();
      inject_fault(index);
      dispatch(*slot, index, -1);
      corrupt_after(index);
    }
    label = "after the last step";
    auto left = ctx_.caches.leftovers();
    if (!left.empty()) throw std::runtime_error("the run ended with cache entries no step consumed: " + join(left));
  } catch (const PeerFailure&) {
    abort();
    throw;
  } catch (const TransportError& e) {
    abort();
    throw StepFailure(ctx_.rank, iteration, index, label, e.what(), true, peer_at(index));
  } catch (const std::exception& e) {
    abort();
    throw StepFailure(ctx_.rank, iteration, index, label, message_of(e), false, peer_at(index));
  }
}

int Runtime::peer_at(int index) const {
  const auto& prog = ctx_.schedule.programs[static_cast<size_t>(ctx_.rank)];
  if (index < 0 || index >= static_cast<int>(prog.size()) || !prog[static_cast<size_t>(index)]) return -1;
  const Step& st = *prog[static_cast<size_t>(index)];
  const Step& leaf = is_batch(st.op) && !st.sub_steps.empty() ? st.sub_steps.front() : st;
  return is_p2p(leaf.op) ? peer_of(ctx_.schedule, ctx_.rank, leaf) : -1;
}

void Runtime::dispatch(const Step& step, int index, int sub) {
  if (is_overlap(step.op)) {
    // Sub-steps run one after the other, in their listed order: hyper-parallel's behaviour
    // without an overlap callback. Correct, but no compute/compute overlap.
    for (size_t k = 0; k < step.sub_steps.size(); ++k) dispatch(step.sub_steps[k], index, static_cast<int>(k));
    return;
  }
  if (is_batch(step.op)) {
    run_batch(step, index);
    return;
  }
  const Handler& h = handler_table()[static_cast<size_t>(step.op)];
  StepAt at{step, index, sub, conditions_of(ctx_.schedule, ctx_.rank, step)};
  audit_before(ctx_.caches, step, at.cond);
  if (h.run) {
    const bool collective = info(step.op).kind == StepKind::Collective;
    ctx_.collective_bytes = 0;
    if (!ctx_.clock) {
      h.run(ctx_, at);
    } else {
      // The collective's bytes are known once its handler ran.
      const size_t mark = ctx_.clock->begin();
      h.run(ctx_, at);
      ctx_.clock->end(mark, interval_of(at, collective ? Lane::Collective : Lane::Compute, ctx_.collective_bytes));
    }
  } else if (h.begin && h.finish) {
    // A single P2P step: its metas are exchanged inside begin(); each payload then blocks at
    // the step, in tensor order (comm model: one Phase per payload).
    std::vector<P2POp> ops = h.begin(ctx_, at);
    for (size_t t = 0; t < ops.size(); ++t) {
      auto& op = ops[t];
      ctx_.messages.push_back({op.peer, op.send, false, index, sub, static_cast<int>(t)});
      ctx_.timed(interval_of(at, op.send ? Lane::Send : Lane::Recv, static_cast<double>(op.tensor.nbytes()), false,
                             static_cast<int>(ctx_.messages.size()) - 1, 1),
                 [&] {
                   if (op.send)
                     ctx_.transport.send(op.tensor, op.peer);
                   else
                     ctx_.transport.recv(op.tensor, op.peer);
                 });
    }
    // A receive that computes (MPIPE_GRAD_RECV_WITH_BACKWARD) does it in finish(): the
    // compute lane's slice, as the simulator draws it.
    if (info(step.op).compute != ComputeKind::None)
      ctx_.timed(interval_of(at, Lane::Compute), [&] { h.finish(ctx_, at, ops); });
    else
      h.finish(ctx_, at, ops);
  } else {
    throw std::logic_error(std::string("no handler for ") + std::string(op_name(step.op)));
  }
  audit_after(ctx_.caches, step, at.cond);
}

void Runtime::run_batch(const Step& batch, int index) {
  // BATCH_SEND_RECV: the sub-steps' metas go one at a time, in sub-step order, while the
  // payload operations are built; then every payload is posted as one group (reference §3.3).
  std::vector<StepAt> ats;
  std::vector<std::vector<P2POp>> per_sub;
  std::vector<P2POp> all;
  for (size_t k = 0; k < batch.sub_steps.size(); ++k) {
    const Step& leaf = batch.sub_steps[k];
    const Handler& h = handler_table()[static_cast<size_t>(leaf.op)];
    if (!h.begin || !h.finish) throw std::logic_error(short_label(leaf) + " is not a P2P step and cannot be batched");
    ats.push_back(StepAt{leaf, index, static_cast<int>(k), conditions_of(ctx_.schedule, ctx_.rank, leaf)});
    audit_before(ctx_.caches, leaf, ats.back().cond);
    per_sub.push_back(h.begin(ctx_, ats.back()));
  }
  const int first = static_cast<int>(ctx_.messages.size());
  bool sends = false;
  double bytes = 0;
  for (size_t k = 0; k < per_sub.size(); ++k)
    for (size_t t = 0; t < per_sub[k].size(); ++t) {
      const auto& op = per_sub[k][t];
      ctx_.messages.push_back({op.peer, op.send, false, index, static_cast<int>(k), static_cast<int>(t)});
      all.push_back(op);
      sends = sends || op.send;
      bytes += static_cast<double>(op.tensor.nbytes());
    }
  // One slice for the whole group, on the send lane when it sends anything (as the simulator).
  ctx_.timed(interval_of(StepAt{batch, index, -1, 0}, sends ? Lane::Send : Lane::Recv, bytes, false, first,
                         static_cast<int>(all.size())),
             [&] { ctx_.transport.group(all); });
  // Received tensors were filled in place; `all` holds the same tensors as per_sub.
  for (size_t k = 0; k < ats.size(); ++k) {
    handler_table()[static_cast<size_t>(ats[k].step.op)].finish(ctx_, ats[k], per_sub[k]);
    audit_after(ctx_.caches, ats[k].step, ats[k].cond);
  }
}

// ---- conformance with the comm model ---------------------------------------------------

std::string compare_with_comm_model(const Schedule& s, const CheckOptions& mode, int rank, const std::vector<LoggedMessage>& got,
                                    const std::vector<LoggedCollective>& got_coll) {
  CommModel m = build_comm_model(s, mode);
  std::vector<LoggedMessage> want;
  for (const Action& a : m.actions[static_cast<size_t>(rank)]) {
    if (a.kind != ActionKind::Phase && a.kind != ActionKind::Post) continue;
    for (int k = 0; k < a.count; ++k) {
      const Message& msg = m.messages[static_cast<size_t>(m.action_messages[static_cast<size_t>(a.first + k)])];
      const Channel& ch = m.channels[static_cast<size_t>(msg.channel)];
      want.push_back({msg.send ? ch.dst : ch.src, msg.send, msg.meta, msg.step_index, msg.sub, msg.tensor});
    }
  }
  auto describe = [&](const LoggedMessage& x) {
    const Slot& slot = s.programs[static_cast<size_t>(rank)][static_cast<size_t>(x.step_index)];
    std::string lbl = slot ? short_label(x.sub >= 0 ? slot->sub_steps[static_cast<size_t>(x.sub)] : *slot) : "?";
    return std::string(x.meta ? "meta " : "payload ") + (x.send ? "send to " : "recv from ") + "rank " +
           std::to_string(x.peer) + " at step " + std::to_string(x.step_index) + " (" + lbl + ")";
  };
  for (size_t k = 0; k < std::max(want.size(), got.size()); ++k) {
    if (k >= got.size()) return "message " + std::to_string(k) + ": the comm model expects " + describe(want[k]) + ", the executor sent nothing more";
    if (k >= want.size()) return "message " + std::to_string(k) + ": the executor did " + describe(got[k]) + ", which the comm model does not have";
    const auto &a = got[k], &b = want[k];
    if (a.peer != b.peer || a.send != b.send || a.meta != b.meta || a.step_index != b.step_index || a.sub != b.sub ||
        a.tensor != b.tensor)
      return "message " + std::to_string(k) + ": the executor did " + describe(a) + ", the comm model expects " + describe(b);
  }
  const auto& calls = m.calls_by_rank[static_cast<size_t>(rank)];
  if (calls.size() != got_coll.size())
    return "the executor ran " + std::to_string(got_coll.size()) + " collectives, the comm model " + std::to_string(calls.size());
  for (size_t k = 0; k < calls.size(); ++k) {
    const auto& call = m.collective_calls[static_cast<size_t>(calls[k])];
    const auto& members = m.groups[static_cast<size_t>(call.group)].members;
    std::vector<int> want_members(members.begin(), members.end());
    if (call.op != got_coll[k].op || want_members != got_coll[k].members || call.step_index != got_coll[k].step_index)
      return "collective " + std::to_string(k) + " (" + std::string(op_name(got_coll[k].op)) + " at step " +
             std::to_string(got_coll[k].step_index) + ") differs from the comm model's " + std::string(op_name(call.op)) +
             " at step " + std::to_string(call.step_index);
  }
  return "";
}

}  // namespace ppsched::exec
