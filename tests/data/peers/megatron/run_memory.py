#!/usr/bin/env python3
"""Runs Megatron-LM's own weight-and-optimizer estimator, compute_weight_and_optimizer_memory,
on a few models and parallel layouts.

    python3 run_memory.py MEGATRON_REPOSITORY > memory.json    (a clone, or a bare git directory)

The function is taken unmodified from megatron/training/theoretical_memory_usage.py (its source
is compiled alone, out of the module, so neither torch nor the rest of Megatron is imported);
`print_rank_0` is stubbed to print nothing and `is_hybrid_model` to answer "no". `args` is a
plain namespace with the fields it reads, set from each model's config.json as Megatron's HF
converters would (padded_vocab_size: the vocabulary itself, so that no padding differs from
ppsched's). The output is the bytes Megatron puts on its most loaded shard (pipeline stage 0 of
an even split, with the embedding; at PP = 1 also an untied output layer): 18 bytes a
parameter (bf16 weight, fp32 main gradient, fp32 master copy and two Adam moments), or 6 + 12 /
DP with the distributed optimizer. Dense models only: the MoE cases need expert parallelism.
"""
import json
import math
import sys
import types

from megatron_source import megatron_function

repo = sys.argv[1]
PATH = "megatron/training/theoretical_memory_usage.py"
estimate, commit = megatron_function(repo, PATH, "compute_weight_and_optimizer_memory", {
    "is_hybrid_model": lambda args: False,
    "print_rank_0": lambda *a, **k: None,
    "math": math,
})


def args_for(config, pp, tp, dp, distributed_optimizer):
    h = config.get("hidden_size", config.get("n_embd"))
    heads = config.get("num_attention_heads", config.get("n_head"))
    kv = config.get("num_key_value_heads", heads)
    gpt2 = config.get("model_type") == "gpt2"
    return types.SimpleNamespace(
        hidden_size=h, num_layers=config.get("num_hidden_layers", config.get("n_layer")),
        num_attention_heads=heads, group_query_attention=kv != heads, num_query_groups=kv,
        kv_channels=config.get("head_dim", h // heads),
        ffn_hidden_size=config.get("intermediate_size", config.get("n_inner") or 4 * h),
        swiglu=not gpt2, normalization="LayerNorm" if gpt2 else "RMSNorm",
        untie_embeddings_and_output_weights=not config.get("tie_word_embeddings", gpt2),
        padded_vocab_size=config["vocab_size"], num_experts=None, mtp_num_layers=None, moe_ffn_hidden_size=None,
        moe_latent_size=None, moe_shared_expert_intermediate_size=None, multi_latent_attention=False,
        add_bias_linear=gpt2, moe_router_topk=None,
        pipeline_model_parallel_size=pp, tensor_model_parallel_size=tp, data_parallel_size=dp,
        expert_tensor_parallel_size=1, expert_model_parallel_size=1, world_size=pp * tp * dp,
        use_distributed_optimizer=distributed_optimizer)


cases = []
for name in ("llama3_8b", "qwen3_8b", "mistral_7b_v0.1", "gpt2"):
    config = json.load(open(sys.path[0] + "/../../models/hf/" + name + ".json"))
    for pp, tp, dp, dist in ((1, 1, 1, False), (2, 1, 1, False), (4, 1, 1, False), (4, 2, 1, False), (2, 4, 1, False),
                             (1, 8, 1, False), (4, 1, 8, True), (2, 2, 4, True)):
        cases.append({"model": name + ".json", "pp": pp, "tp": tp, "dp": dp, "distributed_optimizer": dist,
                      "bytes": estimate(args_for(config, pp, tp, dp, dist))})
json.dump({"source": "NVIDIA/Megatron-LM " + PATH + " compute_weight_and_optimizer_memory", "commit": commit,
           "cases": cases}, sys.stdout, indent=1)
print()
