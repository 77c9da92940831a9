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
};

// A chain of units: a virtual stage, or the tower.
class UnitChain {
 public:
  UnitChain() = default;
  UnitChain(std::vector<std::shared_ptr<Unit>> units, std::vector<std::string> names);
  at::Tensor forward(at::Tensor x) const;
  std::vector<NamedParam> named_parameters() const;  // "<unit>.<path>", e.g. "block3.attn.qkv.weight"
  std::vector<at::Tensor> trainable_parameters() const;
  bool empty() const { return units_.empty(); }

 private:
  std::vector<std::shared_ptr<Unit>> units_;
  std::vector<std::string> names_;
};

// The micro-batches: micro m of iteration i is drawn from its own seed, so every rank can
// produce any micro-batch (hyper-parallel's requires_all_rank_input) and the reference sees
// the same. One tensor per micro-batch carries inputs and labels (gpt: token ids [b, seq+1];
// mlp: [b, 2*hidden] = inputs | targets), which is what DATA_SEND ships.
class Dataset {
 public:
  Dataset(const ModelConfig& m, at::Device device) : m_(m), device_(device) {}
  at::Tensor micro_batch(int iteration, int micro) const;
  at::Tensor inputs_of(const at::Tensor& data) const;  // what stage 0 (or the tower) eats
  at::Tensor labels_of(const at::Tensor& data) const;  // what the loss compares with

 private:
  ModelConfig m_;
  at::Device device_;
};

// The loss the last stage adds: cross-entropy over the vocabulary (gpt) or MSE (mlp), divided
// by the number of micro-batches so the summed losses are the batch mean.
at::Tensor stage_loss(const ModelConfig& m, const at::Tensor& output, const at::Tensor& labels, int micro_batches);

// What one rank holds: its virtual stages and (with an MPipe tower) a full tower copy.
struct RankModel {
  std::vector<int> stages;            // ascending
  std::vector<UnitChain> stage_chain; // parallel to `stages`
  UnitChain tower;                    // empty without a tower
  bool tower_trainable = false;
  std::vector<at::Tensor> tied;       // gpt --tie-embeddings: this rank's copies of the tied weight

  const UnitChain& chain_of(int stage) const;
  std::vector<NamedParam> named_parameters() const;  // stages then tower, tied weights once
};

// Builds the units of `stages` (and the tower when the layout has one) on `device`.
RankModel build_rank_model(const ModelConfig& m, const ModelLayout& l, const std::vector<int>& stages,
                           bool with_tower, at::Device device);

}  // namespace ppsched::exec
