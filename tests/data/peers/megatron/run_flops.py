#!/usr/bin/env python3
"""Runs Megatron-LM's own FLOPs formula, num_floating_point_operations, on a few models.

    python3 run_flops.py MEGATRON_REPOSITORY > flops.json    (a clone, or a bare git directory)

The function is taken unmodified from megatron/training/training.py (its source is compiled
alone, out of the module, so neither torch nor the rest of Megatron is imported); the helpers it
calls for model kinds ppsched does not price (hybrid and linear-attention models) are stubbed to
answer "no". `args` is a plain namespace with the fields it reads, set from each model's
config.json as Megatron's HF converters would (padded_vocab_size: the vocabulary itself, so
that no padding differs from ppsched's). The output is Megatron's FLOPs for one global batch:
forward, weight-gradient and input-gradient GEMMs together (3x forward), causal attention
halved.
"""
import json
import sys
import types

from megatron_source import megatron_function

repo = sys.argv[1]
PATH = "megatron/training/training.py"
flops, commit = megatron_function(repo, PATH, "num_floating_point_operations", {
    "is_hybrid_model": lambda args: False,
    "is_linear_attention_variant": lambda variant: False,
    "is_gated_delta_net_variant": lambda variant: False,
})


def args_for(config, seq_length):
    h = config.get("hidden_size", config.get("n_embd"))
    heads = config.get("num_attention_heads", config.get("n_head"))
    kv = config.get("num_key_value_heads", heads)
    return types.SimpleNamespace(
        hidden_size=h, num_layers=config.get("num_hidden_layers", config.get("n_layer")),
        num_attention_heads=heads, group_query_attention=kv != heads, num_query_groups=kv,
        kv_channels=config.get("head_dim", h // heads),
        ffn_hidden_size=config.get("intermediate_size", config.get("n_inner") or 4 * h),
        swiglu=config.get("model_type") != "gpt2", padded_vocab_size=config["vocab_size"], seq_length=seq_length,
        num_experts=None, mtp_num_layers=None, moe_ffn_hidden_size=None, moe_latent_size=None,
        moe_shared_expert_intermediate_size=None, multi_latent_attention=False, attention_output_gate=False,
        experimental_attention_variant=None)


cases = []
for name, seq, batch in [("llama3_8b", 4096, 1), ("llama3_8b", 8192, 2), ("qwen3_8b", 4096, 1), ("gpt2", 1024, 8)]:
    config = json.load(open(sys.path[0] + "/../../models/hf/" + name + ".json"))
    cases.append({"model": name + ".json", "seq_length": seq, "batch_size": batch,
                  "flops": flops(args_for(config, seq), batch)})
json.dump({"source": "NVIDIA/Megatron-LM " + PATH + " num_floating_point_operations", "commit": commit,
           "cases": cases}, sys.stdout, indent=1)
print()
