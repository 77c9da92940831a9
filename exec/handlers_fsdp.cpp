// Data-parallel handlers: FSDP_UNSHARD, FSDP_RESHARD and FSDP_REDUCE_GRAD (PyTorch's UNSHARD,
// RESHARD, REDUCE_GRAD), collectives over the stage's data-parallel group: the same pipeline
// rank of every replica (exec/mesh.hpp). The lowering lists them as local actions (no pipeline
// rank waits on them); they talk on the world's transport to the group's global ranks.
//
//  - Without --fsdp (or with --dp 1) a stage's parameters are replicated: UNSHARD and RESHARD
//    do nothing and REDUCE_GRAD all-reduces this run's gradient delta and divides it by the
//    group size, as DDP averages its buckets.
//  - With --fsdp every replica keeps one flat shard of the stage (FsdpShard): UNSHARD all-gathers
//    the shards and points the parameters at the gathered copy, RESHARD frees it, REDUCE_GRAD
//    reduce-scatters the gradients into this replica's shard (mean over the group) and frees
//    the full gradients, as FSDP's FULL_SHARD does. Gloo has no reduce_scatter in libtorch 1.13
//    ("ProcessGroupGloo does not support reduce_scatter"), so the reduce-scatter is an
//    all-reduce of which each member keeps its own chunk (DTensor's Gloo fallback): the same
//    result, twice the traffic.
#include <torch/torch.h>

#include <set>

#include "exec/runtime.hpp"

