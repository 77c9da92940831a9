#include "exec/model_description.hpp"

#include <nlohmann/json.hpp>

#include "model/errors.hpp"

namespace ppsched::exec {
namespace {

using json = nlohmann::json;

// Matrix products count 2 FLOPs per multiply-add; a backward costs twice its forward, split
// evenly between the input and the weight gradients (the reader's default without bwd_*).
json layer(const std::string& name, const char* kind, double params, double fwd_flops, double activation_bytes,
           double output_bytes) {
  return {{"name", name},
          {"kind", kind},
          {"params", static_cast<int64_t>(params)},
          {"fwd_flops", fwd_flops},
          {"activation_bytes", static_cast<int64_t>(activation_bytes)},
          {"output_bytes", static_cast<int64_t>(output_bytes)}};
}

}  // namespace

std::string describe_model(const ModelConfig& m, int layers) {
  if (m.kind == ModelKind::StageModules)
    throw InputError({}, "--model-out describes a built-in model (--model gpt|mlp); stage modules have no closed form");
  const double b = m.micro_batch_size, h = m.hidden, f32 = 4;
  json out = json::array();
  std::string name;
  if (m.kind == ModelKind::Gpt) {
    const double t = m.seq, T = b * t, v = m.vocab, heads = m.heads;
    // Token + position embedding: a lookup and an add.
    out.push_back(layer("embedding", "embedding", v * h + t * h, T * h, 0, T * h * f32));
    for (int k = 0; k < layers; ++k) {
      // qkv (3h^2), proj (h^2), fc1 and fc2 (4h^2 each) as matrix products, and the attention's
      // two (b, heads, t, t) products, computed whole before the causal mask.
      const double params = 12 * h * h + 13 * h;
      const double fwd = 2 * T * 12 * h * h + 2 * 2 * b * t * t * h;
      // Kept for the backward (fp32): x, ln1, qkv, y, mid, ln2 (8 T h), fc1 and gelu (8 T h), and
      // the scores before and after the softmax.
      const double act = (16 * T * h + 2 * b * heads * t * t) * f32;
      out.push_back(layer("block" + std::to_string(k), "decoder", params, fwd, act, T * h * f32));
    }
    // Final norm + LM head (+ cross-entropy): the head's product dominates.
    const double head_params = m.tie_embeddings ? 2 * h : 2 * h + v * h;
    out.push_back(layer("head", "head", head_params, 2 * T * h * v, (2 * T * h + T * v) * f32, 0));
    name = "ppsched-exec gpt";
  } else {
    for (int k = 0; k < layers; ++k)
      out.push_back(layer("block" + std::to_string(k), "layer", h * h + h, 2 * b * h * h, 2 * b * h * f32, b * h * f32));
    name = "ppsched-exec mlp";
  }
  json doc = {{"format", "ppsched-model"},
              {"version", 1},
              {"name", name + " (" + std::to_string(layers) + " blocks, hidden " + std::to_string(m.hidden) + ")"},
              {"comment", "written by ppsched-exec --model-out: the executor's built-in model, one layer per unit as "
                          "its traces name them (otherData.layers); FLOPs per micro-batch"},
              {"layers", out},
              {"training", {{"precision", "fp32"}, {"optimizer", "sgd"}}}};
  return doc.dump(2) + "\n";
}

}  // namespace ppsched::exec
