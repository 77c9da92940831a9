#include "exec/models.hpp"

#include "exec/expert_link.hpp"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

namespace ppsched::exec {
namespace {

namespace nn = torch::nn;

// Seeds are spread so unit u and micro-batch (i, m) never share a stream.
uint64_t unit_seed(const ModelConfig& m, int unit) { return m.seed * 1000003ULL + 7919ULL * static_cast<uint64_t>(unit + 1); }
uint64_t data_seed(const ModelConfig& m, int iteration, int micro) {
  return m.seed * 2654435761ULL + 104729ULL * static_cast<uint64_t>(iteration + 1) + static_cast<uint64_t>(micro) * 131ULL + 17ULL;
}

class MlpBlock final : public Unit {
 public:
  explicit MlpBlock(int hidden) : fc_(register_module("fc", nn::Linear(hidden, hidden))) {}
  at::Tensor forward(const at::Tensor& x) override { return torch::gelu(fc_->forward(x)); }

 private:
  nn::Linear fc_;
};

class GptEmbedding final : public Unit {
 public:
  GptEmbedding(int vocab, int hidden, int seq)
      : tok_(register_module("tok", nn::Embedding(vocab, hidden))),
        pos_(register_parameter("pos", torch::randn({seq, hidden}) * 0.02)) {}
  at::Tensor forward(const at::Tensor& ids) override { return tok_->forward(ids) + pos_; }
  at::Tensor token_weight() const { return tok_->weight; }

 private:
  nn::Embedding tok_;
  at::Tensor pos_;
};

// Causal self-attention of pre-norm x (the block adds the residual).
at::Tensor causal_attention(const at::Tensor& x, nn::LayerNorm& ln1, nn::Linear& qkv_proj, nn::Linear& proj, int64_t heads) {
  const int64_t b = x.size(0), t = x.size(1), h = x.size(2), d = h / heads;
  auto qkv = qkv_proj->forward(ln1->forward(x)).chunk(3, -1);
  auto split = [&](const at::Tensor& y) { return y.reshape({b, t, heads, d}).transpose(1, 2); };
  at::Tensor q = split(qkv[0]), k = split(qkv[1]), v = split(qkv[2]);
  at::Tensor att = q.matmul(k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));
  at::Tensor mask = torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
  att = torch::softmax(att.masked_fill(mask, -std::numeric_limits<float>::infinity()), -1);
  return proj->forward(att.matmul(v).transpose(1, 2).reshape({b, t, h}));
}

// Pre-norm decoder block: x + attn(ln1(x)), then x + mlp(ln2(x)); causal self-attention.
class GptBlock final : public Unit {
 public:
  GptBlock(int hidden, int heads)
      : heads_(heads),
        ln1_(register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({hidden})))),
        qkv_(register_module("qkv", nn::Linear(hidden, 3 * hidden))),
        proj_(register_module("proj", nn::Linear(hidden, hidden))),
        ln2_(register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({hidden})))),
        fc1_(register_module("fc1", nn::Linear(hidden, 4 * hidden))),
        fc2_(register_module("fc2", nn::Linear(4 * hidden, hidden))) {}

  at::Tensor forward(const at::Tensor& x) override {
    at::Tensor mid = x + causal_attention(x, ln1_, qkv_, proj_, heads_);
    return mid + fc2_->forward(torch::gelu(fc1_->forward(ln2_->forward(mid))));
  }

 private:
  int64_t heads_;
  nn::LayerNorm ln1_;
  nn::Linear qkv_, proj_;
  nn::LayerNorm ln2_;
  nn::Linear fc1_, fc2_;
};

// One expert: Linear(h, 2h), GELU, Linear(2h, h).
class Expert final : public torch::nn::Module {
 public:
  explicit Expert(int hidden)
      : fc1_(register_module("fc1", nn::Linear(hidden, 2 * hidden))), fc2_(register_module("fc2", nn::Linear(2 * hidden, hidden))) {}
  at::Tensor forward(const at::Tensor& x) { return fc2_->forward(torch::gelu(fc1_->forward(x))); }

