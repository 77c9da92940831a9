#include "workload/hf_config.hpp"

#include <algorithm>
#include <string_view>

#include "schedule/formats/json_fields.hpp"

namespace ppsched {
namespace {

// How each model_type spells and defaults its keys (the transformers configuration classes:
// LlamaConfig, Qwen2Config, GPT2Config, DeepseekV3Config, ...) and what its modules hold.
enum class Family { Llama, Mistral, Mixtral, Qwen2, Qwen2Moe, Qwen3, Qwen3Moe, Gpt2, DeepseekV2, DeepseekV3 };
struct Type {
  std::string_view name;
  Family family;
};
constexpr Type kTypes[] = {{"llama", Family::Llama},         {"mistral", Family::Mistral},
                           {"mixtral", Family::Mixtral},     {"qwen2", Family::Qwen2},
                           {"qwen2_moe", Family::Qwen2Moe},  {"qwen3", Family::Qwen3},
                           {"qwen3_moe", Family::Qwen3Moe},  {"gpt2", Family::Gpt2},
                           {"deepseek_v2", Family::DeepseekV2}, {"deepseek_v3", Family::DeepseekV3}};

// Positions a config may state (beyond any sequence ppsched prices: kMaxSeqLen is 2^24).
constexpr int64_t kMaxPositions = int64_t{1} << 40;

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& c, const std::string& file, const std::string& prefix)
      : c_(c), f_(file), prefix_(prefix) {}

  std::string path(std::string_view key) const { return prefix_.empty() ? std::string(key) : prefix_ + "." + std::string(key); }
  // "config.json (n_positions)": where a key is, for a message made later.
  std::string located(std::string_view key) const { return f_.file() + " (" + path(key) + ")"; }
  bool has(std::string_view key) const { return c_.contains(std::string(key)) && !c_[std::string(key)].is_null(); }

  int64_t dim(std::string_view key, int64_t limit = kMaxDimension) const {
    if (!has(key)) f_.fail(path(key), "missing key '" + std::string(key) + "': the " + model_type_ + " architecture needs it");
    return f_.whole(c_[std::string(key)], path(key), 1, limit, "a whole number from 1 to " + std::to_string(limit));
  }
  int64_t dim_or(std::string_view key, int64_t fallback, int64_t lo = 1, int64_t limit = kMaxDimension) const {
    if (!has(key)) return fallback;
    return f_.whole(c_[std::string(key)], path(key), lo, limit,
                    "a whole number from " + std::to_string(lo) + " to " + std::to_string(limit));
  }
  bool flag_or(std::string_view key, bool fallback) const {
    if (!has(key)) return fallback;
    return f_.boolean(c_[std::string(key)], path(key));
  }
  double prob_or(std::string_view key, double fallback) const {
    if (!has(key)) return fallback;
    return f_.number(c_[std::string(key)], path(key), 0, 1, "a dropout probability from 0 to 1");
  }

