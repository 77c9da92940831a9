// Body point-to-point, data, tied-parameter and replicated-stage handlers.
//
// The handlers only take payloads out of their caches (sends) or size the buffers (receives)
// and store what arrived; the runtime exchanges every message where the lowering
// (lowering/comm_model.cpp) puts it, metas included (the step table's Meta column):
//  - FWD_SEND / FWD_RECV (Meta::FirstPerStage): a receive that got a meta caches it for the
//    stage; later receives of the stage reuse it (every step has one with --dyn-shape);
//  - BWD_SEND / BWD_RECV (Meta::None): no meta; the receiver sizes its gradient buffer from
//    the output meta its FWD_SEND recorded (hyper-parallel reserves the buffers at FWD_SEND);
//  - DATA_SEND / DATA_RECV (Meta::EveryStep): a meta before every tensor.
#include <torch/torch.h>

#include <algorithm>

#include "exec/runtime.hpp"

namespace ppsched::exec {
namespace {

std::vector<P2POp> begin_fwd_send(RunContext& c, const StepAt& at, const ArrivedMetas&) {
  const int s = at.step.stage, to = c.peer(at);
  at::Tensor out = c.caches.take(Cache::fwd_outputs_cache, s, at.step.micro, c.who(at)).tensors.at(0);
  c.fwd_output_meta[s] = meta_of(out);  // reserves the gradient buffers BWD_RECV will fill
  // Not detached here: its meta tells the receiver whether the input needs a gradient (the
  // runtime detaches what it hands to the transport).
  return {P2POp{true, to, out}};
}

std::vector<P2POp> begin_fwd_recv(RunContext& c, const StepAt& at, const ArrivedMetas& metas) {
  const int s = at.step.stage, from = c.peer(at);
  if (!metas.empty() && metas[0]) c.recv_meta[s] = *metas[0];
  auto it = c.recv_meta.find(s);
  if (it == c.recv_meta.end()) throw std::logic_error("no cached meta for stage " + std::to_string(s));
  return {P2POp{false, from, empty_like_meta(it->second, c.device)}};
}

void finish_fwd_recv(RunContext& c, const StepAt& at, std::vector<P2POp>& ops) {
  at::Tensor buf = ops.at(0).tensor;
  // The received activation is the stage's input leaf; it needs a gradient when the
  // sender's output had one.
  buf.requires_grad_(c.recv_meta.at(at.step.stage).requires_grad);
  c.caches.put(Cache::fwd_recv_buffer, at.step.stage, at.step.micro, {{buf}, {}, {}, false}, c.who(at));
}

std::vector<P2POp> begin_bwd_send(RunContext& c, const StepAt& at, const ArrivedMetas&) {
  auto grads = c.caches.take(Cache::bwd_cache, at.step.stage, at.step.micro, c.who(at)).tensors;
  return {P2POp{true, c.peer(at), grads.at(0)}};
}

std::vector<P2POp> begin_bwd_recv(RunContext& c, const StepAt& at, const ArrivedMetas&) {
  auto it = c.fwd_output_meta.find(at.step.stage);
  if (it == c.fwd_output_meta.end())
    throw std::runtime_error(c.who(at) + " receives a gradient before any FWD_SEND of stage " +
                             std::to_string(at.step.stage) + " sized it");
  TensorMeta m = it->second;
  m.requires_grad = false;
  return {P2POp{false, c.peer(at), empty_like_meta(m, c.device)}};
}

void finish_bwd_recv(RunContext& c, const StepAt& at, std::vector<P2POp>& ops) {
  c.caches.put(Cache::bwd_recv_buffer, at.step.stage, at.step.micro, {{ops.at(0).tensor}, {}, {}, false}, c.who(at));
}

void nothing_to_store(RunContext&, const StepAt&, std::vector<P2POp>&) {}

// ---- data ------------------------------------------------------------------------------

// One tensor per micro-batch carries its inputs and labels (exec/models.hpp, Dataset), held in
// the rank's data_batch cache (the table's effects say when): the MPipe prefix routes it owner
// -> rank 0; with body data steps (hyper-parallel's DATA_SEND/DATA_RECV beside every
// cross-rank forward) it travels with the forward and the last stage computes its loss from
// the labels that arrived (handlers_compute.cpp). hyper-parallel's DATA_LOAD loads at stage 0
// and in the prefix only; at a later stage it does nothing.
bool loads(const StepAt& at) {
  return ((at.cond & Prefix) && (at.cond & MPipe)) || ((at.cond & FirstStage) && (at.cond & DataSteps));
}

void run_data_load(RunContext& c, const StepAt& at) {
  if (!loads(at)) return;
  at::Tensor d = c.data.micro_batch(c.iteration, at.step.micro);
  c.caches.put(Cache::data_batch, -1, at.step.micro, {{d}, {}, {}, false}, c.who(at));
}

std::vector<P2POp> begin_data_send(RunContext& c, const StepAt& at, const ArrivedMetas&) {
  at::Tensor d = c.caches.take(Cache::data_batch, -1, at.step.micro, c.who(at)).tensors.at(0);
  return {P2POp{true, c.peer(at), d}};
}

std::vector<P2POp> begin_data_recv(RunContext& c, const StepAt& at, const ArrivedMetas& metas) {
  return {P2POp{false, c.peer(at), empty_like_meta(arrived_meta(c, at, metas, 0), c.device)}};
}

void finish_data_recv(RunContext& c, const StepAt& at, std::vector<P2POp>& ops) {
  c.caches.put(Cache::data_batch, -1, at.step.micro, {{ops.at(0).tensor}, {}, {}, false}, c.who(at));
}

// ---- tied parameters -------------------------------------------------------------------

// ALL_REDUCE over the step's group: sums this run's gradient delta of the tied weight (the
// embedding shared with the LM head) so every holder ends with the full gradient. Members
// that hold no copy contribute zeros.
void run_all_reduce(RunContext& c, const StepAt& at) {
  std::vector<int> members(at.step.group().begin(), at.step.group().end());
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  c.collective(at, members);
  if (members.size() <= 1) return;
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> deltas;
  for (size_t k = 0; k < c.model.tied.size(); ++k) {
    const auto& p = c.model.tied[k];
    deltas.push_back(p.grad().defined() ? p.grad() - c.tied_snapshot[k] : torch::zeros_like(p));
  }
  if (deltas.empty())
    deltas.push_back(torch::zeros({c.model_config.vocab, c.model_config.hidden},
                                  torch::TensorOptions().dtype(torch::kFloat).device(c.device)));
  c.collective_bytes = bytes_of(deltas);
  c.transport.all_reduce_sum(deltas, members);
  for (size_t k = 0; k < c.model.tied.size(); ++k) {
    at::Tensor p = c.model.tied[k];
    p.mutable_grad() = c.tied_snapshot[k] + deltas[k];
  }
}

// ---- replicated stages -----------------------------------------------------------------

// REPLICA_GRAD_SYNC: the copies of a replicated stage (Chimera, DualPipe) each accumulated the
// gradients of their own micro-batches; an all-reduce (sum) of this run's delta over the ranks
// holding the copies leaves every copy with the gradient of the whole batch.
void run_replica_grad_sync(RunContext& c, const StepAt& at) {
  const std::vector<int32_t> group = c.schedule.replica_ranks(at.step.stage);
  const std::vector<int> members(group.begin(), group.end());
  c.collective(at, members);
  if (members.size() <= 1) return;
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> params = c.model.chain_of(at.step.stage).trainable_parameters();
  const auto& snap = c.replica_snapshot.at(at.step.stage);
  std::vector<at::Tensor> deltas;
  for (size_t k = 0; k < params.size(); ++k)
    deltas.push_back(params[k].grad().defined() ? params[k].grad() - snap[k] : torch::zeros_like(params[k]));
  c.collective_bytes = bytes_of(deltas);
  c.transport.all_reduce_sum(deltas, members);
  for (size_t k = 0; k < params.size(); ++k) params[k].mutable_grad() = snap[k] + deltas[k];
}

}  // namespace

void register_p2p_handlers(HandlerTable& t) {
  auto p2p = [&](Op op, auto begin, auto finish) {
    t[static_cast<size_t>(op)].begin = begin;
    t[static_cast<size_t>(op)].finish = finish;
  };
  p2p(Op::FWD_SEND, begin_fwd_send, nothing_to_store);
  p2p(Op::FWD_RECV, begin_fwd_recv, finish_fwd_recv);
  p2p(Op::BWD_SEND, begin_bwd_send, nothing_to_store);
  p2p(Op::BWD_RECV, begin_bwd_recv, finish_bwd_recv);
  p2p(Op::DATA_SEND, begin_data_send, nothing_to_store);
  p2p(Op::DATA_RECV, begin_data_recv, finish_data_recv);
  t[static_cast<size_t>(Op::DATA_LOAD)].run = run_data_load;
  t[static_cast<size_t>(Op::ALL_REDUCE)].run = run_all_reduce;
  t[static_cast<size_t>(Op::REPLICA_GRAD_SYNC)].run = run_replica_grad_sync;
}

}  // namespace ppsched::exec
