// Reading a network description: a "ppsched-model" file, or a Hugging Face config.json as the
// hub serves it (told apart by the "format" key). README "Model files" documents the format:
//
// {
//   "format": "ppsched-model", "version": 1,                                        (required)
//   "name": "llama3-8b",                                                            (optional)
//   "hf_config": "config.json" | { ...a config.json inline... }      a transformer, or ...
//   "layers": [ {"name", "kind", "count", "params", "fwd_flops", "bwd_flops",
//                "bwd_input_flops", "bwd_weight_flops", "activation_bytes", "output_bytes",
//                "weight_grad_bytes", "workspace_bytes"} ]            ... its layers listed
//   "training": {"seq_len": 4096 | [per micro-batch], "micro_batch_size": 1,
//                "precision": "bf16" | "fp16" | "fp32", "optimizer": "adam" | "adamw" | "sgd",
//                "distributed_optimizer": false, "fsdp": false, "dp": 1, "tp": 1,
//                "recompute": "none" | "selective" | "full" | [per decoder layer],
//                "flash_attention": true, "attention_core": "causal" | "full" (default: causal
//                with FlashAttention, full without)},
//   "device": {"flops_per_s": 989e12, "mfu": 0.45 (1 for listed layers), "memory_bytes": the device's
//              (81,559 MiB, an H100 80 GB by NVML), "memory_reserve_bytes": 4 GiB (plans are held
//              to memory_bytes less it),
//              what calibrate --model fits: "fitted": {"FWD": {"flops_per_s", "overhead_ms"}, ...},
//              "split_backward": {"first_stage", "other_stages": {"input", "weight"}},
//              "rank_time_factors": [{"FWD", "BWD_INPUT", "BWD_WEIGHT"} per rank]},
//   "link", "collectives", "protocol", "overlap_efficiency": as in a cost file,
//   "layout": "8,8,8,8" | "Et*8|t*8|t*8|t*8L"
// }
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "workload/workload.hpp"

namespace ppsched {

// Throws InputError with the file and the JSON path of what is wrong.
Workload read_model(std::string_view text, const std::string& file);
Workload read_model_file(const std::string& path);

// A ppsched-model file for `net` as `path` describes it, with net's training settings and device
// (fitted rates included): the file's own keys kept, a Hugging Face config.json (given as the
// file or by path) carried inline. What `ppsched calibrate --model --model-out` writes; it reads
// back as `net`.
std::string write_model_file(const std::string& path, const Workload& net);

// A ppsched-model file for a network that lists its layers (no source file: ppsched-exec's
// built-in models), each layer with all its figures, and the sections write_model_file writes.
// It reads back as `net`.
std::string write_model(const Workload& net, const std::string& comment = "");
// One layer as a model file lists it, every figure given (what `ppsched model --json` shows too).
nlohmann::json layer_json(const Layer& l);

// The embedded default: a 7B-class transformer (hidden 4096, 32 layers of 12 h^2 parameters,
// sequence 4096, micro-batch 1, bf16, FlashAttention) on H100-class GPUs; its layers are listed
// (workload/default_workload.cpp states each figure), without embedding and head.
Workload default_workload();

// The maximal size of a model file (it is read into a document).
inline constexpr uint64_t kMaxModelFileBytes = uint64_t{64} << 20;

}  // namespace ppsched
