// Compute handlers: FWD, BWD and the split backward BWD_INPUT + BWD_WEIGHT. Which cache a
// handler reads its input from and where it leaves its results is decided by the step table's
// conditions (PrevStageRemote, NextStageLocal, Stage0Backward, ...), the same bits the cache
// checker evaluates, and the runtime audits the result against the table after every step.
//
// Every stage input is an autograd leaf: a received activation, or the previous local stage's
// output detached (V placement hands over like a receive, without the copy). So a stage's
// backward ends at its own inputs and the input gradients are what BWD_SEND ships. The one
// exception is stage 0 in owner_backward mode for a micro rank 0 transposed itself: its input
// stays attached to the tower graph and the backward flows into the tower (reference §2.5).
//
// Split backward with libtorch autograd:
//  - BWD_INPUT computes d(outputs)/d(inputs) with torch::autograd::grad(..., retain_graph =
//    true): the input gradients go out at once, .grad of the parameters is untouched, and the
//    graph survives in _dw_cache;
//  - BWD_WEIGHT later runs torch::autograd::backward(outputs, output_grads, inputs =
//    parameters) on the kept graph, which accumulates only the parameters' .grad and frees it.
//  The weight half re-traverses the graph between outputs and parameters; that recompute of
//  intermediate gradients is the price of staying on stock autograd.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "exec/runtime.hpp"