 private:
  nn::Linear fc1_, fc2_;
};

// Pre-norm MoE decoder block: x + attn(ln1(x)), then x + sum_k w_k * expert_{e_k}(ln2(x)) over
// each token's top-k experts by the router's softmax (weights not renormalised). The dense
// parameters are built from the unit's seed, expert j from its own (unit seed, j), so a rank
// that holds some experts gets the reference's values. With an expert-parallel link the
// dispatch sends each (token, expert) row to the expert's owner, sorted by owner then expert,
// and the combine brings the outputs back in that order (exec/expert_link.hpp).
class MoeBlock final : public Unit {
 public:
  MoeBlock(const ModelConfig& m, uint64_t seed, int expert_rank, std::shared_ptr<ExpertSlot> slot)
      : heads_(m.heads),
        experts_total_(m.experts),
        topk_(m.topk),
        ep_(std::max(1, m.ep)),
        slot_(std::move(slot)),
        ln1_(register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({m.hidden})))),
        qkv_(register_module("qkv", nn::Linear(m.hidden, 3 * m.hidden))),
        proj_(register_module("proj", nn::Linear(m.hidden, m.hidden))),
        ln2_(register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({m.hidden})))),
        router_(register_module("router", nn::Linear(nn::LinearOptions(m.hidden, m.experts).bias(false)))) {
    for (int j = 0; j < m.experts; ++j) {
      if (expert_rank >= 0 && j % ep_ != expert_rank) continue;
      torch::manual_seed(seed * 31ULL + 1000003ULL * static_cast<uint64_t>(j + 1));
      local_[j] = register_module("experts_" + std::to_string(j), std::make_shared<Expert>(m.hidden));
    }
  }

  at::Tensor forward(const at::Tensor& x) override {
    const int64_t b = x.size(0), t = x.size(1), h = x.size(2), n = b * t, k = topk_;
    at::Tensor mid = x + causal_attention(x, ln1_, qkv_, proj_, heads_);
    at::Tensor tokens = ln2_->forward(mid).reshape({n, h});
    auto [w, idx] = torch::softmax(router_->forward(tokens), -1).topk(k, -1);  // [n, k]
    at::Tensor expert_of = idx.reshape({-1});                                   // assignment a = token a / k
    at::Tensor y;                                                               // [n * k, h], by assignment
    ExpertLink* link = slot_ ? slot_->link : nullptr;
    if (!link || ep_ == 1) {
      y = run_experts(tokens.index_select(0, torch::div(torch::arange(n * k, idx.options()), k, "floor")), expert_of);
    } else {
      // Sorted by owner, then expert, then assignment: each owner's rows are one block.
      at::Tensor owner = expert_of.remainder(ep_);
      at::Tensor order = std::get<1>((owner * experts_total_ + expert_of).sort(/*stable=*/true, 0, false));
      at::Tensor rows = tokens.index_select(0, torch::div(order, k, "floor"));
      at::Tensor ids = expert_of.index_select(0, order);
      at::Tensor counts = owner.bincount({}, ep_);
      std::vector<int64_t> send(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + ep_), recv, back;
      at::Tensor payload = torch::cat({rows, ids.unsqueeze(1).to(rows.scalar_type())}, 1);
      at::Tensor got = expert_all_to_all(*link, A2aKind::DispatchFwd, stage_layer_, payload, send, recv);
      at::Tensor got_ids = got.select(1, h).detach().round().to(torch::kLong);
      at::Tensor out = run_experts(got.narrow(1, 0, h), got_ids);
      at::Tensor returned = expert_all_to_all(*link, A2aKind::CombineFwd, stage_layer_, out, recv, back);
      y = torch::zeros({n * k, h}, returned.options()).index_copy(0, order, returned);
    }
    at::Tensor moe = (y.reshape({n, k, h}) * w.unsqueeze(-1)).sum(1);
    return mid + moe.reshape({b, t, h});
  }

  at::Tensor anchor() const { return qkv_->weight; }
  void set_stage_layer(int k) { stage_layer_ = k; }  // its index among its stage's MoE blocks

 private:
  // Each row through its expert (all local); rows of an expert not held here are an error.
  at::Tensor run_experts(const at::Tensor& rows, const at::Tensor& expert_of) {
    at::Tensor out = torch::zeros_like(rows);
    for (auto& [j, e] : local_) {
      at::Tensor sel = (expert_of == j).nonzero().reshape({-1});
      if (sel.numel() == 0) continue;
      out = out.index_copy(0, sel, e->forward(rows.index_select(0, sel)));
    }
    return out;
  }

  int64_t heads_, experts_total_, topk_, ep_;
  int stage_layer_ = 0;
  std::shared_ptr<ExpertSlot> slot_;
  nn::LayerNorm ln1_;
  nn::Linear qkv_, proj_;
  nn::LayerNorm ln2_;
  nn::Linear router_;
  std::map<int, std::shared_ptr<Expert>> local_;
};

