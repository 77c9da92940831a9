// The workload: the model being trained, an ordered list of layers, each with its parameters, FLOPs and
// activation bytes, the training settings that size them, and the device that runs them.
//
// Where it sits in the flow (README "Layout"):
//
//   model file / Hugging Face config.json --(workload/model_file, hf_config)--> Workload
//   Workload + Layout (workload/layout) --(workload/stage_plan)--> per-stage figures
//   per-stage figures --(sim/workload_costs)--> CostModel + resident memory --> passes, engine
//
// The formulas are the field's (reference model_and_memory.md): parameters as a Hugging Face
// model holds them (Megatron's formulas where its assumptions hold), forward FLOPs 2 x matmul
// parameters x tokens plus the attention core (Narayanan et al. 2021), kept activation bytes
// per Korthikanti et al. 2022 (Table 2), bytes per parameter per Megatron's
// theoretical_memory_usage.py. workload/architecture.cpp states each term.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "platform/device.hpp"
#include "platform/interconnect.hpp"
#include "platform/protocol.hpp"

namespace ppsched {

// What a layer is, which decides where a layout may put it: the embedding goes with the first
// stage, the final norm, the output head and the loss with the last one (Megatron's `E` and
// `L`); decoder, MTP and generic layers are the body a layout splits.
enum class LayerKind : uint8_t { Embedding, Decoder, Mtp, FinalNorm, Head, Loss, Generic };
const char* to_string(LayerKind k);
// Whether a layout places the layer (false: pinned to the first or last stage).
inline bool is_body(LayerKind k) { return k == LayerKind::Decoder || k == LayerKind::Mtp || k == LayerKind::Generic; }
inline bool pinned_first(LayerKind k) { return k == LayerKind::Embedding; }
inline bool pinned_last(LayerKind k) {
  return k == LayerKind::FinalNorm || k == LayerKind::Head || k == LayerKind::Loss;
}

// Training precision: bf16 and fp16 are mixed precision as Megatron runs it (16-bit weights and
// activations, fp32 main gradients and optimizer state); fp32 is everything in 32 bits.
enum class Precision : uint8_t { Bf16, Fp16, Fp32 };
enum class Optimizer : uint8_t { Adam, Sgd };  // Adam = Adam/AdamW (two moments); SGD with momentum
// Activation recomputation of a decoder layer (Korthikanti et al. 2022): none; selective (the
// attention core: its scores and softmax are recomputed in the backward); full (only the
// layer's input is kept and the whole forward is re-run in the backward).
enum class Recompute : uint8_t { None, Selective, Full };
// What the attention core (QK^T and the weighted sum of the values, forward and backward)
// computes under a causal mask: a causal FlashAttention kernel only the blocks on and below the
// diagonal, half of the s x s matrix (Megatron-LM's num_floating_point_operations halves it);
// eager attention the whole matrix, masked afterwards.
enum class AttentionCore : uint8_t { Causal, Full };
const char* to_string(Precision p);
const char* to_string(Optimizer o);
const char* to_string(Recompute r);
const char* to_string(AttentionCore c);

// One layer's figures for one micro-batch, on one tensor-parallel rank.
struct Layer {
  std::string name;                  // "embedding", "layers.3", "head", or the file's own name
  LayerKind kind = LayerKind::Generic;
  bool moe = false;                  // a mixture-of-experts decoder layer (for the table)
  int64_t params = 0;                // parameters
  double fwd_flops = 0;              // forward
  double bwd_input_flops = 0;        // input-gradient backward (recomputation included)
  double bwd_weight_flops = 0;       // weight-gradient backward
  int64_t activation_bytes = 0;      // kept from the forward to the backward
  int64_t weight_grad_bytes = 0;     // kept from the input-gradient to the weight-gradient backward
  int64_t workspace_bytes = 0;       // held only while the backward runs (recomputed activations)
  int64_t output_bytes = 0;          // handed to the next layer (a P2P message at a stage boundary)
  // An MoE layer's routed experts on this rank (Training::ep, etp): their parameters (part of
  // params), their FLOPs (part of the figures above: the expert phase between the dispatch and
  // the combine all-to-all; the rest of the layer is its attention phase) and the bytes one
  // all-to-all (the dispatch, and the combine alike, each way) sends to the other EP ranks per
  // micro-batch (workload/architecture.cpp states the formula).
  int64_t expert_params = 0;
  double expert_fwd_flops = 0, expert_bwd_input_flops = 0, expert_bwd_weight_flops = 0;
  int64_t a2a_bytes = 0;
  // Tables it uses that another layer owns and counts: the embedding's (a tied output head; an
  // MTP module, which embeds its own input tokens) and the untied output head's (an MTP module's
  // logits). A stage or rank that holds a user without the owner holds a copy of the table
  // (Megatron builds the embedding on every stage with the MTP module, and a tied head's stage
  // keeps its own copy of the embedding's weight); one holding both holds it once.
  int64_t uses_embedding_params = 0, uses_head_params = 0;
  // Tensor parallelism's collectives (Training::tp > 1), as Megatron-LM runs them with sequence
  // parallelism: each all-gathers or reduce-scatters a whole s x b x h activation of
  // tp_collective_bytes over the TP group, tp_fwd_collectives in the forward and
  // tp_bwd_collectives in the input-gradient backward (a full recomputation re-runs the
  // forward's). sim/workload_costs prices them over the link the group spans.
  int tp_fwd_collectives = 0, tp_bwd_collectives = 0;
  int64_t tp_collective_bytes = 0;
};

// Bytes per parameter of each resident part (Megatron's accounting: with bf16 mixed precision
// and Adam 2 + 4 + 12 = 18).
struct BytesPerParam {
  double weights = 2, grads = 4, optimizer = 12;
};

struct Training {
  // Sequence length: one for every micro-batch, or one per micro-batch (variable lengths).
  std::vector<int64_t> seq_lens{4096};
  int64_t micro_batch_size = 1;
  Precision precision = Precision::Bf16;
  Optimizer optimizer = Optimizer::Adam;
  bool distributed_optimizer = false;  // optimizer state sharded over the DP group (ZeRO-1)
  bool fsdp = false;                   // weights, gradients and optimizer state sharded (FSDP2)
  int dp = 1;                          // data-parallel degree the sharding divides by
  int tp = 1;                          // tensor-parallel degree: every figure is divided by it
  // Expert parallelism (Megatron-Core's --expert-model-parallel-size and
  // --expert-tensor-parallel-size): the routed experts of an MoE layer are split over ep ranks,
  // each expert over etp (0: as tp); ep x etp ranks tile the dp x tp ranks of a stage.
  int ep = 1, etp = 0;
  // Tokens an expert rank receives over the uniform share (Megatron's --moe-expert-capacity-factor
  // for token dropping; the busiest rank's imbalance for dropless routing): it scales the routed
  // experts' FLOPs, kept activations and all-to-all bytes. 1: uniform routing.
  double moe_capacity_factor = 1;
  // One mode for every decoder layer, or one per decoder (and MTP) layer, in order.
  std::vector<Recompute> recompute{Recompute::None};
  bool flash_attention = true;
  // Unset: causal with FlashAttention, full without (eager attention computes the whole matrix).
  std::optional<AttentionCore> attention_core;

