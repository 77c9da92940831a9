#include "exec/runtime.hpp"

#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <exception>
#include <thread>

#include "exec/error_file.hpp"
#include "lowering/comm_model.hpp"

namespace ppsched::exec {
namespace {

constexpr int64_t kMetaMagic = 0x7070;  // "pp": a meta that does not start with it means channel drift
constexpr int kMetaSlots = 16;
constexpr int kMaxDims = kMetaSlots - 4;

// (step index, sub-step) of a message, as one key; sub-steps of a batch are few.
constexpr int32_t kMaxSubKey = 64;
int32_t key_of(const Message& m) { return m.step_index * kMaxSubKey + (m.sub + 1); }

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

std::string message_of(const std::exception& e) {
  // c10::Error's what() carries a C++ backtrace; the user needs the message.
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return verbose_errors() ? c->what() : c->what_without_backtrace();
  return e.what();
}

// ---- handler table ---------------------------------------------------------------------

const HandlerTable& handler_table() {
  static const HandlerTable table = [] {
    HandlerTable t{};
    register_compute_handlers(t);
    register_p2p_handlers(t);
    register_mpipe_handlers(t);
    register_fsdp_handlers(t);
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
  return dp.mesh.name(dp.global_rank) + " step " + std::to_string(at.index) + " (" + at.label() + ")";
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

StepFailure::StepFailure(int r, int it, int idx, std::string lbl, std::string what, bool c, int p, const std::string& name)
    : std::runtime_error((name.empty() ? "rank " + std::to_string(r) : name) + " failed at iteration " + std::to_string(it) + ", step " +
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
  // FSDP_REDUCE_GRAD averages this run's delta too (without --fsdp).
  snapshot_stage_grads(ctx_);
  // REPLICA_GRAD_SYNC sums this run's delta of a replicated stage's gradients over its copies.
  ctx_.replica_snapshot.clear();
  if (s.pipes > 1)
    for (size_t k = 0; k < ctx_.model.stages.size(); ++k)
      for (const auto& p : ctx_.model.stage_chain[k].trainable_parameters())
        ctx_.replica_snapshot[ctx_.model.stages[k]].push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
}

void Runtime::abort() noexcept {
  ctx_.caches.clear();
  ctx_.mpipe = MPipeState{};
}

void Runtime::inject_fault(int index) {
  if (!fault_ || fault_->rank != ctx_.dp.global_rank || fault_->step != index || fault_->iteration != ctx_.iteration) return;
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
    case FaultInjection::Mode::Delay: break;    // where the step starts, see run_iteration()
  }
}

void Runtime::corrupt_after(int index) {
  if (!fault_ || fault_->mode != FaultInjection::Mode::Corrupt || fault_->rank != ctx_.dp.global_rank ||
      fault_->step != index || fault_->iteration != ctx_.iteration)
    return;
  torch::NoGradGuard no_grad;
  // After a step that received a micro-batch (a data receive: hyper-parallel's body data steps
  // or the MPipe prefix), perturb what arrived instead: the labels the last stage's loss uses
  // then differ from the reference's unless the loss does not take them from what travelled.
  const Slot& slot = ctx_.schedule.programs[static_cast<size_t>(ctx_.rank)][static_cast<size_t>(index)];
  if (slot && is_recv(slot->op) && info(slot->op).payload == Payload::Data &&
      ctx_.caches.has(Cache::data_batch, -1, slot->micro)) {
    at::Tensor& d = ctx_.caches.read(Cache::data_batch, -1, slot->micro, "--fail-at").tensors.at(0);
    if (d.is_floating_point()) d.mul_(1.001);
    else d.add_(1).remainder_(ctx_.model_config.vocab);  // token ids
    return;
  }
  for (auto& [name, p] : ctx_.model.named_parameters())
    if (p.grad().defined()) p.mutable_grad().mul_(1.001);
}

Runtime::Runtime(RunContext& ctx, const CommModel& lowering, Progress& progress, std::function<void()> poll_peers,
                 std::optional<FaultInjection> fault)
    : ctx_(ctx), lowering_(lowering), progress_(progress),
      poll_peers_(std::move(poll_peers)), fault_(fault) {
  const auto& prog = ctx_.schedule.programs[static_cast<size_t>(ctx_.rank)];
  payload_count_.assign((prog.size() + 1) * kMaxSubKey, 0);
  for (const Message& m : lowering_.messages)
    if (lowering_.rank_of(m) == ctx_.rank) {
      if (m.sub + 1 >= kMaxSubKey)
        throw std::runtime_error("a batch of more than " + std::to_string(kMaxSubKey - 1) + " sub-steps at step " +
                                 std::to_string(m.step_index) + " is more than the executor keys");
      if (!m.meta) ++payload_count_[static_cast<size_t>(key_of(m))];
    }
}

const TensorMeta& arrived_meta(const RunContext& c, const StepAt& at, const ArrivedMetas& metas, int t) {
  if (t >= static_cast<int>(metas.size()) || !metas[static_cast<size_t>(t)])
    throw std::logic_error(c.who(at) + ": the lowering delivers no shape/dtype meta before tensor " + std::to_string(t));
  return *metas[static_cast<size_t>(t)];
}

void Runtime::run_iteration(int iteration) {
  ctx_.iteration = iteration;
  ctx_.loss = 0;
  ctx_.messages.clear();
  ctx_.collectives.clear();
  progress_.iteration = iteration;
  progress_.step = -1;
  const auto& prog = ctx_.schedule.programs[static_cast<size_t>(ctx_.rank)];
  const auto& actions = lowering_.actions[static_cast<size_t>(ctx_.rank)];
  int index = -1;
  std::string label = "before the first step";
  // With expert parallelism this thread holds the link's baton while it computes.
  struct Baton {
    ExpertLink* link;
    explicit Baton(ExpertLink* l) : link(l) {
      if (link) link->acquire();
    }
    ~Baton() {
      if (link) link->release();
    }
  } baton(ctx_.experts);
  if (ctx_.experts) ctx_.experts->set_clock(ctx_.clock);
  try {
    reset();
    failed_peer_ = -1;
    progress_.waiting_on = -1;
    in_flight_.clear();
    post_of_.clear();
    posts_.clear();
    post_slice_.clear();
    for (size_t k = 0; k < actions.size(); ++k) {
      const Action& a = actions[k];
      index = a.step_index;
      label = prog[static_cast<size_t>(index)] ? short_label(*prog[static_cast<size_t>(index)]) : "the end of the run";
      const bool first = k == 0 || actions[k - 1].step_index != index;
      const bool last = k + 1 == actions.size() || actions[k + 1].step_index != index;
      if (first) {
        progress_.step = index;
        poll_peers_();
        inject_fault(index);
        if (ctx_.experts) ctx_.experts->begin_step(index);
      }
      const bool delay = first && fault_ && fault_->mode == FaultInjection::Mode::Delay &&
                         fault_->rank == ctx_.dp.global_rank && fault_->step == index && fault_->iteration == iteration;
      switch (a.kind) {
        case ActionKind::Local:
        case ActionKind::Collective: {
          const Step& st = *prog[static_cast<size_t>(index)];
          if (ctx_.experts) {
            ExpertLink::current = StepSlot{iteration, index, -1, st.micro, static_cast<int>(st.op), short_label(st)};
            if (is_overlap(st.op) && st.sub_steps().size() == 2) {
              run_overlap_with_experts(st, index, delay);
              break;
            }
          }
          if (delay) std::this_thread::sleep_for(std::chrono::milliseconds(300));
          if (is_overlap(st.op)) {
            // Sub-steps run one after the other, in their listed order: hyper-parallel's
            // behaviour without an overlap callback. Correct, but no compute/compute overlap.
            for (size_t j = 0; j < st.sub_steps().size(); ++j) run_step(st.sub_steps()[j], index, static_cast<int>(j));
          } else {
            run_step(st, index, -1);
          }
          break;
        }
        case ActionKind::Phase: run_phase(a); break;
        case ActionKind::Post: run_post(a); break;
        case ActionKind::Wait: run_wait(a); break;
      }
      if (last) {
        corrupt_after(index);
        if (ctx_.experts) ctx_.experts->end_step(index);
      }
    }
    label = "after the last step";
    // The transport saw every message the actions listed: no P2P step is left half done.
    if (!posts_.empty()) throw std::logic_error("the run ended with posted messages nobody waited for");
    if (!in_flight_.empty())
      throw std::logic_error("the run ended with " + in_flight_.begin()->second.at.label() + " not completed");
    auto left = ctx_.caches.leftovers();
    if (!left.empty()) throw std::runtime_error("the run ended with cache entries no step consumed: " + join(left));
  } catch (const PeerFailure&) {
    abort();
    throw;
  } catch (const TransportError& e) {
    abort();
    throw StepFailure(ctx_.dp.global_rank, iteration, index, label, e.what(), true, peer_at(index),
                      ctx_.dp.mesh.name(ctx_.dp.global_rank));
  } catch (const std::exception& e) {
    abort();
    throw StepFailure(ctx_.dp.global_rank, iteration, index, label, message_of(e), false, peer_at(index),
                      ctx_.dp.mesh.name(ctx_.dp.global_rank));
  }
}

namespace {

// Marks a blocking transport call: the heartbeat publishes its peer while it runs. When it
// throws (a timeout), that peer is the one the failure names, and it stays published: this
// rank still waits for that peer as far as the other ranks' wait chains are concerned (they
// time out at about the same moment and follow the chain through this rank).
class BlockedOn {
 public:
  BlockedOn(Progress& p, int& failed_peer, int peer)
      : p_(p), failed_(failed_peer), peer_(peer), exceptions_(std::uncaught_exceptions()) {
    p_.waiting_on = peer;
  }
  ~BlockedOn() {
    if (std::uncaught_exceptions() > exceptions_)
      failed_ = peer_;
    else
      p_.waiting_on = -1;
  }
  BlockedOn(const BlockedOn&) = delete;
  BlockedOn& operator=(const BlockedOn&) = delete;

 private:
  Progress& p_;
  int& failed_;
  int peer_, exceptions_;
};

}  // namespace

int Runtime::peer_at(int index) const {
  if (failed_peer_ >= 0) return failed_peer_;
  const auto& prog = ctx_.schedule.programs[static_cast<size_t>(ctx_.rank)];
  if (index < 0 || index >= static_cast<int>(prog.size()) || !prog[static_cast<size_t>(index)]) return -1;
  const Step& st = *prog[static_cast<size_t>(index)];
  const Step& leaf = is_batch(st.op) && !st.sub_steps().empty() ? st.sub_steps().front() : st;
  // A global rank, like StepFailure's own (the watchdog follows wait chains in global ranks).
  return is_p2p(leaf.op) ? ctx_.dp.mesh.global_rank(ctx_.dp.replica, peer_of(ctx_.schedule, ctx_.rank, leaf)) : -1;
}

void Runtime::run_overlap_with_experts(const Step& st, int index, bool delay) {
  ExpertLink& link = *ctx_.experts;
  const StepSlot base = ExpertLink::current;
  // Traced: one compute slice for the whole step, as the simulator draws a composite whose
  // chains share the streams; the all-to-alls are the comm lane's slices (ExpertLink).
  const size_t mark = ctx_.clock ? ctx_.clock->begin() : 0;
  auto slot_of = [&](int sub) {
    const Step& leaf = st.sub_steps()[static_cast<size_t>(sub)];
    return StepSlot{base.iteration, index, sub, leaf.micro, static_cast<int>(leaf.op), short_label(leaf)};
  };
  std::exception_ptr second_error;
  // The caller holds the baton (run_iteration); the second thread waits for it.
  std::thread second([&] {
    ExpertLink::current = slot_of(1);
    link.acquire();
    try {
      run_step(st.sub_steps()[1], index, 1, /*timed=*/false);
    } catch (const std::exception& e) {
      second_error = std::current_exception();
      link.fail(message_of(e));
    } catch (...) {
      second_error = std::current_exception();
      link.fail("the second sub-step failed");
    }
    link.release();
  });
  std::exception_ptr first_error;
  ExpertLink::current = slot_of(0);
  try {
    if (delay) {
      link.release();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      link.acquire();
    }
    run_step(st.sub_steps()[0], index, 0, /*timed=*/false);
  } catch (const std::exception& e) {
    first_error = std::current_exception();
    link.fail(message_of(e));
  }
  // Let the second sub-step finish (or fail), then take the baton back.
  link.release();
  second.join();
  link.acquire();
  ExpertLink::current = base;
  if (first_error) std::rethrow_exception(first_error);
  if (second_error) std::rethrow_exception(second_error);
  if (ctx_.clock)
    ctx_.clock->end(mark, interval_of(StepAt{st, index, -1, conditions_of(ctx_.schedule, ctx_.rank, st)}, Lane::Compute));
}

void Runtime::run_step(const Step& step, int index, int sub, bool timed) {
  const Handler& h = handler_table()[static_cast<size_t>(step.op)];
  if (!h.run) throw std::logic_error(std::string("no handler for ") + std::string(op_name(step.op)));
  StepAt at{step, index, sub, conditions_of(ctx_.schedule, ctx_.rank, step)};
  audit_before(ctx_.caches, step, at.cond);
  const bool collective = info(step.op).kind == StepKind::Collective;
  ctx_.collective_bytes = 0;
  if (!ctx_.clock || !timed) {
    h.run(ctx_, at);
  } else {
    // The collective's bytes are known once its handler ran.
    const size_t mark = ctx_.clock->begin();
    h.run(ctx_, at);
    ctx_.clock->end(mark, interval_of(at, collective ? Lane::Collective : Lane::Compute, ctx_.collective_bytes));
  }
  audit_after(ctx_.caches, step, at.cond);
}

// The P2P (sub-)step a message belongs to, begun at its first message: a send takes its
// payloads out of the caches then (its metas describe them).
Runtime::InFlight& Runtime::in_flight(const Message& msg) {
  const int32_t key = key_of(msg);
  auto it = in_flight_.find(key);
  if (it != in_flight_.end()) return it->second;
  const Step& top = *ctx_.schedule.programs[static_cast<size_t>(ctx_.rank)][static_cast<size_t>(msg.step_index)];
  const Step& leaf = msg.sub >= 0 ? top.sub_steps()[static_cast<size_t>(msg.sub)] : top;
  const Handler& h = handler_table()[static_cast<size_t>(leaf.op)];
  if (!h.begin || !h.finish) throw std::logic_error(short_label(leaf) + " has no P2P handler");
  InFlight f{StepAt{leaf, static_cast<int>(msg.step_index), msg.sub, conditions_of(ctx_.schedule, ctx_.rank, leaf)}, &h, {}, {},
             payload_count_[static_cast<size_t>(key)]};
  audit_before(ctx_.caches, leaf, f.at.cond);
  auto& placed = in_flight_.emplace(key, std::move(f)).first->second;
  if (msg.send) begin_payloads(placed);
  return placed;
}

void Runtime::begin_payloads(InFlight& f) {
  f.ops = f.handler->begin(ctx_, f.at, f.metas);
  // Cheap check that the handler ships what the lowering carries.
  if (static_cast<int>(f.ops.size()) != f.payloads_left)
    throw std::logic_error(f.at.label() + " has " + std::to_string(f.ops.size()) + " tensors, the lowering carries " +
                           std::to_string(f.payloads_left));
}

void Runtime::payload_done(InFlight& f, int32_t key) {
  if (--f.payloads_left > 0) return;
  // A receive that computes (MPIPE_GRAD_RECV_WITH_BACKWARD) does it in finish(): the
  // compute lane's slice, as the simulator draws it.
  if (info(f.at.step.op).compute != ComputeKind::None)
    ctx_.timed(interval_of(f.at, Lane::Compute), [&] { f.handler->finish(ctx_, f.at, f.ops); });
  else
    f.handler->finish(ctx_, f.at, f.ops);
  audit_after(ctx_.caches, f.at.step, f.at.cond);
  in_flight_.erase(key);
}

// The payload operations of `msgs` (logged in order), beginning the receives' buffers now
// that their metas arrived.
std::vector<P2POp> Runtime::payload_ops(const std::vector<const Message*>& msgs, std::vector<InFlight*>& owners,
                                        bool& sends, double& bytes) {
  std::vector<P2POp> ops;
  for (const Message* m : msgs) {
    if (m->meta) throw std::logic_error("an action mixes metas and payloads");
    InFlight& f = in_flight(*m);
    if (!m->send && f.ops.empty()) begin_payloads(f);
    P2POp op = f.ops.at(static_cast<size_t>(m->tensor));
    if (op.send) op.tensor = op.tensor.detach();  // the transport reads the values only
    const Channel& ch = lowering_.channels[static_cast<size_t>(m->channel)];
    if (op.peer != (m->send ? ch.dst : ch.src))
      throw std::logic_error(f.at.label() + " talks to another rank than its lowering");
    ctx_.messages.push_back({op.peer, op.send, false, f.at.index, f.at.sub, static_cast<int>(m->tensor)});
    ops.push_back(op);
    owners.push_back(&f);
    sends = sends || op.send;
    bytes += static_cast<double>(op.tensor.nbytes());
  }
  return ops;
}

void Runtime::run_post(const Action& a) {
  if (!ctx_.transport.non_blocking())
    throw std::logic_error("the " + ctx_.transport.name() + " transport has no non-blocking P2P for this mode");
  std::vector<const Message*> msgs;
  std::vector<int32_t> ids;
  for (int k = 0; k < a.count; ++k) {
    ids.push_back(lowering_.message_of(a, k));
    msgs.push_back(&lowering_.messages[static_cast<size_t>(ids.back())]);
  }
  if (msgs.empty()) return;
  std::vector<InFlight*> owners;
  bool sends = false;
  double bytes = 0;
  const int first = static_cast<int>(ctx_.messages.size());
  std::vector<P2POp> ops = payload_ops(msgs, owners, sends, bytes);
  const Step& top = *ctx_.schedule.programs[static_cast<size_t>(ctx_.rank)][static_cast<size_t>(a.step_index)];
  const StepAt at = msgs.size() == 1 ? owners[0]->at : StepAt{top, a.step_index, -1, 0};
  int handle = -1;
  const size_t slice = ctx_.timed(
      interval_of(at, sends ? Lane::Send : Lane::Recv, bytes, false, first, static_cast<int>(ops.size())),
      [&] { handle = ctx_.transport.post(ops); });
  for (int32_t id : ids) post_of_[id] = handle;
  posts_[handle] = ids;
  if (slice != RunContext::kUntimed) post_slice_[handle] = slice;
}

void Runtime::run_wait(const Action& a) {
  for (int k = 0; k < a.count; ++k) {
    const int32_t id = lowering_.message_of(a, k);
    auto p = post_of_.find(id);
    if (p == post_of_.end()) throw std::logic_error("a wait on a message that was never posted");
    auto h = posts_.find(p->second);
    if (h == posts_.end()) continue;  // its post was waited already (a batch serves several consumers)
    const std::vector<int32_t> done = std::move(h->second);
    posts_.erase(h);
    {
      const Message& m = lowering_.messages[static_cast<size_t>(done.front())];
      const Channel& ch = lowering_.channels[static_cast<size_t>(m.channel)];
      BlockedOn blocked(progress_, failed_peer_, ctx_.dp.mesh.global_rank(ctx_.dp.replica, m.send ? ch.dst : ch.src));
      ctx_.transport.wait(p->second);
    }
    // Traced: the post's slice runs until its wait returned, as the simulator draws it (from
    // the post to the completion), so the flow that ends in it ends after it began.
    if (auto s = post_slice_.find(p->second); s != post_slice_.end()) {
      if (ctx_.clock) ctx_.clock->extend(s->second);
      post_slice_.erase(s);
    }
    for (int32_t m : done) {
      const int32_t key = key_of(lowering_.messages[static_cast<size_t>(m)]);
      payload_done(in_flight_.at(key), key);
    }
  }
}

// A phase: its messages posted, blocking until all matched. A meta alone; a single payload;
// or a batch's payloads as one group (NCCL group semantics, reference §3.3).
void Runtime::run_phase(const Action& a) {
  std::vector<const Message*> msgs;
  for (int k = 0; k < a.count; ++k)
    msgs.push_back(&lowering_.messages[static_cast<size_t>(lowering_.message_of(a, k))]);
  if (msgs.empty()) return;
  auto peer_of_msg = [&](const Message& m) {
    const Channel& ch = lowering_.channels[static_cast<size_t>(m.channel)];
    return m.send ? ch.dst : ch.src;
  };
  BlockedOn blocked(progress_, failed_peer_, ctx_.dp.mesh.global_rank(ctx_.dp.replica, peer_of_msg(*msgs[0])));
  if (msgs.size() == 1 && msgs[0]->meta) {
    const Message& m = *msgs[0];
    InFlight& f = in_flight(m);
    if (m.send) {
      ctx_.send_meta(f.at, peer_of_msg(m), meta_of(f.ops.at(static_cast<size_t>(m.tensor)).tensor), m.tensor);
    } else {
      if (static_cast<int>(f.metas.size()) <= m.tensor) f.metas.resize(static_cast<size_t>(m.tensor) + 1);
      f.metas[static_cast<size_t>(m.tensor)] = ctx_.recv_meta_from(f.at, peer_of_msg(m), m.tensor);
    }
    return;
  }
  std::vector<InFlight*> owners;
  bool sends = false;
  double bytes = 0;
  const int first = static_cast<int>(ctx_.messages.size());
  std::vector<P2POp> ops = payload_ops(msgs, owners, sends, bytes);
  if (msgs.size() == 1 && msgs[0]->batch() < 0) {
    P2POp& op = ops[0];
    ctx_.timed(interval_of(owners[0]->at, op.send ? Lane::Send : Lane::Recv, bytes, false, first, 1), [&] {
      if (op.send)
        ctx_.transport.send(op.tensor, op.peer);
      else
        ctx_.transport.recv(op.tensor, op.peer);
    });
  } else {
    // One slice for the whole group, on the send lane when it sends anything (as the simulator).
    const Step& batch = *ctx_.schedule.programs[static_cast<size_t>(ctx_.rank)][static_cast<size_t>(a.step_index)];
    ctx_.timed(interval_of(StepAt{batch, a.step_index, -1, 0}, sends ? Lane::Send : Lane::Recv, bytes, false, first,
                           static_cast<int>(ops.size())),
               [&] { ctx_.transport.group(ops); });
  }
  // Received tensors were filled in place (ops holds the handlers' tensors).
  for (size_t k = 0; k < msgs.size(); ++k) payload_done(*owners[k], key_of(*msgs[k]));
}

}  // namespace ppsched::exec
