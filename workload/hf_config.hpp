// A Hugging Face config.json, as the hub serves it, read into an Architecture: which keys set
// which dimension depends on "model_type" (the transformers class the config belongs to).
// Priced: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gpt2, deepseek_v2,
// deepseek_v3. Any other model_type is a located error naming the key; a key the architecture
// needs that is missing or of the wrong type is one too. Keys that do not change the
// parameters, FLOPs or activations (rope settings, token ids, ...) are left alone.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "workload/workload.hpp"

namespace ppsched {

// `prefix` is the JSON path of the config inside its file ("" for a config.json itself,
// "hf_config" inside a model file), for the messages.
Architecture read_hf_config(const nlohmann::json& config, const std::string& file, const std::string& prefix = "");

// Whether a document is a Hugging Face config (it has "model_type" or "architectures" and no
// "format" key).
bool is_hf_config(const nlohmann::json& doc);

// The model_types read_hf_config prices, for messages.
const char* hf_model_types();

}  // namespace ppsched
