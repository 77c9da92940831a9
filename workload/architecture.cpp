// A transformer's layers from its shape (network.hpp, Architecture) under the training
// settings: parameters, FLOPs and activation bytes of every layer, for one micro-batch of
// sequence length s, micro-batch size b (T = s b tokens), activations of e bytes (2 in mixed
// precision), h hidden, a query heads, g key/value heads, d head_dim, f the MLP's width, V the
// vocabulary; every figure is divided by the tensor-parallel degree t (Megatron's accounting,
// with sequence parallelism), but for the parameters every tensor-parallel rank holds whole.
//
// Tensor parallelism splits a parameter as Megatron-LM's layers do: the QKV, MLP-up (and gate),
// expert and MTP-projection weights and their biases by output columns, the attention output and
// MLP-down weights by input rows, the word embedding and an output head by the vocabulary; each
// TP rank holds 1/t of them. Replicated on every TP rank, whole: norm weights (and LayerNorm
// biases; Qwen3's q_norm and k_norm, MLA's low-rank norms, the final and MTP norms), the biases
// of row-parallel layers (attention output, MLP down: added after the reduction), learned
// position embeddings (a plain torch.nn.Embedding in LanguageModelEmbedding), the MoE router
// (TopKRouter.weight, DeepSeek-V3's expert bias), Qwen2-MoE's shared-expert gate, and MLA's down
// projections (TELinear with parallel_mode "duplicated" in Megatron's Transformer Engine spec).
//
// Parameters: as the model holds them -- weights and biases of every projection, norm weights
// (RMSNorm h, LayerNorm 2h), embeddings (and GPT-2's learned positions), an untied head, MoE
// experts, routers (and DeepSeek-V3's per-expert score bias), MLA's low-rank projections and
// their norms. Without biases these are Megatron's formulas (theoretical_memory_usage.py,
// reference model_and_memory.md §1).
//
// FLOPs (Narayanan et al. 2021): a forward costs 2 x the matmul parameters a token passes
// through x T (an MoE token passes through k experts, the router and the shared experts), plus
// the attention core 2 T s a (d_qk + d_v) (QK^T and the weighted sum over the whole s x s matrix,
// as the paper counts) -- half of it under a causal FlashAttention kernel, which skips the blocks
// above the diagonal (Training::core(); Megatron-LM's num_floating_point_operations halves it
// too). The input-gradient backward costs the matmuls once more and the attention core
// twice (it has no weights); the weight-gradient backward the matmuls once. Recomputation adds
// to the input-gradient backward what it re-runs: the attention core (selective) or the whole
// forward (full). Norms, activations and the softmax are not counted.
//
// Kept activations (Korthikanti et al. 2022, Table 2, generalised; every tensor autograd keeps
// from the forward to the backward, e bytes per element, dropout masks 1 byte):
//   the two norms' inputs 2eTh; the QKV projection's input eTh; Q, K, V eT(a + 2g)d; the
//   attention scores without FlashAttention: the softmax output eaTs, and with attention
//   dropout its mask aTs and output eaTs; the output projection's input eTad; the MLP's input
//   eTh; a plain MLP 2eTf (the activation's input, the second matmul's input), a gated one
//   3eTf (Megatron's fused SwiGLU keeps [gate; up] and the down projection's input); with
//   hidden dropout the two residual masks 2Th.
// For GPT (LayerNorm, a d = h, g = a, f = 4h, dropout everywhere, e = 2) this is exactly
// s b h (34 + 5 a s / h); FlashAttention keeps no scores (34 s b h; its backward recomputes them
// blockwise, FLOPs counted as without it); selective recomputation drops them too (34 s b h,
// the backward re-runs the attention core; with FlashAttention it changes nothing); full
// recomputation keeps only the layer input, e T h = 2 s b h.
// A recomputing backward holds, while it runs, what it recomputes for one layer (workspace).
// An MoE layer keeps the router's probabilities (fp32, 4 T E), its routing map (bool, T E) and
// the top-k probabilities the combine weighs by (fp32, 4 T k) and, per routed copy of a token
// (T k of them), the expert's input (the permuted token the dispatch delivered), its MLP and its
// output for the weighted combine; shared experts keep their MLP.
// Expert parallelism (Megatron-Core): the routed experts' parameters are split over ep x etp
// ranks instead of tp (each rank holds E / ep experts, each 1 / etp of it); the router and the
// shared experts follow the dense layers. Under uniform routing every rank computes, keeps and
// sends the same share whatever ep is: its T / t tokens' k routed copies (sequence parallelism),
// times the capacity / imbalance factor cf (the busiest rank's share over the uniform one).
// One all-to-all (the dispatch; the combine sends as many back) moves from each rank
// cf T k h e (ep - 1) / (ep t) bytes: each routed copy's h elements, the (ep - 1) / ep of them
// whose expert is on another EP rank. The expert phase's FLOPs (Layer::expert_*_flops) are the
// routed experts' matmuls; the router, the shared experts and the attention are the layer's
// other phase.
// Weight-gradient state (what a split backward keeps from BWD_INPUT to BWD_WEIGHT): each
// matmul's input and its output's gradient -- for GPT 14 + 18 = 32 s b h, the Zero Bubble
// runtime's analytic unit (W = -32 hidden).
// Embedding: 0 FLOPs; keeps the token ids (8 T, int64) and with embedding dropout its mask T h.
// Final norm: keeps its input. Output head: 2 T h V each way, keeps its input. Loss: keeps the
// logits' softmax in fp32, 4 T V. Megatron's output-layer term 4 s b h (1 + V / h) is the norm's,
// the head's and the loss's together.
#include <algorithm>
#include <cmath>
#include <string>

