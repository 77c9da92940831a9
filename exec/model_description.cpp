#include "exec/model_description.hpp"

#include "schedule/errors.hpp"
#include "workload/model_file.hpp"

namespace ppsched::exec {
namespace {

// Matrix products count 2 FLOPs per multiply-add; a backward costs twice its forward, split
// evenly between the input and the weight gradients; half the kept activation waits for the
// weight gradient (a model file's defaults without bwd_* and weight_grad_bytes).
Layer layer(const std::string& name, LayerKind kind, double params, double fwd_flops, double activation_bytes,
            double output_bytes) {
  Layer l;
  l.name = name;
  l.kind = kind;
  l.params = static_cast<int64_t>(params);
  l.fwd_flops = fwd_flops;
  l.bwd_input_flops = l.bwd_weight_flops = fwd_flops;
  l.activation_bytes = static_cast<int64_t>(activation_bytes);
  l.weight_grad_bytes = l.activation_bytes / 2;
  l.output_bytes = static_cast<int64_t>(output_bytes);
  return l;
}

}  // namespace

std::vector<Layer> builtin_layers(const ModelConfig& m, int layers) {
  if (m.kind == ModelKind::StageModules)
    throw InputError({}, "stage modules (--stage-module) have no closed form: only the built-in models (--model gpt|mlp) do");
  const double b = m.micro_batch_size, h = m.hidden, f32 = 4;
  std::vector<Layer> out;
  if (m.kind == ModelKind::Gpt) {
    const double t = m.seq, T = b * t, v = m.vocab, heads = m.heads;
    // Token + position embedding: a lookup and an add.
    out.push_back(layer("embedding", LayerKind::Embedding, v * h + t * h, T * h, 0, T * h * f32));
    for (int k = 0; k < layers; ++k) {
      // qkv (3h^2), proj (h^2), fc1 and fc2 (4h^2 each) as matrix products, and the attention's
      // two (b, heads, t, t) products, computed whole before the causal mask.
      const double params = 12 * h * h + 13 * h;
      const double fwd = 2 * T * 12 * h * h + 2 * 2 * b * t * t * h;
      // Kept for the backward (fp32): x, ln1, qkv, y, mid, ln2 (8 T h), fc1 and gelu (8 T h), and
      // the scores before and after the softmax.
      const double act = (16 * T * h + 2 * b * heads * t * t) * f32;
      out.push_back(layer("block" + std::to_string(k), LayerKind::Decoder, params, fwd, act, T * h * f32));
    }
    // Final norm + LM head (+ cross-entropy): the head's product dominates.
    const double head_params = m.tie_embeddings ? 2 * h : 2 * h + v * h;
    out.push_back(layer("head", LayerKind::Head, head_params, 2 * T * h * v, (2 * T * h + T * v) * f32, 0));
  } else {
    for (int k = 0; k < layers; ++k)
      out.push_back(layer("block" + std::to_string(k), LayerKind::Generic, h * h + h, 2 * b * h * h, 2 * b * h * f32, b * h * f32));
  }
  return out;
}

Workload builtin_workload(const ModelConfig& m, int layers) {
  Workload net;
  net.name = std::string(m.kind == ModelKind::Gpt ? "ppsched-exec gpt" : "ppsched-exec mlp") + " (" + std::to_string(layers) +
             " blocks, hidden " + std::to_string(m.hidden) + ")";
  net.explicit_layers = builtin_layers(m, layers);
  // fp32 weights and gradients, SGD; the listed FLOPs are taken as achieved (a listed model's
  // device, as a model file reads it).
  net.training.precision = Precision::Fp32;
  net.training.optimizer = Optimizer::Sgd;
  net.device.mfu = 1.0;
  return net;
}

std::string describe_model(const ModelConfig& m, int layers) {
  if (m.kind == ModelKind::StageModules)
    throw InputError({}, "--model-out describes a built-in model (--model gpt|mlp); stage modules have no closed form");
  return write_model(builtin_workload(m, layers),
                     "written by ppsched-exec --model-out: the executor's built-in model, one layer per unit as its "
                     "traces name them (otherData.layers); FLOPs per micro-batch");
}

}  // namespace ppsched::exec
