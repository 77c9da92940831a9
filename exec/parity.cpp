#include "exec/parity.hpp"

#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>

namespace ppsched::exec {
namespace {

template <class T>
void put(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

template <class T>
T get(const std::vector<uint8_t>& in, size_t& pos) {
  if (pos + sizeof(T) > in.size()) throw std::runtime_error("truncated gradient blob");
  T v;
  std::memcpy(&v, in.data() + pos, sizeof(T));
  pos += sizeof(T);
  return v;
}

}  // namespace

std::vector<uint8_t> pack_grads(const RankModel& model) {
  std::vector<uint8_t> out;
  auto params = model.named_parameters();
  put<uint32_t>(out, static_cast<uint32_t>(params.size()));
  for (const auto& [name, p] : params) {
    put<uint32_t>(out, static_cast<uint32_t>(name.size()));
    out.insert(out.end(), name.begin(), name.end());
    at::Tensor g = p.grad();
    put<uint8_t>(out, g.defined() ? 1 : 0);
    if (!g.defined()) continue;
    at::Tensor c = g.detach().to(torch::kCPU, torch::kFloat).contiguous();
    put<uint32_t>(out, static_cast<uint32_t>(c.dim()));
    for (int64_t d : c.sizes()) put<int64_t>(out, d);
    const auto* data = reinterpret_cast<const uint8_t*>(c.data_ptr<float>());
    out.insert(out.end(), data, data + c.numel() * static_cast<int64_t>(sizeof(float)));
  }
  return out;
}

std::vector<GradRecord> unpack_grads(const std::vector<uint8_t>& in) {
  size_t pos = 0;
  std::vector<GradRecord> out(get<uint32_t>(in, pos));
  for (auto& r : out) {
    uint32_t n = get<uint32_t>(in, pos);
    if (pos + n > in.size()) throw std::runtime_error("truncated gradient blob");
    r.name.assign(reinterpret_cast<const char*>(in.data() + pos), n);
    pos += n;
    r.defined = get<uint8_t>(in, pos) != 0;
    if (!r.defined) continue;
    uint32_t dims = get<uint32_t>(in, pos);
    int64_t numel = 1;
    for (uint32_t k = 0; k < dims; ++k) {
      r.shape.push_back(get<int64_t>(in, pos));
      numel *= r.shape.back();
    }
    r.values.resize(static_cast<size_t>(numel));
    if (pos + r.values.size() * sizeof(float) > in.size()) throw std::runtime_error("truncated gradient blob");
    std::memcpy(r.values.data(), in.data() + pos, r.values.size() * sizeof(float));
    pos += r.values.size() * sizeof(float);
  }
  return out;
}

ParityResult check_parity(const ModelConfig& m, const ModelLayout& l, const Schedule& s, int iterations,
                          const std::vector<std::vector<GradRecord>>& grads_by_rank, const std::vector<double>& losses,
                          const DeviceMesh& mesh) {
  ParityResult res;
  // The reference: every unit in one process, each micro-batch through tower and stages,
  // one backward per micro-batch, accumulating like the pipeline does (no optimizer step).
  std::vector<int> all_stages;
  for (int st = 0; st < l.stages; ++st) all_stages.push_back(st);
  RankModel ref = build_rank_model(m, l, all_stages, /*with_tower=*/true, torch::kCPU);
  Dataset data(m, torch::kCPU);
  for (int it = 0; it < iterations; ++it) {
    double loss_sum = 0;
    const int micros = s.micro_batches * mesh.dp;  // the global batch: every replica's micro-batches
    for (int micro = 0; micro < micros; ++micro) {
      at::Tensor d = data.micro_batch(it, micro);
      at::Tensor x = data.inputs_of(d);
      if (!ref.tower.empty()) x = ref.tower.forward(x);
      for (size_t k = 0; k + 1 < ref.stage_chain.size(); ++k) x = ref.stage_chain[k].forward(x);
      at::Tensor loss = last_stage_loss(m, ref.stage_chain.back(), x, data.labels_of(d), micros);
      loss_sum += loss.item<double>();
      loss.backward();
    }
    res.reference_losses.push_back(loss_sum);
    double got = it < static_cast<int>(losses.size()) ? losses[static_cast<size_t>(it)] : NAN;
    double rel = std::abs(got - loss_sum) / std::max(std::abs(loss_sum), 1e-12);
    if (!(rel <= res.tolerance))
      res.problems.push_back("iteration " + std::to_string(it) + " loss " + std::to_string(got) + " vs reference " +
                             std::to_string(loss_sum));
    res.loss_rel_error = std::max(res.loss_rel_error, std::isnan(rel) ? INFINITY : rel);
  }

  std::map<std::string, at::Tensor> ref_grads;
  for (const auto& [name, p] : ref.named_parameters()) ref_grads[name] = p.grad();
  std::set<std::string> tower_units;
  for (int u : l.tower_units) tower_units.insert(unit_name(m, l, u));
  const bool frozen = m.tower == Tower::Frozen;
  const bool owner_backward = s.mpipe && s.mpipe->owner_backward;
  std::set<std::string> matched;  // reference gradients some rank reproduced

  for (size_t q = 0; q < grads_by_rank.size(); ++q) {
    const int r = mesh.pipeline_rank(static_cast<int>(q));  // the tower rules are the pipeline's
    for (const auto& g : grads_by_rank[q]) {
      const std::string where = g.name + " on " + mesh.name(static_cast<int>(q));
      const bool in_tower = tower_units.count(g.name.substr(0, g.name.find('.'))) > 0;
      if (in_tower && (frozen || (!owner_backward && r != 0))) {
        if (g.defined)
          res.problems.push_back(where + " has a gradient; " +
                                 (frozen ? std::string("the tower is frozen")
                                         : std::string("in stage-0-backward mode tower gradients live on rank 0 only")));
        continue;
      }
      auto it = ref_grads.find(g.name);
      if (it == ref_grads.end()) {
        res.problems.push_back(where + " is not a parameter of the reference model");
        continue;
      }
      const at::Tensor& want = it->second;
      if (!want.defined()) {
        if (g.defined) res.problems.push_back(where + " has a gradient the reference does not");
        continue;
      }
      if (!g.defined) {
        res.problems.push_back(where + " has no gradient");
        continue;
      }
      at::Tensor got = torch::from_blob(const_cast<float*>(g.values.data()), g.shape, torch::kFloat).clone();
      if (got.sizes() != want.sizes()) {
        res.problems.push_back(where + " has the wrong shape");
        continue;
      }
      double denom = want.abs().max().item<double>();
      double diff = (got - want).abs().max().item<double>();
      double rel = denom > 0 ? diff / denom : diff;
      ++res.tensors;
      matched.insert(g.name);
      if (rel >= res.max_rel_error) {
        res.max_rel_error = rel;
        res.worst = where;
      }
      if (!(rel <= res.tolerance))
        res.problems.push_back(where + ": max relative error " + std::to_string(rel));
    }
  }
  for (const auto& [name, g] : ref_grads)
    if (g.defined() && !matched.count(name)) res.problems.push_back(name + ": no rank holds its gradient");
  res.ok = res.problems.empty();
  return res;
}

}  // namespace ppsched::exec