  Architecture read() {
    if (!c_.is_object()) f_.fail(prefix_, "expected a Hugging Face config object, got " + JsonFields::type_of(c_));
    if (!has("model_type"))
      f_.fail(path("model_type"), std::string("missing key 'model_type': ppsched prices the model types ") + hf_model_types());
    model_type_ = f_.text(c_["model_type"], path("model_type"), "a model type string");
    const Type* type = nullptr;
    for (const auto& t : kTypes)
      if (t.name == model_type_) type = &t;
    if (!type)
      f_.fail(path("model_type"), "model type \"" + clip(model_type_, 60) + "\" cannot be priced: ppsched knows " +
                                      hf_model_types() +
                                      "; for another architecture list its layers in a ppsched-model file (\"layers\")");
    Architecture a;
    a.model_type = model_type_;
    if (type->family == Family::Gpt2) return gpt2(a);
    a.hidden = dim("hidden_size");
    a.layers = dim("num_hidden_layers", kMaxLayers - 8);
    a.heads = dim("num_attention_heads");
    a.kv_heads = dim_or("num_key_value_heads", a.heads);
    a.head_dim = dim_or("head_dim", 0, 1);
    a.vocab = dim("vocab_size", kMaxVocab);
    a.tied_embeddings = flag_or("tie_word_embeddings", false);
    a.attention_dropout = prob_or("attention_dropout", 0);
    a.gated_mlp = true;
    rope_positions(a);
    if (a.head_dim == 0 && a.hidden % a.heads != 0)
      f_.fail(path("num_attention_heads"), "hidden_size " + std::to_string(a.hidden) + " is not a multiple of " +
                                               std::to_string(a.heads) + " heads: give head_dim");
    if (a.heads % a.kv_heads != 0)
      f_.fail(path("num_key_value_heads"), std::to_string(a.kv_heads) + " key/value heads do not divide " +
                                               std::to_string(a.heads) + " attention heads");
    switch (type->family) {
      case Family::Llama:
        a.ffn = dim("intermediate_size");
        a.qkv_bias = a.attn_out_bias = flag_or("attention_bias", false);
        a.mlp_bias = flag_or("mlp_bias", false);
        break;
      case Family::Mistral:
        a.ffn = dim("intermediate_size");
        break;
      case Family::Mixtral:
        a.ffn = dim("intermediate_size");
        moe(a, "num_local_experts", "intermediate_size");
        std::fill(a.moe_layers.begin(), a.moe_layers.end(), true);
        break;
      case Family::Qwen2:
        a.ffn = dim("intermediate_size");
        a.qkv_bias = true;  // Qwen2Attention: q, k and v projections with bias, o_proj without
        break;
      case Family::Qwen3:
        a.ffn = dim("intermediate_size");
        a.qkv_bias = a.attn_out_bias = flag_or("attention_bias", false);
        a.qk_norm = true;  // q_norm and k_norm, RMSNorm over head_dim
        break;
      case Family::Qwen2Moe:
      case Family::Qwen3Moe: {
        a.ffn = dim_or("intermediate_size", 0, 0);
        moe(a, "num_experts", "moe_intermediate_size");
        if (type->family == Family::Qwen2Moe) {
          a.qkv_bias = true;
          a.shared_ffn = dim_or("shared_expert_intermediate_size", 0, 0);
          a.shared_expert_gate = a.shared_ffn > 0;
        } else {
          a.qkv_bias = a.attn_out_bias = flag_or("attention_bias", false);
          a.qk_norm = true;
        }
        // Qwen2MoeDecoderLayer: layer i is sparse unless listed in mlp_only_layers, when
        // (i + 1) % decoder_sparse_step == 0.
        const int64_t step = dim_or("decoder_sparse_step", 1);
        std::vector<bool> dense_only(static_cast<size_t>(a.layers), false);
        if (has("mlp_only_layers")) {
          const auto& list = c_["mlp_only_layers"];
          if (!list.is_array()) f_.fail(path("mlp_only_layers"), "expected an array of layer indices, got " + JsonFields::type_of(list));
          for (size_t k = 0; k < list.size(); ++k) {
            const int64_t i = f_.whole(list[k], path("mlp_only_layers") + "[" + std::to_string(k) + "]", 0, a.layers - 1,
                                       "a layer index from 0 to " + std::to_string(a.layers - 1));
            dense_only[static_cast<size_t>(i)] = true;
          }
        }
        for (int64_t i = 0; i < a.layers; ++i)
          a.moe_layers[static_cast<size_t>(i)] = !dense_only[static_cast<size_t>(i)] && (i + 1) % step == 0;
        if (a.ffn == 0 && std::count(a.moe_layers.begin(), a.moe_layers.end(), false) > 0)
          f_.fail(path("intermediate_size"), "missing key 'intermediate_size': the dense layers need it");
        break;
      }
      case Family::DeepseekV2:
      case Family::DeepseekV3: {
        a.ffn = dim("intermediate_size");
        moe(a, "n_routed_experts", "moe_intermediate_size");
        a.shared_ffn = dim_or("n_shared_experts", 0, 0) * a.moe_ffn;
        a.router_bias = type->family == Family::DeepseekV3 && (!has("topk_method") || c_["topk_method"] == "noaux_tc");
        // DeepseekV3DecoderLayer: MoE from layer first_k_dense_replace on, every moe_layer_freq-th.
        const int64_t first_dense = dim_or("first_k_dense_replace", 0, 0, a.layers);
        const int64_t freq = dim_or("moe_layer_freq", 1);
        for (int64_t i = 0; i < a.layers; ++i) a.moe_layers[static_cast<size_t>(i)] = i >= first_dense && i % freq == 0;
        a.q_lora_rank = dim_or("q_lora_rank", 0, 0);
        a.kv_lora_rank = dim("kv_lora_rank");
        a.qk_nope_head_dim = dim("qk_nope_head_dim");
        a.qk_rope_head_dim = dim("qk_rope_head_dim");
        a.v_head_dim = dim("v_head_dim");
        a.qkv_bias = a.attn_out_bias = flag_or("attention_bias", false);
        if (type->family == Family::DeepseekV3) a.mtp_layers = dim_or("num_nextn_predict_layers", 0, 0, 64);
        break;
      }
      case Family::Gpt2: break;
    }
    return a;
  }