namespace ppsched::exec {
namespace {

int64_t group_size(const RunContext& c) { return static_cast<int64_t>(c.dp.group.size()); }

// A trainable MPipe tower's parameters, for stage 0 in stage-0-backward mode (its gradients
// are on rank 0, which holds stage 0; the agreement refuses owner-backward under --dp). The
// tower is replicated on every pipeline rank and is never part of a shard: with --fsdp too,
// stage 0's REDUCE_GRAD averages its gradients as DDP would.
std::vector<at::Tensor> tower_params(const RunContext& c, int stage) {
  const auto& s = c.schedule;
  if (stage == 0 && s.mpipe && s.mpipe->tower == Tower::Trainable && !s.mpipe->owner_backward)
    return c.model.tower.trainable_parameters();
  return {};
}
// --model moe: a stage's experts live on one member of the group each (exec/expert_link.hpp);
// they are neither all-reduced nor sharded.
std::vector<at::Tensor> expert_params(const RunContext& c, int stage) {
  std::vector<at::Tensor> out;
  for (const auto& [name, p] : c.model.chain_of(stage).named_parameters())
    if (p.requires_grad() && is_expert_parameter(name)) out.push_back(p);
  return out;
}
std::vector<at::Tensor> stage_params(const RunContext& c, int stage) {
  std::set<const void*> experts;
  for (const auto& e : expert_params(c, stage)) experts.insert(e.unsafeGetTensorImpl());
  std::vector<at::Tensor> out;
  for (const auto& p : c.model.chain_of(stage).trainable_parameters())
    if (!experts.count(p.unsafeGetTensorImpl())) out.push_back(p);
  return out;
}
// The parameters a stage's FSDP_REDUCE_GRAD averages by all-reduce: its own (replicated, without
// --fsdp) and the tower's; with --fsdp only the tower's (the stage's own are reduce-scattered).
std::vector<at::Tensor> reduced_params(const RunContext& c, int stage) {
  std::vector<at::Tensor> out = c.dp.sharded() ? std::vector<at::Tensor>{} : stage_params(c, stage);
  for (const auto& p : tower_params(c, stage)) out.push_back(p);
  return out;
}

FsdpShard& shard_of(RunContext& c, const StepAt& at) {
  auto it = c.dp.shards.find(at.step.stage);
  if (it == c.dp.shards.end())
    throw std::logic_error(c.who(at) + ": stage " + std::to_string(at.step.stage) + " has no shard on this rank");
  return it->second;
}

// The stage's full gradients, flat (zeros where none).
at::Tensor flat_grads(const FsdpShard& s) {
  std::vector<at::Tensor> parts;
  for (size_t k = 0; k < s.params.size(); ++k) {
    at::Tensor g = s.params[k].grad();
    if (!g.defined() && k < s.stashed_grads.size()) g = s.stashed_grads[k];
    const int64_t n = c10::multiply_integers(s.shapes[k]);
    parts.push_back(g.defined() ? g.reshape({-1}) : torch::zeros({n}, s.shard.options()));
  }
  return torch::cat(parts);
}

at::Tensor padded(const at::Tensor& flat, int64_t size) {
  if (flat.numel() == size) return flat;
  return torch::cat({flat, torch::zeros({size - flat.numel()}, flat.options())});
}

// Points the parameters at views of `full` (the gathered flat buffer).
void point_params_at(FsdpShard& s, const at::Tensor& full) {
  int64_t offset = 0;
  for (size_t k = 0; k < s.params.size(); ++k) {
    const int64_t n = c10::multiply_integers(s.shapes[k]);
    s.params[k].set_data(full.narrow(0, offset, n).view(s.shapes[k]));
    offset += n;
  }
}

void run_unshard(RunContext& c, const StepAt& at) {
  c.collective(at, c.dp.group);
  if (!c.dp.sharded()) return;
  FsdpShard& s = shard_of(c, at);
  torch::NoGradGuard no_grad;
  at::Tensor full;
  c.dp.world->all_gather(s.shard, full, c.dp.group, c.dp.replica);
  c.collective_bytes = static_cast<double>(full.nbytes());
  point_params_at(s, full);
  for (size_t k = 0; k < s.stashed_grads.size(); ++k)
    if (s.stashed_grads[k].defined()) s.params[k].mutable_grad() = s.stashed_grads[k];
  s.stashed_grads.clear();
  s.gathered = true;
}

void release(FsdpShard& s, at::Device device) {
  // A gradient accumulated on the gathered parameters waits for REDUCE_GRAD beside them.
  s.stashed_grads.assign(s.params.size(), at::Tensor());
  for (size_t k = 0; k < s.params.size(); ++k) {
    if (s.params[k].grad().defined()) s.stashed_grads[k] = s.params[k].grad();
    s.params[k].mutable_grad() = at::Tensor();
    s.params[k].set_data(torch::empty({0}, s.shard.options().device(device)));
  }
  s.gathered = false;
}

void run_reshard(RunContext& c, const StepAt& at) {
  c.collective(at, c.dp.group);
  if (!c.dp.sharded()) return;
  release(shard_of(c, at), c.device);
}

void run_reduce_grad(RunContext& c, const StepAt& at) {
  c.collective(at, c.dp.group);
  if (group_size(c) <= 1) return;
  torch::NoGradGuard no_grad;
  const double n = static_cast<double>(group_size(c));
  // The replicated parameters: this run's gradient delta, all-reduced and averaged.
  {
    auto params = reduced_params(c, at.step.stage);
    const auto& snap = c.dp.snapshot.at(at.step.stage);
    // Every replica runs the same steps, so the same parameters have a gradient on each.
    std::vector<size_t> with_grad;
    std::vector<at::Tensor> deltas;
    for (size_t k = 0; k < params.size(); ++k)
      if (params[k].grad().defined()) {
        with_grad.push_back(k);
        deltas.push_back(params[k].grad() - snap[k]);
      }
    c.collective_bytes = bytes_of(deltas);
    if (!deltas.empty()) c.dp.world->all_reduce_sum(deltas, c.dp.group);
    for (size_t j = 0; j < with_grad.size(); ++j) params[with_grad[j]].mutable_grad() = snap[with_grad[j]] + deltas[j] / n;
  }
  // The experts: this member's gradient already sums every member's tokens (the all-to-alls
  // brought them here); like the averaged replicated gradients, it is divided by the group size.
  {
    auto experts = expert_params(c, at.step.stage);
    const auto& snap = c.dp.expert_snapshot.at(at.step.stage);
    for (size_t k = 0; k < experts.size(); ++k)
      if (experts[k].grad().defined()) experts[k].mutable_grad() = snap[k] + (experts[k].grad() - snap[k]) / n;
  }
  if (!c.dp.sharded()) return;
  // The stage's own, sharded: reduce-scattered into this replica's shard.
  FsdpShard& s = shard_of(c, at);
  std::vector<at::Tensor> flat{padded(flat_grads(s), s.shard_numel * group_size(c))};
  c.collective_bytes += bytes_of(flat);
  c.dp.world->all_reduce_sum(flat, c.dp.group);  // Gloo: no reduce_scatter (see above)
  at::Tensor mine = flat[0].narrow(0, s.shard_numel * c.dp.replica, s.shard_numel) / n;
  s.shard_grad = s.shard_grad.defined() ? s.shard_grad + mine : mine.clone();
  // The full gradients are consumed: the next run accumulates from nothing.
  for (auto& p : s.params) p.mutable_grad() = at::Tensor();
  s.stashed_grads.clear();
}

}  // namespace

void shard_parameters(RunContext& c) {
  if (!c.dp.sharded()) return;
  torch::NoGradGuard no_grad;
  const int64_t n = group_size(c);
  for (int stage : c.model.stages) {
    FsdpShard s;
    s.params = stage_params(c, stage);
    std::vector<at::Tensor> parts;
    for (const auto& p : s.params) {
      if (p.scalar_type() != s.params.front().scalar_type())
        throw std::runtime_error("--fsdp: stage " + std::to_string(stage) +
                                 " mixes parameter dtypes, which one flat shard cannot hold");
      s.shapes.push_back(p.sizes().vec());
      parts.push_back(p.detach().reshape({-1}));
    }
    if (s.params.empty()) continue;
    at::Tensor flat = torch::cat(parts);
    s.numel = flat.numel();
    s.shard_numel = (s.numel + n - 1) / n;
    s.shard = padded(flat, s.shard_numel * n).narrow(0, s.shard_numel * c.dp.replica, s.shard_numel).clone();
    release(s, c.device);
    s.stashed_grads.clear();
    c.dp.shards.emplace(stage, std::move(s));
  }
}

void snapshot_stage_grads(RunContext& c) {
  c.dp.snapshot.clear();
  c.dp.expert_snapshot.clear();
  if (c.dp.mesh.dp <= 1) return;
  for (int stage : c.model.stages) {
    auto& snap = c.dp.snapshot[stage];
    for (const auto& p : reduced_params(c, stage)) snap.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
    auto& experts = c.dp.expert_snapshot[stage];
    for (const auto& p : expert_params(c, stage)) experts.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  }
}

void gather_full_grads(RunContext& c) {
  if (!c.dp.sharded()) return;
  torch::NoGradGuard no_grad;
  for (auto& [stage, s] : c.dp.shards) {  // ascending stages: the same order on every member
    at::Tensor full, grads;
    c.dp.world->all_gather(s.shard, full, c.dp.group, c.dp.replica);
    at::Tensor g = s.shard_grad.defined() ? s.shard_grad : torch::zeros_like(s.shard);
    c.dp.world->all_gather(g, grads, c.dp.group, c.dp.replica);
    point_params_at(s, full);
    int64_t offset = 0;
    for (size_t k = 0; k < s.params.size(); ++k) {
      const int64_t numel = c10::multiply_integers(s.shapes[k]);
      if (s.shard_grad.defined()) s.params[k].mutable_grad() = grads.narrow(0, offset, numel).view(s.shapes[k]).clone();
      offset += numel;
    }
    s.gathered = true;
  }
}

void sgd_step_on_shards(RunContext& c, double lr) {
  torch::NoGradGuard no_grad;
  for (auto& [stage, s] : c.dp.shards)
    if (s.shard_grad.defined()) s.shard.sub_(s.shard_grad * lr);
}

int64_t parameter_elements(const RunContext& c) {
  int64_t n = 0;
  for (int stage : c.model.stages) {
    auto it = c.dp.shards.find(stage);
    if (it != c.dp.shards.end()) {
      n += it->second.numel;
    } else {
      for (const auto& p : stage_params(c, stage)) n += p.numel();
    }
  }
  return n;
}

int64_t held_parameter_elements(const RunContext& c) {
  int64_t n = 0;
  for (int stage : c.model.stages) {
    for (const auto& p : stage_params(c, stage)) n += p.numel();  // 0 while resharded
    auto it = c.dp.shards.find(stage);
    if (it != c.dp.shards.end()) n += it->second.shard.numel();
  }
  return n;
}

void register_fsdp_handlers(HandlerTable& t) {
  t[static_cast<size_t>(Op::FSDP_UNSHARD)].run = run_unshard;
  t[static_cast<size_t>(Op::FSDP_RESHARD)].run = run_reshard;
  t[static_cast<size_t>(Op::FSDP_REDUCE_GRAD)].run = run_reduce_grad;
}

}  // namespace ppsched::exec