// Final norm + LM head. With tied embeddings the head multiplies by the token embedding
// weight: the embedding unit's own tensor when the same rank holds it, else a copy whose
// gradient ALL_REDUCE sums with the embedding's.
class GptHead final : public Unit {
 public:
  GptHead(int vocab, int hidden, at::Tensor tied_weight)
      : ln_(register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({hidden})))), tied_(std::move(tied_weight)) {
    if (!tied_.defined()) out_ = register_module("lm_head", nn::Linear(nn::LinearOptions(hidden, vocab).bias(false)));
  }
  at::Tensor forward(const at::Tensor& x) override {
    at::Tensor z = ln_->forward(x);
    return tied_.defined() ? z.matmul(tied_.t()) : out_->forward(z);
  }
  // The tied weight is not registered here: it is the embedding's parameter (same rank) or a
  // copy that goes by the embedding's name (UnitChain::named_parameters).
  at::Tensor tied_weight() const { return tied_; }

 private:
  nn::LayerNorm ln_;
  nn::Linear out_{nullptr};
  at::Tensor tied_;
};

std::shared_ptr<Unit> make_unit(const ModelConfig& m, const ModelLayout& l, int unit, at::Tensor tied_weight, int expert_rank = -1,
                                std::shared_ptr<ExpertSlot> slot = nullptr) {
  torch::manual_seed(unit_seed(m, unit));
  if (m.kind == ModelKind::Mlp) return std::make_shared<MlpBlock>(m.hidden);
  if (unit == l.embedding_unit) return std::make_shared<GptEmbedding>(m.vocab, m.hidden, m.seq);
  if (unit == l.head_unit) return std::make_shared<GptHead>(m.vocab, m.hidden, std::move(tied_weight));
  if (m.experts > 0) return std::make_shared<MoeBlock>(m, unit_seed(m, unit), expert_rank, std::move(slot));
  return std::make_shared<GptBlock>(m.hidden, m.heads);
}

}  // namespace

at::Tensor Unit::forward_loss(const at::Tensor&, const at::Tensor&) {
  throw std::logic_error("this unit does not compute a loss");
}

std::vector<NamedParam> Unit::unit_parameters() const {
  std::vector<NamedParam> out;
  for (const auto& p : named_parameters(true)) out.emplace_back(p.key(), p.value());
  return out;
}

UnitChain::UnitChain(std::vector<std::shared_ptr<Unit>> units, std::vector<std::string> names)
    : units_(std::move(units)), names_(std::move(names)) {}

at::Tensor UnitChain::forward(at::Tensor x) const {
  for (const auto& u : units_) x = u->forward(x);
  return x;
}

at::Tensor UnitChain::forward_loss(at::Tensor x, const at::Tensor& target) const {
  if (!computes_loss()) throw std::logic_error("the chain's last unit does not compute a loss");
  for (size_t k = 0; k + 1 < units_.size(); ++k) x = units_[k]->forward(x);
  return units_.back()->forward_loss(x, target);
}

