// Built-in models (mlp, gpt), cut by a ModelLayout into virtual stages and an MPipe tower, and
// the deterministic data they train on. A rank builds only the units it holds; each unit is
// initialised from its own seed, so the values equal the single-process reference's.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "exec/config.hpp"
#include "exec/model_layout.hpp"

namespace ppsched::exec {

using NamedParam = std::pair<std::string, at::Tensor>;

// One unit: embedding, decoder block, head, or MLP block. `forward` maps the previous unit's
// output to the next unit's input (token ids -> hidden for the embedding, hidden -> logits
// for the head).
class Unit : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& x) = 0;
  // A unit that computes the loss itself (the last TorchScript stage: forward(x, target)).
  // Built-in units do not; last_stage_loss() applies the model's loss to their output.
  virtual bool computes_loss() const { return false; }
  virtual at::Tensor forward_loss(const at::Tensor& x, const at::Tensor& target);
  // Its parameters by path ("fc.weight"); nn::Module's registry unless the unit keeps its
  // parameters elsewhere (a TorchScript module).
  virtual std::vector<std::pair<std::string, at::Tensor>> unit_parameters() const;
};

class ExpertLink;
// Where a rank's MoE blocks find the expert-parallel link, once the transport exists (null:
// every expert is local, as in the single-process reference).
struct ExpertSlot {
  ExpertLink* link = nullptr;
};

// A chain of units: a virtual stage, or the tower.
class UnitChain {
 public:
  UnitChain() = default;
  UnitChain(std::vector<std::shared_ptr<Unit>> units, std::vector<std::string> names);
  at::Tensor forward(at::Tensor x) const;
  // Every unit but the last forward, the last one's forward_loss (its computes_loss() holds).
  at::Tensor forward_loss(at::Tensor x, const at::Tensor& target) const;
  bool computes_loss() const { return !units_.empty() && units_.back()->computes_loss(); }
  std::vector<NamedParam> named_parameters() const;  // "<unit>.<path>", e.g. "block3.attn.qkv.weight"
  std::vector<at::Tensor> trainable_parameters() const;
  bool empty() const { return units_.empty(); }
  // MoE blocks it holds, and a parameter every one of their all-to-alls lies downstream of (the
  // first MoE block's attention input projection; undefined without MoE blocks): BWD_INPUT on a
  // stage with nothing to differentiate takes its gradient, so the all-to-alls' backward runs
  // where the lowering puts them.
  int moe_blocks() const;
  at::Tensor all_to_all_anchor() const;

 private:
  std::vector<std::shared_ptr<Unit>> units_;
  std::vector<std::string> names_;
};

// The micro-batches: micro m of iteration i is drawn from its own seed, so every rank can
// produce any micro-batch (hyper-parallel's requires_all_rank_input) and the reference sees
// the same. One tensor per micro-batch carries inputs and labels (gpt: token ids [b, seq+1];
// mlp: [b, 2*hidden] = inputs | targets; stage modules: the manifest's input and target,
// flattened and concatenated as float64, which holds float32 and integers below 2^53 exactly),
// which is what DATA_SEND ships.
class Dataset {
 public:
  // `micro_offset`: the global index of this replica's micro-batch 0 (--dp: replica d of a
  // schedule with M micro-batches runs global micro-batches d*M .. d*M+M-1).
  Dataset(const ModelConfig& m, at::Device device, int micro_offset = 0) : m_(m), device_(device), offset_(micro_offset) {}
  at::Tensor micro_batch(int iteration, int micro) const;
  at::Tensor inputs_of(const at::Tensor& data) const;  // what stage 0 (or the tower) eats
  at::Tensor labels_of(const at::Tensor& data) const;  // what the loss compares with

 private:
  ModelConfig m_;
  at::Device device_;
  int offset_ = 0;
};

// The last stage's forward with its loss: cross-entropy over the vocabulary (gpt) or MSE (mlp)
// applied to the chain's output, or what the last TorchScript stage's forward(x, labels)
// returns (a scalar). Divided by the number of micro-batches so the summed losses are the
// batch mean.
at::Tensor last_stage_loss(const ModelConfig& m, const UnitChain& last, const at::Tensor& input, const at::Tensor& labels,
                           int micro_batches);

// What one rank holds: its virtual stages and (with an MPipe tower) a full tower copy.
struct RankModel {
  std::vector<int> stages;            // ascending
  std::vector<UnitChain> stage_chain; // parallel to `stages`
  UnitChain tower;                    // empty without a tower
  bool tower_trainable = false;
  std::vector<at::Tensor> tied;       // gpt --tie-embeddings: this rank's copies of the tied weight
  std::shared_ptr<ExpertSlot> experts = std::make_shared<ExpertSlot>();  // --model moe

  const UnitChain& chain_of(int stage) const;
  std::vector<NamedParam> named_parameters() const;  // stages then tower, tied weights once
};

// --stage-module: stage `stage`'s TorchScript module as a unit (stage_modules.cpp).
std::shared_ptr<Unit> load_stage_module(const StageModules& sm, int stage, at::Device device);
// --stage-module: loads every stage on the CPU and runs micro-batch 0 through the chain (the
// last stage with its target), so a rank refuses a module that does not fit before it talks
// to anyone. Returns one sentence per problem; empty when the chain fits.
std::vector<std::string> check_stage_chain(const ModelConfig& m);

// Builds the units of `stages` (and the tower when the layout has one) on `device`. MoE blocks
// hold the experts of expert-parallel member `expert_rank` of m.ep (j mod m.ep == expert_rank);
// -1: every expert (the reference).
RankModel build_rank_model(const ModelConfig& m, const ModelLayout& l, const std::vector<int>& stages,
                           bool with_tower, at::Device device, int expert_rank = -1);
// Whether `p` (a name of named_parameters()) is an expert's: owned by one member of the
// expert-parallel group, not replicated over it.
bool is_expert_parameter(const std::string& name);

}  // namespace ppsched::exec
