#!/usr/bin/env python3
"""Runs Megatron-LM's own activation estimators, compute_activation_memory (sequence parallel,
selective recomputation) and compute_activation_memory_without_sp, on a few models and parallel
layouts.

    python3 run_activations.py MEGATRON_REPOSITORY > activations.json    (a clone, or a bare git directory)

Both functions are taken unmodified from megatron/training/theoretical_memory_usage.py (their
source is compiled alone, out of the module, so neither torch nor the rest of Megatron is
imported; they call nothing but `math` and, with verbose off, print nothing). `args` is a plain
namespace with the fields they read, set from each model's config.json: ffn_hidden_size is the
config's intermediate_size (the dense MLP's width, also for an MoE model: Megatron's activation
formula has no MoE term), padded_vocab_size the vocabulary itself (no padding).

Megatron's report_theoretical_memory calls compute_activation_memory when sequence parallelism
and selective recomputation are both on, else compute_activation_memory_without_sp; Megatron's
argument checks turn sequence parallelism off at TP = 1, so at TP = 1 the second is the one it
prints. Each case records both. The figure is bytes on one rank of the first pipeline stage, as
Megatron writes it: the embedding and the first stage's share of the layers with P micro-batches
in flight (min(1, M / P) of that for a non-interleaved schedule with M < P; the factor
1 + (P - 1) / (P V) for an interleaved one), the output layer only at PP = 1.
"""
import json
import math
import sys
import types

from megatron_source import megatron_function

repo = sys.argv[1]
PATH = "megatron/training/theoretical_memory_usage.py"
with_sp, commit = megatron_function(repo, PATH, "compute_activation_memory", {"math": math})
without_sp, _ = megatron_function(repo, PATH, "compute_activation_memory_without_sp", {"math": math})


def args_for(config, pp, tp, vpp, seq, mbs):
    h = config.get("hidden_size", config.get("n_embd"))
    return types.SimpleNamespace(
        seq_length=seq, micro_batch_size=mbs, hidden_size=h,
        ffn_hidden_size=config.get("intermediate_size", config.get("n_inner") or 4 * h),
        num_layers=config.get("num_hidden_layers", config.get("n_layer")), padded_vocab_size=config["vocab_size"],
        pipeline_model_parallel_size=pp, tensor_model_parallel_size=tp, virtual_pipeline_model_parallel_size=vpp)


# (model, seq_length, micro_batch_size, [(PP, TP, VPP, num_microbatches)]). Every PP (x VPP)
# divides the model's layers, as Megatron's even split needs.
GRID = [(pp, tp, None, 8) for pp in (1, 2, 4, 8) for tp in (1, 2, 4, 8)]
FEWER_MICROS = [(4, 1, None, 2), (8, 2, None, 4), (8, 8, None, 1)]           # M < P: min(1, M / P)
INTERLEAVED = [(2, 1, 2, 8), (2, 2, 4, 8), (4, 1, 2, 8), (4, 2, 4, 32), (4, 8, 2, 32), (2, 4, 8, 8)]
CASES = [
    ("llama3_8b", 4096, 1, GRID + FEWER_MICROS + INTERLEAVED),
    ("llama3_8b", 8192, 2, [(4, 2, None, 8), (2, 8, None, 8), (4, 4, 2, 8)]),
    ("llama3_8b", 2048, 4, [(1, 1, None, 8), (8, 4, None, 8), (2, 2, 2, 8)]),
    ("qwen3_8b", 4096, 1, [(pp, tp, None, 8) for pp in (1, 2, 4) for tp in (1, 2, 4, 8)] + [(2, 2, 2, 8)]),
    ("mistral_7b_v0.1", 4096, 1, [(pp, tp, None, 8) for pp in (1, 2, 4, 8) for tp in (1, 8)] + [(4, 4, 2, 8)]),
    ("llama3_70b", 4096, 1, [(pp, tp, None, 16) for pp in (1, 4, 8) for tp in (4, 8)] + [(4, 8, 4, 32)]),
    ("qwen2.5_7b", 4096, 1, [(pp, tp, None, 8) for pp in (1, 2, 4) for tp in (1, 2, 4)] + [(2, 2, 2, 8)]),
    ("gpt2", 1024, 8, [(pp, tp, None, 8) for pp in (1, 2, 4) for tp in (1, 2, 4)] + [(2, 1, 2, 8), (4, 2, 3, 8)]),
    ("qwen3_30b_a3b", 4096, 1, [(pp, tp, None, 8) for pp in (1, 2, 4, 8) for tp in (1, 4)] + [(4, 2, 4, 8)]),
]

cases = []
for name, seq, mbs, layouts in CASES:
    config = json.load(open(sys.path[0] + "/../../models/hf/" + name + ".json"))
    for pp, tp, vpp, micro in layouts:
        args = args_for(config, pp, tp, vpp, seq, mbs)
        cases.append({"model": name + ".json", "seq_length": seq, "micro_batch_size": mbs, "pp": pp, "tp": tp,
                      "vpp": vpp, "num_microbatches": micro,
                      "compute_activation_memory": with_sp(args, micro),
                      "compute_activation_memory_without_sp": without_sp(args, micro)})
json.dump({"source": "NVIDIA/Megatron-LM " + PATH + " compute_activation_memory, compute_activation_memory_without_sp",
           "commit": commit, "cases": cases}, sys.stdout, indent=1)
print()