  BytesPerParam bytes_per_param() const;
  AttentionCore core() const {
    return attention_core.value_or(flash_attention ? AttentionCore::Causal : AttentionCore::Full);
  }
  int activation_element_bytes() const { return precision == Precision::Fp32 ? 4 : 2; }
  int expert_tp() const { return etp > 0 ? etp : tp; }
  Recompute recompute_of(size_t decoder_index) const {
    return recompute.size() == 1 ? recompute[0] : recompute[std::min(decoder_index, recompute.size() - 1)];
  }
};

// The shape of a transformer as a Hugging Face config.json (or a model file's "architecture")
// describes it; workload/architecture.cpp turns it into layers.
struct Architecture {
  std::string model_type;            // "llama", "gpt2", "deepseek_v3", ...
  int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  bool gated_mlp = true;             // SwiGLU (3 matrices) or a plain 2-matrix MLP
  bool layer_norm = false;           // LayerNorm (weight + bias) instead of RMSNorm (weight)
  bool qkv_bias = false, attn_out_bias = false, mlp_bias = false;
  bool qk_norm = false;              // RMSNorm over head_dim on queries and keys (Qwen3)
  bool tied_embeddings = false;
  int64_t learned_positions = 0;     // GPT-2's wpe rows (0: rotary, no parameters)
  // Rotary positions: max_position_embeddings (0: not given), which rope_scaling may extend:
  // its rope_type ("" without rope_scaling), factor and original_max_position_embeddings (0: not
  // given). positions_key: the file and key of learned_positions or max_positions, for messages
  // ("gpt2.json (n_positions)").
  int64_t max_positions = 0;
  std::string rope_scaling;
  double rope_factor = 0;
  int64_t rope_original_positions = 0;
  std::string positions_key;
  double attention_dropout = 0, hidden_dropout = 0, embedding_dropout = 0;
  // Mixture of experts (experts == 0: dense).
  int64_t experts = 0, experts_per_token = 0, moe_ffn = 0, shared_ffn = 0;
  bool shared_expert_gate = false;   // Qwen2-MoE's sigmoid gate on the shared expert (h x 1)
  bool router_bias = false;          // DeepSeek-V3's e_score_correction_bias (one per expert)
  std::vector<bool> moe_layers;      // per decoder layer: an MoE layer
  // Multi-head latent attention (DeepSeek V2/V3; kv_lora_rank > 0).
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  int64_t mtp_layers = 0;            // DeepSeek-V3's multi-token prediction modules
};

struct Workload {
  std::string name;                  // as the file names it
  std::string source;                // the file it was read from ("" for the built-in default)
  std::optional<Architecture> arch;  // a transformer shape, or ...
  std::vector<Layer> explicit_layers;  // ... layers listed with their figures
  Training training;
  Device device;
  // The platform sections the file gives, each whole where given (sim/workload_costs puts them
  // over the cost model's defaults): links, the collectives' algorithm, the protocol, how much
  // two computes overlap, and a shape/dtype meta message's bytes ("bytes": {"meta"}).
  std::optional<Links> links;
  std::optional<CollectiveAlgorithm> collectives;
  std::optional<Protocol> protocol;
  std::optional<double> overlap_efficiency, meta_bytes;
  std::string default_layout;        // the file's "layout", if any