#include "schedule/errors.hpp"
#include "schedule/text_format.hpp"
#include "workload/workload.hpp"

namespace ppsched {
namespace {

struct Shape {
  double h, a, g, d, f, V, s, b, T, e, t;
  double ep = 1, etp = 1, cf = 1;  // expert parallelism, expert TP, capacity / imbalance factor
};

[[noreturn]] void too_large(const std::string& what, const std::string& layer, double value, double limit) {
  throw InputError({}, "the " + what + " of layer " + layer + " is " + general(value, 4) + ", over the limit of " +
                           general(limit, 4) +
                           ": the model is too large for ppsched (README \"Limits\")");
}

int64_t whole(double v, const std::string& what, const std::string& layer, double limit) {
  if (!std::isfinite(v) || v > limit) too_large(what, layer, v, limit);
  return static_cast<int64_t>(std::llround(v));
}

// The figures accumulated in double and checked once, when a layer is done.
struct Figures {
  double params = 0, matmul = 0, core = 0;  // core: attention core forward FLOPs
  double replicated = 0;                    // of params: what every TP rank holds whole
  double kept = 0, scores = 0;              // kept activations (scores: the part selective drops)
  double layer_input = 0;                   // what full recomputation keeps
  double weight_grad = 0;                   // matmul inputs and output gradients
  double extra_fwd = 0;                     // forward FLOPs beyond 2 x matmul x T (the head's)
  // The routed experts (counted in the above too): their parameters (split over ep x etp, not
  // tp), the matmul parameters a token passes through in them, and the bytes it sends to them.
  double expert_params = 0, expert_matmul = 0, a2a = 0;
};

Layer finish(const std::string& name, LayerKind kind, const Figures& x, const Shape& z, Recompute r, double output) {
  Layer l;
  l.name = name;
  l.kind = kind;
  const double fwd = 2 * z.T * x.matmul + x.core + x.extra_fwd;
  double bwd_in = 2 * z.T * x.matmul + 2 * x.core + x.extra_fwd, bwd_w = 2 * z.T * x.matmul + x.extra_fwd;
  double kept = x.kept + x.scores, workspace = 0;
  if (r == Recompute::Selective && x.scores > 0) {  // with FlashAttention there is nothing to recompute
    bwd_in += x.core;
    kept = x.kept;
    workspace = x.scores;
  } else if (r == Recompute::Full) {
    bwd_in += fwd;
    kept = x.layer_input;
    workspace = x.kept + x.scores;
  }
  l.params = whole((x.params - x.replicated - x.expert_params) / z.t + x.replicated + x.expert_params / (z.ep * z.etp),
                   "parameter count", name, kMaxLayerParams);
  l.expert_params = whole(x.expert_params / (z.ep * z.etp), "parameter count", name, kMaxLayerParams);
  if (x.expert_matmul > 0) {
    // The expert phase: its matmuls each way, a full recomputation re-running its forward.
    const double e = 2 * z.T * x.expert_matmul;
    l.expert_fwd_flops = e / z.t;
    l.expert_bwd_input_flops = (r == Recompute::Full ? 2 * e : e) / z.t;
    l.expert_bwd_weight_flops = e / z.t;
    l.a2a_bytes = whole(x.a2a / z.t, "all-to-all bytes", name, kMaxLayerBytes);
  }
  for (auto [value, field] : {std::pair{fwd / z.t, &l.fwd_flops}, {bwd_in / z.t, &l.bwd_input_flops}, {bwd_w / z.t, &l.bwd_weight_flops}}) {
    if (!std::isfinite(value) || value > kMaxLayerFlops) too_large("FLOPs", name, value, kMaxLayerFlops);
    *field = value;
  }
  l.activation_bytes = whole(kept / z.t, "kept activation bytes", name, kMaxLayerBytes);
  l.weight_grad_bytes = whole(x.weight_grad / z.t, "weight-gradient bytes", name, kMaxLayerBytes);
  l.workspace_bytes = whole(workspace / z.t, "recomputation workspace", name, kMaxLayerBytes);
  l.output_bytes = whole(output / z.t, "output bytes", name, kMaxLayerBytes);
  return l;
}

// Tensor parallelism's collectives of a layer with sequence parallelism (Megatron-LM, Korthikanti
// et al. 2022 section 4.2.2): a decoder layer all-gathers its sequence-split input before the
// attention and before the MLP and reduce-scatters after each (4 in the forward, their
// conjugates in the backward; an MoE layer's token dispatcher gathers and scatters the routed
// tokens over TP as the dense MLP does); the embedding reduce-scatters its vocabulary-parallel
// output, the head all-gathers its input (1 each way). A full recomputation re-runs the forward's.
void add_tp_collectives(Layer& l, const Shape& z, int fwd, Recompute r) {
  if (z.t <= 1 || fwd == 0) return;
  l.tp_fwd_collectives = fwd;
  l.tp_bwd_collectives = r == Recompute::Full ? 2 * fwd : fwd;
  l.tp_collective_bytes = whole(z.e * z.T * z.h, "tensor-parallel collective bytes", l.name, kMaxLayerBytes);
}

// Self-attention of one decoder layer (standard, GQA or MLA).
void attention(const Architecture& m, const Shape& z, bool flash, AttentionCore core, Figures& x) {
  const double h = z.h, a = z.a, T = z.T, e = z.e, s = z.s;
  double dqk = z.d, dv = z.d;
  if (m.kv_lora_rank > 0) {
    const double ql = static_cast<double>(m.q_lora_rank), kvl = static_cast<double>(m.kv_lora_rank);
    const double nope = static_cast<double>(m.qk_nope_head_dim), rope = static_cast<double>(m.qk_rope_head_dim);
    dqk = nope + rope;
    dv = static_cast<double>(m.v_head_dim);
    const double q_mat = ql > 0 ? h * ql + ql * a * dqk : h * a * dqk;
    const double kv_mat = h * (kvl + rope) + kvl * a * (nope + dv);
    const double o_mat = a * dv * h;
    x.matmul += q_mat + kv_mat + o_mat;
    x.params += q_mat + kv_mat + o_mat + (ql > 0 ? ql : 0) + kvl;  // + the q_a and kv_a norms
    x.replicated += (ql > 0 ? h * ql + ql : 0) + h * (kvl + rope) + kvl;  // the down projections and those norms
    // Kept: the low-rank projections' inputs and their norms' inputs, the core's q, k, v, the
    // output projection's input.
    x.kept += e * T * ((ql > 0 ? 2 * ql : 0) + 2 * kvl + a * (2 * dqk + dv)) + e * T * a * dv;
    x.weight_grad += e * T * ((ql > 0 ? ql + ql : 0) + a * dqk + kvl + rope + kvl + a * (nope + dv) + a * dv + h);
  } else {
    const double g = z.g, d = z.d;
    const double qkv = h * (a + 2 * g) * d, o = a * d * h;
    x.matmul += qkv + o;
    x.params += qkv + o + (m.qkv_bias ? (a + 2 * g) * d : 0) + (m.attn_out_bias ? h : 0) + (m.qk_norm ? 2 * d : 0);
    x.replicated += (m.attn_out_bias ? h : 0) + (m.qk_norm ? 2 * d : 0);  // the row-parallel bias; q_norm, k_norm
    x.kept += e * T * (a + 2 * g) * d + e * T * a * d;  // Q, K, V; the output projection's input
    // inputs: QKV (eTh, counted with the norm below), output projection; output gradients
    x.weight_grad += e * T * a * d + e * T * (a + 2 * g) * d + e * T * h;
  }
  x.kept += e * T * h;         // the QKV (or q_a / kv_a) projections' input
  x.weight_grad += e * T * h;  // ... which their weight gradients read
  x.core += (core == AttentionCore::Causal ? 1 : 2) * T * s * a * (dqk + dv);
  if (flash) return;  // FlashAttention keeps no scores (its backward recomputes them blockwise)
  x.scores += e * a * T * s;  // the softmax output
  if (m.attention_dropout > 0) x.scores += a * T * s + e * a * T * s;  // its dropout mask and output
}

// The MLP, dense or mixture of experts. `gated`: SwiGLU (three matrices).
void mlp(const Architecture& m, const Shape& z, bool moe, Figures& x) {
  const double h = z.h, T = z.T, e = z.e;
  const double mats = m.gated_mlp ? 3 : 2, kept_per = m.gated_mlp ? 3 : 2, up = m.gated_mlp ? 2 : 1;
  x.kept += e * T * h;         // the MLP's (or router's) input
  x.weight_grad += e * T * h;  // read by the first matrices' weight gradients
  if (!moe) {
    const double f = z.f;
    x.matmul += mats * h * f;
    x.params += mats * h * f + (m.mlp_bias ? (up * f + h) : 0);
    x.replicated += m.mlp_bias ? h : 0;  // the down projection's bias (row-parallel)
    x.kept += kept_per * e * T * f;
    x.weight_grad += e * T * f + e * T * (up * f + h);  // the down input; the output gradients
    return;
  }
  const double E = static_cast<double>(m.experts), k = static_cast<double>(m.experts_per_token);
  const double fm = static_cast<double>(m.moe_ffn), sf = static_cast<double>(m.shared_ffn);
  const double cf = z.cf;  // the busiest expert rank's tokens over the uniform share
  x.expert_params += E * mats * h * fm;
  x.expert_matmul += cf * k * mats * h * fm;
  x.params += E * mats * h * fm + h * E + (m.router_bias ? E : 0) + mats * h * sf + (m.shared_expert_gate ? h : 0);
  x.replicated += h * E + (m.router_bias ? E : 0) + (m.shared_expert_gate ? h : 0);  // the router, the shared expert's gate
  x.matmul += cf * k * mats * h * fm + h * E + mats * h * sf + (m.shared_expert_gate ? h : 0);
  x.kept += 4 * T * E + T * E;                             // router probabilities (fp32), routing map (bool)
  x.kept += 4 * T * k;                                     // the top-k probabilities the combine weighs by (fp32)
  x.kept += cf * T * k * e * (2 * h + kept_per * fm);      // per routed copy: input, MLP, output
  x.kept += kept_per * e * T * sf;                         // shared experts' MLP
  x.weight_grad += cf * T * k * e * (h + fm + up * fm + h);  // routed copies: inputs and output gradients
  x.weight_grad += e * T * (sf + up * sf + h) + 4 * T * E; // shared experts; the router's output gradient
  // One all-to-all (dispatch; the combine returns as many): each routed copy of a token, h
  // elements, leaves for another EP rank with probability (ep - 1) / ep under uniform routing.
  x.a2a += cf * T * k * h * e * (z.ep - 1) / z.ep;
}

Layer decoder_layer(const Architecture& m, const Shape& z, bool moe, const Training& tr, Recompute r, const std::string& name,
                    LayerKind kind) {
  Figures x;
  const double norm = m.layer_norm ? 2 * z.h : z.h;
  x.params += 2 * norm;
  x.replicated += 2 * norm;
  x.kept += 2 * z.e * z.T * z.h;  // the two norms' inputs
  if (m.hidden_dropout > 0) x.kept += 2 * z.T * z.h;
  attention(m, z, tr.flash_attention, tr.core(), x);
  mlp(m, z, moe, x);
  x.layer_input = z.e * z.T * z.h;
  Layer l = finish(name, kind, x, z, r, z.e * z.T * z.h);
  l.moe = moe;
  return l;
}

}  // namespace

const char* to_string(LayerKind k) {
  switch (k) {
    case LayerKind::Embedding: return "embedding";
    case LayerKind::Decoder: return "decoder";
    case LayerKind::Mtp: return "mtp";
    case LayerKind::FinalNorm: return "norm";
    case LayerKind::Head: return "head";
    case LayerKind::Loss: return "loss";
    case LayerKind::Generic: return "layer";
  }
  return "?";
}
const char* to_string(Precision p) { return p == Precision::Bf16 ? "bf16" : p == Precision::Fp16 ? "fp16" : "fp32"; }
const char* to_string(Optimizer o) { return o == Optimizer::Adam ? "adam" : "sgd"; }
const char* to_string(AttentionCore c) { return c == AttentionCore::Causal ? "causal" : "full"; }
const char* to_string(Recompute r) { return r == Recompute::None ? "none" : r == Recompute::Selective ? "selective" : "full"; }

BytesPerParam Training::bytes_per_param() const {
  // Mixed precision (Megatron): 16-bit weights, fp32 main gradients, fp32 master weights plus
  // the optimizer's state (Adam: two moments; SGD: one momentum). fp32: no master copy.
  BytesPerParam b;
  const bool mixed = precision != Precision::Fp32;
  b.weights = mixed ? 2 : 4;
  b.grads = 4;
  const double states = optimizer == Optimizer::Adam ? 2 : 1;
  b.optimizer = 4 * states + (mixed ? 4 : 0);
  return b;
}

// The layers of a transformer, in order: embedding, decoder layers, MTP modules, final norm,
// output head, loss.
std::vector<Layer> transformer_layers(const Architecture& m, const Training& tr, int64_t seq_len) {
  Shape z{};
  z.h = static_cast<double>(m.hidden);
  z.a = static_cast<double>(m.heads);
  z.g = static_cast<double>(m.kv_heads > 0 ? m.kv_heads : m.heads);
  z.d = static_cast<double>(m.head_dim > 0 ? m.head_dim : m.hidden / std::max<int64_t>(m.heads, 1));
  z.f = static_cast<double>(m.ffn);
  z.V = static_cast<double>(m.vocab);
  z.s = static_cast<double>(seq_len);
  z.b = static_cast<double>(tr.micro_batch_size);
  z.T = z.s * z.b;
  z.e = tr.activation_element_bytes();
  z.t = std::max(tr.tp, 1);
  z.ep = std::max(tr.ep, 1);
  z.etp = std::max(tr.expert_tp(), 1);
  z.cf = tr.moe_capacity_factor;
  std::vector<Layer> out;
  out.reserve(static_cast<size_t>(m.layers + m.mtp_layers + 4));
  const double hidden_out = z.e * z.T * z.h;
  {
    Figures x;
    x.params = z.V * z.h + static_cast<double>(m.learned_positions) * z.h;
    x.replicated = static_cast<double>(m.learned_positions) * z.h;
    x.kept = 8 * z.T + (m.embedding_dropout > 0 ? z.T * z.h : 0);
    x.weight_grad = 8 * z.T + hidden_out;
    out.push_back(finish("embedding", LayerKind::Embedding, x, z, Recompute::None, hidden_out));
    add_tp_collectives(out.back(), z, 1, Recompute::None);
  }
  for (int64_t i = 0; i < m.layers; ++i) {
    const bool moe = m.experts > 0 && static_cast<size_t>(i) < m.moe_layers.size() && m.moe_layers[static_cast<size_t>(i)];
    out.push_back(decoder_layer(m, z, moe, tr, tr.recompute_of(static_cast<size_t>(i)), "layers." + std::to_string(i),
                                LayerKind::Decoder));
    add_tp_collectives(out.back(), z, 4, tr.recompute_of(static_cast<size_t>(i)));
  }
  const double norm = m.layer_norm ? 2 * z.h : z.h;
  for (int64_t i = 0; i < m.mtp_layers; ++i) {
    // DeepSeek-V3's MTP module: two norms and a 2h x h projection in front of a decoder layer
    // (MoE like the last main layer), its own final norm, and the embedding and the output head
    // shared with the main model (the head's FLOPs and logits counted here, the weights with
    // their owners: its stage holds a copy of what is not on it).
    const bool moe = m.experts > 0 && !m.moe_layers.empty() && m.moe_layers.back();
    Layer l = decoder_layer(m, z, moe, tr, tr.recompute_of(static_cast<size_t>(m.layers + i)), "mtp." + std::to_string(i),
                            LayerKind::Mtp);
    // The norms are replicated over TP, the projection column-parallel (Megatron's eh_proj).
    const double head = z.h * z.V;
    l.params += static_cast<int64_t>(std::llround(3 * norm + 2 * z.h * z.h / z.t));
    l.fwd_flops += 2 * z.T * (2 * z.h * z.h + head) / z.t;
    l.bwd_input_flops += 2 * z.T * (2 * z.h * z.h + head) / z.t;
    l.bwd_weight_flops += 2 * z.T * (2 * z.h * z.h + head) / z.t;
    l.activation_bytes += whole((3 * z.e * z.T * z.h + z.e * z.T * z.h + 4 * z.T * z.V) / z.t, "kept activation bytes", l.name, kMaxLayerBytes);
    l.weight_grad_bytes += whole((2 * z.e * z.T * z.h + z.e * z.T * z.h + z.e * z.T * z.V) / z.t, "weight-gradient bytes", l.name, kMaxLayerBytes);
    l.uses_embedding_params = whole(head / z.t, "parameter count", l.name, kMaxLayerParams);
    if (!m.tied_embeddings) l.uses_head_params = l.uses_embedding_params;
    add_tp_collectives(l, z, 4, tr.recompute_of(static_cast<size_t>(m.layers + i)));
    out.push_back(std::move(l));
  }
  {
    Figures x;
    x.params = x.replicated = norm;
    x.kept = z.e * z.T * z.h;
    out.push_back(finish("norm", LayerKind::FinalNorm, x, z, Recompute::None, hidden_out));
  }
  {
    Figures x;
    x.params = m.tied_embeddings ? 0 : z.V * z.h;
    x.extra_fwd = 2 * z.T * z.h * z.V;
    x.kept = z.e * z.T * z.h;
    x.weight_grad = z.e * z.T * z.h + z.e * z.T * z.V;
    Layer head = finish("head", LayerKind::Head, x, z, Recompute::None, z.e * z.T * z.V);
    if (m.tied_embeddings) head.uses_embedding_params = whole(z.V * z.h / z.t, "parameter count", "head", kMaxLayerParams);
    add_tp_collectives(head, z, 1, Recompute::None);
    out.push_back(std::move(head));
  }
  {
    Figures x;
    x.kept = 4 * z.T * z.V;
    out.push_back(finish("loss", LayerKind::Loss, x, z, Recompute::None, 0));
  }
  return out;
}

}  // namespace ppsched