 private:
  // RoPE: max_position_embeddings and rope_scaling (null, or an object with rope_type or type,
  // factor, original_max_position_embeddings; its other keys shape the frequencies, not the
  // figures).
  void rope_positions(Architecture& a) const {
    a.max_positions = dim_or("max_position_embeddings", 0, 1, kMaxPositions);
    a.positions_key = located("max_position_embeddings");
    if (!has("rope_scaling")) return;
    const nlohmann::json& r = c_["rope_scaling"];
    const std::string where = path("rope_scaling");
    if (!r.is_object()) f_.fail(where, "expected an object or null, got " + JsonFields::type_of(r));
    a.rope_scaling = "unnamed";
    for (const char* key : {"rope_type", "type"})
      if (r.contains(key) && !r[key].is_null()) a.rope_scaling = clip(f_.text(r[key], where + "." + key, "a RoPE scaling type"), 40);
    if (r.contains("factor") && !r["factor"].is_null())
      a.rope_factor = f_.number(r["factor"], where + ".factor", 0, 1e6, "a scaling factor from 0 to 1e6");
    if (r.contains("original_max_position_embeddings") && !r["original_max_position_embeddings"].is_null())
      a.rope_original_positions = f_.whole(r["original_max_position_embeddings"], where + ".original_max_position_embeddings", 1,
                                           kMaxPositions, "a whole number from 1 to " + std::to_string(kMaxPositions));
  }

  void moe(Architecture& a, std::string_view experts_key, std::string_view ffn_key) const {
    a.experts = dim(experts_key, kMaxExperts);
    a.experts_per_token = dim("num_experts_per_tok", a.experts);
    a.moe_ffn = dim(ffn_key);
    a.moe_layers.assign(static_cast<size_t>(a.layers), true);
  }

  // GPT2Config: n_embd, n_layer, n_head, n_inner (default 4 n_embd), n_positions, vocab_size;
  // Conv1D projections with biases, LayerNorm, a plain GELU MLP, learned positions, tied head,
  // dropout attn_pdrop / resid_pdrop / embd_pdrop (default 0.1 each).
  Architecture gpt2(Architecture a) const {
    a.hidden = dim("n_embd");
    a.layers = dim("n_layer", kMaxLayers - 8);
    a.heads = dim("n_head");
    a.kv_heads = a.heads;
    if (a.hidden % a.heads != 0)
      f_.fail(path("n_head"), "n_embd " + std::to_string(a.hidden) + " is not a multiple of " + std::to_string(a.heads) + " heads");
    a.ffn = dim_or("n_inner", 4 * a.hidden);
    a.vocab = dim("vocab_size", kMaxVocab);
    a.learned_positions = dim("n_positions");
    a.positions_key = located("n_positions");
    a.tied_embeddings = flag_or("tie_word_embeddings", true);
    a.gated_mlp = false;
    a.layer_norm = true;
    a.qkv_bias = a.attn_out_bias = a.mlp_bias = true;
    a.attention_dropout = prob_or("attn_pdrop", 0.1);
    a.hidden_dropout = prob_or("resid_pdrop", 0.1);
    a.embedding_dropout = prob_or("embd_pdrop", 0.1);
    return a;
  }

  const nlohmann::json& c_;
  JsonFields f_;
  std::string prefix_;
  std::string model_type_;
};

}  // namespace

const char* hf_model_types() {
  return "llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gpt2, deepseek_v2, deepseek_v3";
}

bool is_hf_config(const nlohmann::json& doc) {
  return doc.is_object() && !doc.contains("format") && (doc.contains("model_type") || doc.contains("architectures"));
}

Architecture read_hf_config(const nlohmann::json& config, const std::string& file, const std::string& prefix) {
  return ConfigReader(config, file, prefix).read();
}

}  // namespace ppsched
