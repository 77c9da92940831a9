// MPipe Transpose handlers, with the semantics of hyper-parallel's MPipe executor (reference
// hyper_parallel.md §1.3, §2.5, §4). The tower (the first T units of stage 0) is replicated on
// every rank; owners run it on the micro-batches they own and ship the features to rank 0.
//
// The executor's per-micro caches are the step table's: _inputs_for_explicit_forward,
// _outputs_for_stage0, _keep_grad, _outputs_for_bwd (plus tower_features = ctx.arg_mbs[m]
// and feature_grads = the gradients the body backward leaves on the placed features).
// Runtime::reset() refuses to start while any entry is left; Runtime::abort() drops them.
//
// Two backward modes for a trainable tower:
//  - stage-0 backward (default): MPIPE_TRANSPOSE_FWD detaches its output and makes it a leaf
//    that requires grad; rank 0 keeps the tower input (shipped by MPIPE_GRAPH_SEND when the
//    owner is another rank) and MPIPE_TRANSPOSE_BWD recomputes the tower from it and
//    backprops the features' gradients: the tower gradients live on rank 0 only;
//  - owner backward: an owner keeps its tower output attached to the graph, rank 0 ships the
//    feature gradients back (MPIPE_GRAD_SEND) and the owner backprops them
//    (MPIPE_GRAD_RECV_WITH_BACKWARD); rank 0's own micros backprop straight through; finally
//    MPIPE_GRAD_REDUCE sums this run's tower-gradient delta over all ranks.
// Every transfer sends a shape/dtype meta before each tensor (Meta::EveryStep).
#include <torch/torch.h>

#include "exec/runtime.hpp"