namespace ppsched::exec {
namespace {

// The gradients the stage's outputs receive: none for the loss (autograd seeds 1), else the
// received gradient or the next local stage's input gradient.
std::vector<at::Tensor> output_grads(RunContext& c, const StepAt& at) {
  const int s = at.step.stage, m = at.step.micro;
  const std::string who = c.who(at);
  if (at.cond & LastStage) return {};
  if (at.cond & NextStageRemote) return c.caches.take(Cache::bwd_recv_buffer, s, m, who).tensors;
  return c.caches.take(Cache::bwd_cache, s + 1, m, who).tensors;  // NextStageLocal
}

// Which input gradients this backward must produce, by the table's conditions.
bool wants_input_grads(const StepAt& at) { return (at.cond & NotFirstStage) != 0; }
bool wants_feature_grads(const StepAt& at) {
  if (!(at.cond & FirstStage) || !(at.cond & OnRank0)) return false;
  return (at.cond & Stage0Backward) || ((at.cond & OwnerBackward) && (at.cond & OwnerNotRank0));
}

// Stores the input gradients `grads` (parallel to `inputs`) where the table says.
void store_input_grads(RunContext& c, const StepAt& at, const std::vector<at::Tensor>& inputs,
                       std::vector<at::Tensor> grads) {
  const std::string who = c.who(at);
  if (wants_input_grads(at)) {
    // The previous stage waits for one gradient per input; an unused input gets zeros.
    for (size_t k = 0; k < grads.size(); ++k)
      if (!grads[k].defined()) grads[k] = torch::zeros_like(inputs[k]);
    c.caches.put(Cache::bwd_cache, at.step.stage, at.step.micro, {grads, {}, {}, false}, who);
  }
  // The placed features' gradients, for MPIPE_TRANSPOSE_BWD or MPIPE_GRAD_SEND (may be
  // undefined: both handle "no gradient").
  if (wants_feature_grads(at)) c.caches.put(Cache::feature_grads, -1, at.step.micro, {grads, {}, {}, false}, who);
}

void run_fwd(RunContext& c, const StepAt& at) {
  const int s = at.step.stage, m = at.step.micro;
  const std::string who = c.who(at);
  at::Tensor input;
  bool tower_connected = false;
  if (at.cond & FirstStage) {
    // With body data steps stage 0 reads the micro-batch its DATA_LOAD (or the MPipe prefix)
    // left, and leaves it for the DATA_SEND that ships it on with the output. Without them,
    // MPipe's rank 0 consumes the micro-batch it loaded or received in the prefix, and the
    // others read theirs from the data set. With a tower, the input is the features placed by
    // MPIPE_TRANSPOSE_FWD or MPIPE_FWD_RECV.
    at::Tensor data = (at.cond & DataSteps) ? c.caches.read(Cache::data_batch, -1, m, who).tensors.at(0)
                      : (at.cond & MPipe)   ? c.caches.take(Cache::data_batch, -1, m, who).tensors.at(0)
                                            : c.data.micro_batch(c.iteration, m);
    if (at.cond & TowerPresent) {
      input = c.caches.take(Cache::tower_features, -1, m, who).tensors.at(0);
      tower_connected = input.requires_grad() && !input.is_leaf();
    } else {
      input = c.data.inputs_of(data);
    }
  } else if (at.cond & PrevStageRemote) {
    input = c.caches.take(Cache::fwd_recv_buffer, s, m, who).tensors.at(0);
  } else {  // PrevStageLocal: the hand-over under V placement
    at::Tensor prev = c.caches.take(Cache::fwd_outputs_cache, s - 1, m, who).tensors.at(0);
    input = prev.detach().requires_grad_(prev.requires_grad());
  }
  if (c.keep_probe_inputs && !c.probe_inputs.count(s)) c.probe_inputs[s] = input.detach().clone();
  at::Tensor out;
  if (at.cond & LastStage) {
    // With body data steps the labels are those that travelled with the forward (received,
    // or loaded here when the last stage is stage 0's rank); this use is their last.
    at::Tensor data = (at.cond & DataSteps) ? c.caches.take(Cache::data_batch, -1, m, who).tensors.at(0)
                                            : c.data.micro_batch(c.iteration, m);
    at::Tensor labels = c.data.labels_of(data);
    out = last_stage_loss(c.model_config, c.model.chain_of(s), input, labels, c.schedule.micro_batches);
    c.loss += out.item<double>();
  } else {
    out = c.model.chain_of(s).forward(input);
  }
  CacheEntry e;
  e.tensors = {out};
  e.inputs = {input};
  e.tower_connected = tower_connected;
  c.caches.put(Cache::fwd_cache, s, m, std::move(e), who);
  if (at.cond & NotLastStage) c.caches.put(Cache::fwd_outputs_cache, s, m, {{out}, {}, {}, false}, who);
}

void run_bwd(RunContext& c, const StepAt& at) {
  CacheEntry fwd = c.caches.take(Cache::fwd_cache, at.step.stage, at.step.micro, c.who(at));
  std::vector<at::Tensor> grads = output_grads(c, at);
  // Full backward: accumulates into every leaf, i.e. the parameters and the stage's inputs.
  compat::backward(fwd.tensors, grads, /*retain_graph=*/false);
  if (!wants_input_grads(at) && !wants_feature_grads(at)) return;
  std::vector<at::Tensor> input_grads;
  for (const auto& in : fwd.inputs) input_grads.push_back(in.is_leaf() ? in.grad() : at::Tensor());
  store_input_grads(c, at, fwd.inputs, std::move(input_grads));
}

void run_bwd_input(RunContext& c, const StepAt& at) {
  CacheEntry fwd = c.caches.take(Cache::fwd_cache, at.step.stage, at.step.micro, c.who(at));
  std::vector<at::Tensor> grads = output_grads(c, at);
  if (wants_input_grads(at) || wants_feature_grads(at)) {
    std::vector<at::Tensor> leaves;
    for (const auto& in : fwd.inputs)
      if (in.requires_grad()) leaves.push_back(in);
    std::vector<at::Tensor> input_grads(fwd.inputs.size());
    if (!leaves.empty()) {
      auto g = compat::grad(fwd.tensors, leaves, grads, /*retain_graph=*/true);
      size_t j = 0;
      for (size_t k = 0; k < fwd.inputs.size(); ++k)
        if (fwd.inputs[k].requires_grad()) input_grads[k] = g[j++];
    }
    store_input_grads(c, at, fwd.inputs, std::move(input_grads));
  }
  // On stage 0 without features to differentiate this is hyper-parallel's "BWD_INPUT is a
  // no-op on stage 0": the whole backward happens in BWD_WEIGHT. Not with expert all-to-alls:
  // the stream lowering runs their backward here on every stage, and the other members of the
  // expert-parallel group wait for it, so the gradient of a parameter upstream of all of them
  // is taken (and dropped); BWD_WEIGHT then reuses their results (exec/expert_link.hpp).
  else if (c.experts) {
    const at::Tensor anchor = c.model.chain_of(at.step.stage).all_to_all_anchor();
    if (anchor.defined() && anchor.requires_grad()) compat::grad(fwd.tensors, {anchor}, grads, /*retain_graph=*/true);
  }
  CacheEntry dw;
  dw.tensors = std::move(fwd.tensors);
  dw.inputs = std::move(fwd.inputs);
  dw.grads = std::move(grads);
  dw.tower_connected = fwd.tower_connected;
  c.caches.put(Cache::dw_cache, at.step.stage, at.step.micro, std::move(dw), c.who(at));
}

void run_bwd_weight(RunContext& c, const StepAt& at) {
  CacheEntry dw = c.caches.take(Cache::dw_cache, at.step.stage, at.step.micro, c.who(at));
  std::vector<at::Tensor> weights = c.model.chain_of(at.step.stage).trainable_parameters();
  if (dw.tower_connected)
    for (const auto& p : c.model.tower.trainable_parameters()) weights.push_back(p);
  compat::backward(dw.tensors, dw.grads, /*retain_graph=*/false, weights);
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

std::optional<SplitBackwardProbe> probe_split_backward(RunContext& c, int stage, int repetitions) {
  const auto kept_input = c.probe_inputs.find(stage);
  if (kept_input == c.probe_inputs.end()) return std::nullopt;
  const UnitChain& chain = c.model.chain_of(stage);
  const bool first = stage == 0, last = stage == c.schedule.stages - 1;
  const std::vector<at::Tensor> weights = chain.trainable_parameters();
  std::vector<at::Tensor> kept_grads;
  for (const at::Tensor& w : weights) kept_grads.push_back(w.grad().defined() ? w.grad().clone() : at::Tensor());
  const at::Tensor labels = c.data.labels_of(c.data.micro_batch(c.iteration, 0));
  // The stage's forward from its kept input, as run_fwd runs it; a stage after the first
  // differentiates its input (the gradient BWD_INPUT ships), stage 0 does not.
  auto forward = [&](at::Tensor& leaf) {
    leaf = kept_input->second.detach();
    if (!first && leaf.is_floating_point()) leaf.requires_grad_(true);
    return last ? last_stage_loss(c.model_config, chain, leaf, labels, c.schedule.micro_batches) : chain.forward(leaf);
  };
  auto sync = [&] {
    if (c.device.is_cuda()) torch::cuda::synchronize(c.device.index());
  };
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  std::vector<double> whole, input, weight;
  // Whole and split alternate, so that a drift of the machine's speed reaches both alike.
  for (int k = 0; k < repetitions; ++k)
    for (const bool split : {false, true}) {
      at::Tensor leaf;
      at::Tensor out = forward(leaf);
      std::vector<at::Tensor> grads;
      if (!last) grads.push_back(torch::ones_like(out));
      sync();
      const auto t0 = Clock::now();
      if (!split) {
        compat::backward({out}, grads, /*retain_graph=*/false);
        sync();
        whole.push_back(ms(t0, Clock::now()));
        continue;
      }
      // BWD_INPUT: the input gradient with the graph kept (a no-op on stage 0, run_bwd_input).
      if (leaf.requires_grad()) compat::grad({out}, {leaf}, grads, /*retain_graph=*/true);
      sync();
      const auto t1 = Clock::now();
      // BWD_WEIGHT: the weights' gradients on the kept graph.
      compat::backward({out}, grads, /*retain_graph=*/false, weights);
      sync();
      const auto t2 = Clock::now();
      input.push_back(ms(t0, t1));
      weight.push_back(ms(t1, t2));
    }
  for (size_t k = 0; k < weights.size(); ++k) {
    at::Tensor w = weights[k];
    if (kept_grads[k].defined()) w.mutable_grad() = kept_grads[k];
    else w.mutable_grad() = at::Tensor();
  }
  return SplitBackwardProbe{stage, median_of(whole), median_of(input), median_of(weight)};
}

void register_compute_handlers(HandlerTable& t) {
  t[static_cast<size_t>(Op::FWD)].run = run_fwd;
  t[static_cast<size_t>(Op::BWD)].run = run_bwd;
  t[static_cast<size_t>(Op::BWD_INPUT)].run = run_bwd_input;
  t[static_cast<size_t>(Op::BWD_WEIGHT)].run = run_bwd_weight;
}

}  // namespace ppsched::exec
