#!/usr/bin/env python3
"""ppsched's per-rank weights, gradients and optimizer state against Megatron-LM's own estimator.

tests/data/peers/megatron/memory.json holds what Megatron-LM's compute_weight_and_optimizer_memory
(run unmodified by run_memory.py; repository and commit in the file) puts on its most loaded
shard -- pipeline stage 0 of an even split, with the embedding -- for dense models at several
PP x TP (x DP with the distributed optimizer). `ppsched model` must give stage 0 the same bytes,
but for the differences by design, each derived here by hand from the model's config and named:

- Megatron spreads the final norm over the stages (block / PP); ppsched puts it on the last
  stage, so at PP > 1 stage 0 holds h fewer parameters' share: h / PP (RMSNorm) or 2h / PP;
- Megatron's formula has no QK-norm: Qwen3's q_norm and k_norm (head_dim each, a layer) are in
  ppsched's layers, whole on every TP rank;
- a TP that does not divide the attention heads (or the key/value heads) is refused, as
  Megatron-LM's argument checks refuse it before the estimator runs (GPT-2's 12 heads at TP 8);
- Megatron's formula has no linear biases and no learned positions: GPT-2's QKV and MLP-up
  biases (3h + 4h a layer, split over TP), its two row-parallel biases (h + h a layer, whole on
  every TP rank) and its position table (n_positions x h on stage 0, whole on every TP rank) are
  in ppsched's.

    megatron_memory_cli.py PPSCHED DATA_DIR
"""
import json
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402


def main():
    exe, data = sys.argv[1], sys.argv[2]
    peer = json.load(open(os.path.join(data, "peers", "megatron", "memory.json")))
    cli = Cli(exe)
    rows = []
    for case in peer["cases"]:
        name, pp, tp, dp, dist = case["model"], case["pp"], case["tp"], case["dp"], case["distributed_optimizer"]
        path = os.path.join(data, "models", "hf", name)
        config = json.load(open(path))
        layers = config.get("num_hidden_layers", config.get("n_layer"))
        h = config.get("hidden_size", config.get("n_embd"))
        args = ["model", path, "--pp", str(pp), "--tp", str(tp), "--layout", ",".join([str(layers // pp)] * pp)]
        if dist:
            args += ["--dp", str(dp), "--distributed-optimizer"]
        heads = config.get("num_attention_heads", config.get("n_head"))
        groups = config.get("num_key_value_heads", heads)
        if heads % tp or groups % tp:
            # Megatron-LM's argument checks refuse this TP before its estimator runs (the estimator
            # alone does not check): ppsched refuses it too, naming the heads.
            cli.refused(args, "--tp %d" % tp, "does not divide the")
            rows.append((name, pp, tp, dp if dist else None, case["bytes"], 0, 0, "refused: TP does not divide the heads"))
            continue
        model = cli.json(*args)
        if not model:
            continue
        stage0 = model["stages"][0]
        got = stage0["resident_bytes"]
        # The differences by design, in parameters (split: divided over TP; whole: on every TP rank).
        gpt2 = config.get("model_type") == "gpt2"
        norm = 2 if gpt2 else 1
        on_stage0 = layers // pp
        whole = -(norm * h / pp if pp > 1 else 0)  # the final norm's share Megatron puts on stage 0
        split = 0.0
        reasons = []
        if pp > 1:
            reasons.append(f"final norm on the last stage ({-whole:g} params fewer)")
        if config.get("model_type") == "qwen3":
            qk = 2 * config["head_dim"] * on_stage0
            whole += qk
            reasons.append(f"QK-norm (+{qk})")
        if gpt2:
            split += 7 * h * on_stage0
            whole += 2 * h * on_stage0 + config["n_positions"] * h
            reasons.append(f"biases and positions (+{7 * h * on_stage0}/TP +{2 * h * on_stage0 + config['n_positions'] * h})")
        bytes_per_param = 6 + 12 / dp if dist else 18
        expected = case["bytes"] + (split / tp + whole) * bytes_per_param
        diff = got - case["bytes"]
        rows.append((name, pp, tp, dp if dist else None, case["bytes"], got, diff, "; ".join(reasons) or "-"))
        # ppsched rounds an optimizer shard up to whole bytes; Megatron's figures are real numbers.
        cli.check(abs(got - expected) <= 16,
                  f"{name} PP {pp} TP {tp}{f' DP {dp} distributed optimizer' if dist else ''}: ppsched "
                  f"{got} bytes, Megatron {case['bytes']:.0f} + the differences by design = {expected:.0f}")
    print(f"{'model':<22} {'PP':>2} {'TP':>2} {'DP':>3} {'Megatron GiB':>13} {'ppsched GiB':>12} {'diff %':>9}  why")
    for name, pp, tp, dp, meg, got, diff, why in rows:
        print(f"{name:<22} {pp:>2} {tp:>2} {dp or '-':>3} {meg / 2**30:>13.4f} {got / 2**30:>12.4f} "
              f"{100 * diff / meg:>+9.4f}  {why}")
    print(f"{len(rows) - len(cli.failures)} passed, {len(cli.failures)} failed")
    cli.finish("megatron_memory_cli")


if __name__ == "__main__":
    main()