namespace ppsched::exec {
namespace {

std::vector<int> all_ranks(const RunContext& c) {
  std::vector<int> v;
  for (int r = 0; r < c.schedule.ranks; ++r) v.push_back(r);
  return v;
}

// One tensor per transfer (MPipe transfers carry one tensor per step here); the runtime sends
// and receives its meta first, where the lowering puts it (Meta::EveryStep).
std::vector<P2POp> send_one(RunContext& c, const StepAt& at, at::Tensor t) { return {P2POp{true, c.peer(at), t.detach()}}; }
std::vector<P2POp> recv_with_meta(RunContext& c, const StepAt& at, const ArrivedMetas& metas) {
  return {P2POp{false, c.peer(at), empty_like_meta(arrived_meta(c, at, metas, 0), c.device)}};
}
void nothing_to_store(RunContext&, const StepAt&, std::vector<P2POp>&) {}

// MPIPE_PARAM_BROADCAST: every rank starts from rank 0's trainable tower parameters.
void run_param_broadcast(RunContext& c, const StepAt& at) {
  c.collective(at, all_ranks(c));
  std::vector<at::Tensor> params;
  for (const auto& p : c.model.tower.trainable_parameters()) params.push_back(p.detach());
  c.collective_bytes = bytes_of(params);
  if (!params.empty()) c.transport.broadcast(params, 0, {});
}

// MPIPE_TRANSPOSE_FWD: run the tower on a micro this rank owns.
void run_transpose_fwd(RunContext& c, const StepAt& at) {
  const int m = at.step.micro;
  const std::string who = c.who(at);
  at::Tensor x = c.data.inputs_of(c.caches.read(Cache::data_batch, -1, m, who).tensors.at(0));
  const bool on_rank0 = at.cond & OnRank0;
  if (at.cond & OwnerBackward) {
    at::Tensor feats = c.model.tower.forward(x);  // graph-connected
    if (on_rank0) {
      c.caches.put(Cache::tower_features, -1, m, {{feats}, {}, {}, false}, who);
    } else {
      c.caches.put(Cache::outputs_for_stage0, -1, m, {{feats.detach()}, {}, {}, false}, who);
      c.caches.put(Cache::outputs_for_bwd, -1, m, {{feats}, {}, {}, false}, who);
    }
    return;
  }
  at::Tensor feats;
  {
    // Frozen tower, or stage-0 backward (which recomputes in MPIPE_TRANSPOSE_BWD): no graph.
    torch::NoGradGuard no_grad;
    feats = c.model.tower.forward(x);
  }
  if (at.cond & Stage0Backward) {
    feats.requires_grad_(true);  // a leaf, so the body backward leaves its gradient on it
    c.caches.put(Cache::inputs_for_explicit_forward, -1, m, {{x}, {}, {}, false}, who);
    if (on_rank0) c.caches.put(Cache::keep_grad, -1, m, {{feats}, {}, {}, false}, who);
  }
  if (on_rank0)
    c.caches.put(Cache::tower_features, -1, m, {{feats}, {}, {}, false}, who);
  else
    c.caches.put(Cache::outputs_for_stage0, -1, m, {{feats}, {}, {}, false}, who);
}

std::vector<P2POp> begin_mpipe_fwd_send(RunContext& c, const StepAt& at, const ArrivedMetas&) {
  return send_one(c, at, c.caches.take(Cache::outputs_for_stage0, -1, at.step.micro, c.who(at)).tensors.at(0));
}

void finish_mpipe_fwd_recv(RunContext& c, const StepAt& at, std::vector<P2POp>& ops) {
  at::Tensor feats = ops.at(0).tensor;
  const std::string who = c.who(at);
  if (at.cond & TowerTrainable) {
    feats.requires_grad_(true);  // its gradient goes to TRANSPOSE_BWD or back to the owner
    c.caches.put(Cache::keep_grad, -1, at.step.micro, {{feats}, {}, {}, false}, who);
  }
  c.caches.put(Cache::tower_features, -1, at.step.micro, {{feats}, {}, {}, false}, who);
}

std::vector<P2POp> begin_graph_send(RunContext& c, const StepAt& at, const ArrivedMetas&) {
  return send_one(c, at,
                        c.caches.take(Cache::inputs_for_explicit_forward, -1, at.step.micro, c.who(at)).tensors.at(0));
}

void finish_graph_recv(RunContext& c, const StepAt& at, std::vector<P2POp>& ops) {
  c.caches.put(Cache::inputs_for_explicit_forward, -1, at.step.micro, {{ops.at(0).tensor}, {}, {}, false}, c.who(at));
}

// MPIPE_TRANSPOSE_BWD (rank 0): recompute the tower from the kept input and backprop the
// features' gradient. No gradient (the body did not reach the features): no compute, but the
// entries still go (the emptiness invariant).
void run_transpose_bwd(RunContext& c, const StepAt& at) {
  const int m = at.step.micro;
  const std::string who = c.who(at);
  at::Tensor x = c.caches.take(Cache::inputs_for_explicit_forward, -1, m, who).tensors.at(0);
  c.caches.take(Cache::keep_grad, -1, m, who);
  auto grads = c.caches.take(Cache::feature_grads, -1, m, who).tensors;
  if (grads.empty() || !grads[0].defined()) return;
  at::Tensor feats = c.model.tower.forward(x);
  compat::backward({feats}, {grads[0]}, /*retain_graph=*/false);
}

// MPIPE_GRAD_SEND (rank 0, owner_backward): ship the features' gradient (zeros if none).
std::vector<P2POp> begin_grad_send(RunContext& c, const StepAt& at, const ArrivedMetas&) {
  const std::string who = c.who(at);
  at::Tensor feats = c.caches.take(Cache::keep_grad, -1, at.step.micro, who).tensors.at(0);
  auto grads = c.caches.take(Cache::feature_grads, -1, at.step.micro, who).tensors;
  at::Tensor g = !grads.empty() && grads[0].defined() ? grads[0] : torch::zeros_like(feats);
  return send_one(c, at, g);
}

// MPIPE_GRAD_RECV_WITH_BACKWARD (owner): receive the gradient, backprop the kept tower graph.
void finish_grad_recv_with_backward(RunContext& c, const StepAt& at, std::vector<P2POp>& ops) {
  at::Tensor out = c.caches.take(Cache::outputs_for_bwd, -1, at.step.micro, c.who(at)).tensors.at(0);
  compat::backward({out}, {ops.at(0).tensor}, /*retain_graph=*/false);
}

// MPIPE_GRAD_REDUCE: SUM all-reduce of this run's tower-gradient delta (grad minus the
// snapshot reset() took), so accumulated gradients from earlier runs are not multiplied.
void run_grad_reduce(RunContext& c, const StepAt& at) {
  c.collective(at, all_ranks(c));
  auto params = c.model.tower.trainable_parameters();
  if (params.empty()) return;
  if (!c.mpipe.snapshot_taken) throw std::logic_error("MPIPE_GRAD_REDUCE without the snapshot reset() takes");
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> deltas;
  for (size_t k = 0; k < params.size(); ++k)
    deltas.push_back(params[k].grad().defined() ? params[k].grad() - c.mpipe.grad_snapshot[k]
                                                : torch::zeros_like(params[k]));
  c.collective_bytes = bytes_of(deltas);
  c.transport.all_reduce_sum(deltas, {});
  for (size_t k = 0; k < params.size(); ++k) params[k].mutable_grad() = c.mpipe.grad_snapshot[k] + deltas[k];
  c.mpipe.grad_snapshot.clear();
  c.mpipe.snapshot_taken = false;
}

}  // namespace

void register_mpipe_handlers(HandlerTable& t) {
  auto at = [&](Op op) -> Handler& { return t[static_cast<size_t>(op)]; };
  at(Op::MPIPE_PARAM_BROADCAST).run = run_param_broadcast;
  at(Op::MPIPE_TRANSPOSE_FWD).run = run_transpose_fwd;
  at(Op::MPIPE_FWD_SEND) = {nullptr, begin_mpipe_fwd_send, nothing_to_store};
  at(Op::MPIPE_FWD_RECV) = {nullptr, recv_with_meta, finish_mpipe_fwd_recv};
  at(Op::MPIPE_GRAPH_SEND) = {nullptr, begin_graph_send, nothing_to_store};
  at(Op::MPIPE_GRAPH_RECV) = {nullptr, recv_with_meta, finish_graph_recv};
  at(Op::MPIPE_TRANSPOSE_BWD).run = run_transpose_bwd;
  at(Op::MPIPE_GRAD_SEND) = {nullptr, begin_grad_send, nothing_to_store};
  at(Op::MPIPE_GRAD_RECV_WITH_BACKWARD) = {nullptr, recv_with_meta, finish_grad_recv_with_backward};
  at(Op::MPIPE_GRAD_REDUCE).run = run_grad_reduce;
}

}  // namespace ppsched::exec