  // The layers' figures for a micro-batch of sequence length seq_len (the training's first one
  // by default). Throws InputError when a figure leaves the limits.
  std::vector<Layer> layers(int64_t seq_len) const;
  std::vector<Layer> layers() const { return layers(training.seq_lens.front()); }
  size_t layer_count() const;
  // The total parameters (the whole model, every TP shard together).
  int64_t total_params() const;
};

// Why `t`'s attention core cannot be ("" when it can): a causal core skipping the masked blocks
// needs FlashAttention (eager attention computes the whole score matrix).
std::string attention_core_problem(const Training& t);

// The longest of the training's sequence lengths against the positions the model has. A learned
// position table (GPT-2's wpe, n_positions rows) has no row past its end: a longer sequence
// cannot run, and this throws InputError naming `given_by` (what set the length: "--seq-len",
// "training.seq_len") and the config's key and value. Rotary positions (RoPE) run at any length:
// past max_position_embeddings the notes returned say whether the config's rope_scaling covers
// the length or that the model was not trained that long; the figures are priced all the same.
std::vector<std::string> check_positions(const Workload& net, const std::string& given_by);

// Why the expert parallelism of `t` cannot split a model of `experts` routed experts ("" when it
// can): ep must divide the experts, and ep x etp the dp x tp ranks of a stage (Megatron-Core's
// expert ranks tile the same ranks as the dense ones).
std::string expert_parallel_problem(const Training& t, int64_t experts);
// Why tensor parallelism t.tp cannot split a model's attention ("" when it can, or when the model
// gives no heads): Megatron-LM requires the attention heads, and with grouped-query attention
// the key/value heads (its num_query_groups), divisible by --tensor-model-parallel-size.
// Multi-head latent attention has no key/value groups: only the heads are split.
std::string tensor_parallel_problem(const Training& t, const Architecture* arch);

// Limits of a network description (README "Limits"): checked while reading, before anything
// is sized by them.
inline constexpr int64_t kMaxLayers = 65536;
inline constexpr int64_t kMaxDimension = int64_t{1} << 24;      // hidden, ffn, heads, head_dim, ranks
inline constexpr int64_t kMaxVocab = int64_t{1} << 28;
inline constexpr int64_t kMaxExperts = 65536;
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 24;
inline constexpr int64_t kMaxMicroBatchSize = int64_t{1} << 16;
inline constexpr double kMaxLayerParams = 1e15;                 // per layer
inline constexpr double kMaxLayerFlops = 1e24;                  // per layer and micro-batch
inline constexpr double kMaxLayerBytes = 1125899906842624.0;    // 2^50 B (1 PiB) per layer
inline constexpr double kMaxFlopsPerSecond = 1e21, kMinFlopsPerSecond = 1e3;

}  // namespace ppsched