std::vector<NamedParam> UnitChain::named_parameters() const {
  std::vector<NamedParam> out;
  for (size_t k = 0; k < units_.size(); ++k) {
    for (const auto& [path, p] : units_[k]->unit_parameters()) out.emplace_back(names_[k] + "." + path, p);
    if (auto* head = dynamic_cast<GptHead*>(units_[k].get()); head && head->tied_weight().defined())
      out.emplace_back("embedding.tok.weight", head->tied_weight());
  }
  return out;
}

int UnitChain::moe_blocks() const {
  int n = 0;
  for (const auto& u : units_) n += dynamic_cast<const MoeBlock*>(u.get()) != nullptr;
  return n;
}

at::Tensor UnitChain::all_to_all_anchor() const {
  for (const auto& u : units_)
    if (const auto* b = dynamic_cast<const MoeBlock*>(u.get())) return b->anchor();
  return {};
}

bool is_expert_parameter(const std::string& name) { return name.find(".experts_") != std::string::npos; }

std::vector<at::Tensor> UnitChain::trainable_parameters() const {
  std::vector<at::Tensor> out;
  std::set<const void*> seen;
  for (const auto& [name, p] : named_parameters())
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  return out;
}

namespace {

at::Tensor draw(const DataSpec& d) {
  const auto dtype = d.dtype == "float64" ? torch::kDouble
                     : d.dtype == "int64" ? torch::kLong
                     : d.dtype == "int32" ? torch::kInt
                                          : torch::kFloat;
  return d.is_integer() ? torch::randint(0, d.high, d.shape, dtype) : torch::randn(d.shape, dtype);
}

at::Tensor unpack(const at::Tensor& flat, int64_t offset, const DataSpec& d) {
  at::Tensor t = flat.narrow(0, offset, d.numel()).reshape(d.shape);
  return t.to(d.dtype == "float64" ? torch::kDouble
              : d.dtype == "int64" ? torch::kLong
              : d.dtype == "int32" ? torch::kInt
                                   : torch::kFloat);
}

}  // namespace

at::Tensor Dataset::micro_batch(int iteration, int micro) const {
  torch::manual_seed(data_seed(m_, iteration, offset_ + micro));
  if (m_.kind == ModelKind::StageModules) {
    // Input first, then target, from the same stream: the same tensors on every rank.
    at::Tensor in = draw(m_.stage_modules->input), target = draw(m_.stage_modules->target);
    return torch::cat({in.reshape({-1}).to(torch::kDouble), target.reshape({-1}).to(torch::kDouble)}).to(device_);
  }
  at::Tensor d = m_.kind == ModelKind::Gpt ? torch::randint(0, m_.vocab, {m_.micro_batch_size, m_.seq + 1}, torch::kLong)
                                           : torch::randn({m_.micro_batch_size, 2 * m_.hidden});
  return d.to(device_);
}

at::Tensor Dataset::inputs_of(const at::Tensor& d) const {
  if (m_.kind == ModelKind::StageModules) return unpack(d, 0, m_.stage_modules->input);
  return m_.kind == ModelKind::Gpt ? d.narrow(1, 0, m_.seq).contiguous() : d.narrow(1, 0, m_.hidden).contiguous();
}

at::Tensor Dataset::labels_of(const at::Tensor& d) const {
  if (m_.kind == ModelKind::StageModules) return unpack(d, m_.stage_modules->input.numel(), m_.stage_modules->target);
  return m_.kind == ModelKind::Gpt ? d.narrow(1, 1, m_.seq).contiguous() : d.narrow(1, m_.hidden, m_.hidden).contiguous();
}

at::Tensor last_stage_loss(const ModelConfig& m, const UnitChain& last, const at::Tensor& input, const at::Tensor& labels,
                           int micro_batches) {
  if (last.computes_loss()) {
    at::Tensor loss = last.forward_loss(input, labels);
    if (loss.numel() != 1 || !loss.is_floating_point())
      throw std::runtime_error("the last stage module must return the loss as a floating-point scalar, got shape " +
                               c10::str(loss.sizes()) + " of " + std::string(c10::toString(loss.scalar_type())));
    return loss.reshape({}) / static_cast<double>(micro_batches);
  }
  const at::Tensor out = last.forward(input);
  at::Tensor loss = m.kind == ModelKind::Gpt
                        ? torch::nn::functional::cross_entropy(out.reshape({-1, out.size(-1)}), labels.reshape({-1}))
                        : torch::mse_loss(out, labels);
  return loss / static_cast<double>(micro_batches);
}

const UnitChain& RankModel::chain_of(int stage) const {
  for (size_t k = 0; k < stages.size(); ++k)
    if (stages[k] == stage) return stage_chain[k];
  throw std::logic_error("stage " + std::to_string(stage) + " is not held by this rank");
}

std::vector<NamedParam> RankModel::named_parameters() const {
  std::vector<NamedParam> out;
  std::set<const void*> seen;
  auto add = [&](const UnitChain& c) {
    for (auto& np : c.named_parameters())
      if (seen.insert(np.second.unsafeGetTensorImpl()).second) out.push_back(np);
  };
  for (const auto& c : stage_chain) add(c);
  add(tower);
  return out;
}

RankModel build_rank_model(const ModelConfig& m, const ModelLayout& l, const std::vector<int>& stages,
                           bool with_tower, at::Device device, int expert_rank) {
  RankModel rm;
  rm.stages = stages;
  if (m.kind == ModelKind::StageModules) {
    for (int s : stages)
      rm.stage_chain.emplace_back(std::vector<std::shared_ptr<Unit>>{load_stage_module(*m.stage_modules, s % l.stages, device)},
                                  std::vector<std::string>{unit_name(m, l, s % l.stages)});
    return rm;  // no tower, no tied weights (the agreement refuses both)
  }
  const bool holds_embedding = !stages.empty() && stages.front() == 0;
  at::Tensor embedding_weight;  // the tied weight, shared within this rank
  std::vector<std::pair<int, std::shared_ptr<Unit>>> built;
  auto build = [&](int u) {
    at::Tensor tied;
    bool owns = false;
    if (m.tie_embeddings && u == l.head_unit) {
      if (holds_embedding) {
        tied = embedding_weight;
      } else {
        // Same seed as the embedding unit, so the copy starts equal to it.
        auto emb = std::dynamic_pointer_cast<GptEmbedding>(make_unit(m, l, l.embedding_unit, {}));
        tied = emb->token_weight().detach().clone().to(device).set_requires_grad(true);
        owns = true;
      }
    }
    auto unit = make_unit(m, l, u, tied, expert_rank, rm.experts);
    unit->to(device);
    if (auto* emb = dynamic_cast<GptEmbedding*>(unit.get())) embedding_weight = emb->token_weight();
    if (owns) rm.tied.push_back(tied);
    return unit;
  };
  for (int s : stages) {
    std::vector<std::shared_ptr<Unit>> units;
    std::vector<std::string> names;
    // A replicated stage (schedule stage s >= the model's stages) is a copy of model stage
    // s mod stages: the same units, the same names, the same initial values (seeded per unit).
    int moe_layer = 0;
    for (int u : l.stage_units[static_cast<size_t>(s % l.stages)]) {
      units.push_back(build(u));
      names.push_back(unit_name(m, l, u));
      if (auto* b = dynamic_cast<MoeBlock*>(units.back().get())) b->set_stage_layer(moe_layer++);
    }
    rm.stage_chain.emplace_back(std::move(units), std::move(names));
  }
  if (m.tie_embeddings && holds_embedding && embedding_weight.defined()) rm.tied.insert(rm.tied.begin(), embedding_weight);
  if (with_tower && !l.tower_units.empty()) {
    std::vector<std::shared_ptr<Unit>> units;
    std::vector<std::string> names;
    for (int u : l.tower_units) {
      units.push_back(build(u));
      names.push_back(unit_name(m, l, u));
    }
    rm.tower = UnitChain(std::move(units), std::move(names));
    rm.tower_trainable = m.tower != Tower::Frozen;
    if (!rm.tower_trainable)
      for (auto& [name, p] : rm.tower.named_parameters()) p.set_requires_grad(false);
  }
  return rm;
}

}  // namespace ppsched::exec
