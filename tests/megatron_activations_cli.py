#!/usr/bin/env python3
"""ppsched's activation peak on the first pipeline rank against Megatron-LM's own estimators.

tests/data/peers/megatron/activations.json holds what Megatron-LM's compute_activation_memory
(sequence parallelism + selective recomputation) and compute_activation_memory_without_sp (run
unmodified by run_activations.py; repository and commit in the file) give for a model, sequence
length s, micro-batch size b, PP = P, TP = t, VPP = V and M micro-batches. Megatron's figure is
one rank of the first pipeline stage at its peak, and reads (T = s b tokens, h hidden, f the
config's intermediate_size, V_ the vocabulary, L layers):

  with SP:    [ L T (18 h + 4 f) + P (8 T + T h) ] x factor / t   (+ (4 T h + 4 T V_) / t at P = 1)
  without SP: [ L T h (10 + 24 / t) + P (8 T + T h) ] x factor     (+ 2 T V_ / t + 2 T h at P = 1),
              all x 1.05

with factor min(1, M / P) for 1F1B (1 at P = 1) and 1 + (P - 1) / (P V) for an interleaved
schedule: L x factor is the layer-micro-batches the first rank holds (its L / P layers times
min(M, P) micro-batches; interleaved, P V + P - 1 chunks of L / (P V) layers, as Megatron's
schedule runs: 2 (P - 1) + (V - 1) P warm-up forwards and one more before the first backward),
P x factor the embeddings. Megatron's report prints the first at TP > 1 and the second at
TP = 1 (its argument checks turn sequence parallelism off there).

ppsched models one tensor-parallel setting, Megatron's with sequence parallelism (every figure
/ t), and counts what autograd keeps per tensor (workload/architecture.cpp). Its peak, from
`ppsched simulate --model` on rank 0 (memory.per_rank[0].activations_peak_bytes) and from
`ppsched model`'s stage figures (activation_bytes_per_micro) times the micro-batches in flight,
must equal Megatron's figure plus the differences by design, each derived here from the config
(d = head_dim, a query heads, g key/value heads; per decoder layer and micro-batch, before / t):

- GQA and the query size: Megatron keeps Q, K, V as 3 x 2 T h; ppsched 2 T (a + 2 g) d (its
  TODO: "query_projection_size potentially being different from hidden_size"): 2 T (a + 2 g) d - 6 T h;
- the attention output projection's input is a d wide, not h: 2 T a d - 2 T h;
- dropout masks: Megatron keeps two 1-byte residual masks (2 T h) whatever the model; ppsched
  only where the config has hidden dropout (GPT-2's resid_pdrop): -2 T h for the others;
- a gated MLP (SwiGLU): Megatron's 4 f (the activation's input and output, GPT's GeLU MLP)
  against what Megatron's fused SwiGLU keeps, [gate; up] and the product, 6 f: +2 T f;
- MoE (Megatron's formula has no MoE term; it prices the dense intermediate_size): ppsched's
  router probabilities in fp32 4 T E, per routed copy (T k) the expert's input, its MLP 3 f_moe
  and its output (2 (2 h + 3 f_moe)), the shared experts' MLP 6 T f_shared, against 4 T f:
  4 T E + 2 T k (2 h + 3 f_moe) + 6 T f_shared - 4 T f;
- embedding dropout: Megatron keeps its 1-byte mask T h; ppsched only where the config has
  embedding dropout (GPT-2's embd_pdrop): -T h a micro-batch for the others;
- the output layer (P = 1 only): with SP the same, 4 T h + 4 T V_ (the final norm's input and
  the head's input 2 T h each, the loss's fp32 softmax 4 T V_);
- interleaved: the embedding runs with the first chunk only; at the peak rank 0 holds N0
  first-chunk micro-batches (counted below from Megatron's own order, peers/megatron/
  interleaved_groups.txt.gz: 2 P here), where Megatron's factor gives P + (P - 1) / V:
  (N0 - P - (P - 1) / V) x Megatron's embedding bytes. The layers' count agrees (N = P V + P - 1
  chunks; the term is stated, and zero).
And against the figure without SP:
- Megatron's 5 % "optimizer and miscellaneous" overhead: -0.05 / 1.05 of its figure;
- sequence parallelism splits what Megatron keeps whole without it: the norms' and the two
  projections' inputs and the masks, 10 T h a layer, -10 T h (1 - 1 / t); the embedding's
  input and mask, -(8 T + T h) (1 - 1 / t);
- Megatron's per-layer 34 T h assumes f = 4 h; its SP formula has 4 f: 4 T (f - 4 h) / t;
- P = 1: Megatron keeps the logits in bf16 (2 T V_ / t) and one norm output (2 T h, whole);
  ppsched the fp32 softmax and two inputs: 2 T V_ / t + 4 T h / t - 2 T h.

    megatron_activations_cli.py PPSCHED DATA_DIR
"""
import gzip
import json
import os
import re
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

TOLERANCE = 64  # bytes: Megatron's figures are real numbers (x 1.05, x the interleaving factor)


def dims(config):
    """The config's dimensions, as the Hugging Face config names them (GPT-2 its own keys)."""
    gpt2 = config.get("model_type") == "gpt2"
    h = config.get("hidden_size", config.get("n_embd"))
    a = config.get("num_attention_heads", config.get("n_head"))
    L = config.get("num_hidden_layers", config.get("n_layer"))
    z = {"h": h, "a": a, "g": config.get("num_key_value_heads", a), "d": config.get("head_dim") or h // a,
         "f": config.get("intermediate_size", config.get("n_inner") or 4 * h), "V": config["vocab_size"], "L": L,
         "gated": not gpt2,
         "hidden_dropout": config.get("resid_pdrop", 0.1) > 0 if gpt2 else False,
         "embedding_dropout": config.get("embd_pdrop", 0.1) > 0 if gpt2 else False, "moe": False}
    if config.get("model_type") in ("qwen2_moe", "qwen3_moe"):
        step, dense = config.get("decoder_sparse_step", 1), config.get("mlp_only_layers", [])
        moe = [i not in dense and (i + 1) % step == 0 for i in range(L)]
        assert all(moe), "this test prices every layer as MoE"
        z.update(moe=True, E=config["num_experts"], k=config["num_experts_per_tok"], f_moe=config["moe_intermediate_size"],
                 f_shared=config.get("shared_expert_intermediate_size") or 0)
    elif config.get("model_type") not in ("llama", "mistral", "qwen2", "qwen3", "gpt2"):
        raise SystemExit("megatron_activations_cli.py: no derivation for " + config.get("model_type", "?"))
    return z


def layer_differences(z, T):
    """ppsched - Megatron's SP formula, per decoder layer and micro-batch, before / t: [(why, bytes)]."""
    h, a, g, d, f = z["h"], z["a"], z["g"], z["d"], z["f"]
    out = [("Q/K/V 2T(a+2g)d, not 6Th", 2 * T * (a + 2 * g) * d - 6 * T * h),
           ("out-proj input 2Tad, not 2Th", 2 * T * a * d - 2 * T * h)]
    if not z["hidden_dropout"]:
        out.append(("no residual dropout masks", -2 * T * h))
    if z["moe"]:
        # The router's fp32 probabilities 4TE and bool routing map TE, the top-k fp32 weights 4Tk,
        # each routed copy's input, gated MLP and output, the shared experts' MLP.
        out.append(("MoE MLP, not dense 4Tf", 4 * T * z["E"] + T * z["E"] + 4 * T * z["k"]
                    + 2 * T * z["k"] * (2 * h + 3 * z["f_moe"]) + 6 * T * z["f_shared"] - 4 * T * f))
    elif z["gated"]:
        out.append(("SwiGLU keeps 6Tf, not 4Tf", 2 * T * f))
    return out


def megatron_order(data, P, V, M):
    """Rank 0's compute order in Megatron's interleaved schedule (group size P), as Megatron's code
    built it: [(kind, micro, stage)]."""
    want = f"case interleaved-1f1b --pp {P} --vpp {V} --micro {M} --group-size {P}"
    with gzip.open(os.path.join(data, "peers", "megatron", "interleaved_groups.txt.gz"), "rt") as f:
        lines = f.read().splitlines()
    i = lines.index(want)
    assert lines[i + 1].startswith("r0 "), lines[i + 1][:80]
    return [(m.group(1), int(m.group(2)), int(m.group(3))) for m in re.finditer(r"([FB])(\d+)s(\d+)", lines[i + 1])]


def in_flight_at_peak(order, P):
    """(chunk micro-batches, first-chunk micro-batches) rank 0 holds at its peak: every chunk holds
    the same layers and the first adds the embedding, so the peak is where the most are held, and
    of those where the most first-chunk ones are."""
    held, first, best = 0, 0, (0, 0)
    for kind, _, stage in order:
        step = 1 if kind == "F" else -1
        held += step
        first += step if stage == 0 else 0
        best = max(best, (held, first))
    return best


def main():
    exe, data = sys.argv[1], sys.argv[2]
    peer = json.load(open(os.path.join(data, "peers", "megatron", "activations.json")))
    cli, rows = Cli(exe), []
    for case in peer["cases"]:
        name, s, b = case["model"], case["seq_length"], case["micro_batch_size"]
        P, t, V, M = case["pp"], case["tp"], case["vpp"], case["num_microbatches"]
        label = f"{name} s {s} b {b} PP {P} TP {t}{f' VPP {V}' if V else ''} M {M}"
        path = os.path.join(data, "models", "hf", name)
        z = dims(json.load(open(path)))
        h, f, Vocab, L = z["h"], z["f"], z["V"], z["L"]
        T = s * b
        chunks = P * (V or 1)
        n = L // chunks  # layers a stage holds
        assert n * chunks == L, label
        # Megatron's in-flight counts (layer-micro-batches, embeddings) and ppsched's (from the order).
        if V:
            factor = 1 + (P - 1) / (P * V)
            N, N0 = in_flight_at_peak(megatron_order(data, P, V, M), P)
        else:
            factor = min(1, M / P) if P > 1 else 1
            N = N0 = min(M, P)
        Lf, Ef = L * factor, P * factor
        emb = 8 * T + T * h
        d_layer = layer_differences(z, T)
        d_emb = [] if z["embedding_dropout"] else [("no embedding dropout mask", -T * h)]

        def expected(meg, sp):
            """Megatron's figure + the differences by design: (bytes, [(why, bytes)])."""
            terms = []
            if not sp:
                terms.append(("Megatron's 5 % overhead", -meg * 0.05 / 1.05))
            per_layer = T * (18 * h + 4 * f) / t if sp else T * h * (10 + 24 / t)
            per_emb = emb / t if sp else emb
            terms.append(("layers in flight", (n * N - Lf) * per_layer))
            terms.append(("embeddings in flight", (N0 - Ef) * per_emb))
            if not sp:
                terms.append(("SP splits the 10Th kept whole", -n * N * 10 * T * h * (1 - 1 / t)))
                terms.append(("34Th assumes f = 4h", n * N * 4 * T * (f - 4 * h) / t))
                terms.append(("SP splits the embedding's", -N0 * emb * (1 - 1 / t)))
                if P == 1:
                    terms.append(("fp32 softmax, head and norm inputs", 2 * T * Vocab / t + 4 * T * h / t - 2 * T * h))
            terms += [(why, n * N * x / t) for why, x in d_layer]
            terms += [(why, N0 * x / t) for why, x in d_emb]
            return meg + sum(x for _, x in terms), terms

        common = ["--model", path, "--layout", ",".join([str(n)] * chunks), "--tp", str(t), "--seq-len", str(s),
                  "--micro-batch-size", str(b), "--recompute", "selective"]
        sim_args = ["simulate", "--generate", "interleaved-1f1b" if V else "1f1b", "--pp", str(P), "--micro", str(M)]
        if V:
            sim_args += ["--vpp", str(V), "--group-size", str(P)]
        # A budget (the most ppsched takes) no case reaches: only the activations are compared here.
        sim = cli.json(*sim_args, "--memory-budget", "1024GiB", *common)
        model = cli.json("model", path, "--pp", str(P), *(["--vpp", str(V)] if V else []), *common[2:])
        if not sim or not model:
            continue
        peak = sim["memory"]["per_rank"][0]["activations_peak_bytes"]
        stages = model["stages"]
        # The model's per-micro-batch figures times what rank 0 holds at its peak.
        first, other = stages[0]["activation_bytes_per_micro"], stages[P]["activation_bytes_per_micro"] if V else 0
        from_model = N0 * first + (N - N0) * other
        for key, sp in (("compute_activation_memory", True), ("compute_activation_memory_without_sp", False)):
            meg = case[key]
            # Megatron's figure is the formula above (the reading the differences below start from).
            if sp:
                formula = (Lf * T * (18 * h + 4 * f) + Ef * emb + (4 * T * h + 4 * T * Vocab if P == 1 else 0)) / t
            else:
                formula = 1.05 * (Lf * T * h * (10 + 24 / t) + Ef * emb + (2 * T * Vocab / t + 2 * T * h if P == 1 else 0))
            cli.check(abs(formula - meg) <= TOLERANCE,
                      f"{label}: Megatron's {key} gave {meg:.1f} bytes, its formula as read here {formula:.1f}")
            want, terms = expected(meg, sp)
            for what, got in (("simulate's rank-0 peak", peak), ("model's stage figures x in flight", from_model)):
                cli.check(abs(got - want) <= TOLERANCE,
                          f"{label} vs {key}: {what} {got} bytes, Megatron {meg:.1f} + the differences by "
                          f"design = {want:.1f} ({'; '.join(f'{w} {x:+.0f}' for w, x in terms if x)})")
            if sp or t == 1:  # the one Megatron's report prints
                rows.append((label, key, meg, peak, terms))
    print(f"{'case':<52} {'Megatron':>14} {'ppsched':>14} {'diff %':>8}  differences by design (bytes)")
    for label, key, meg, got, terms in rows:
        tag = "" if key == "compute_activation_memory" else " (no SP)"
        print(f"{label + tag:<52} {meg:>14.0f} {got:>14} {100 * (got - meg) / meg:>+8.3f}  "
              + "; ".join(f"{w} {x:+.0f}" for w, x in terms if abs(x) > 0.5))
    print(f"{len(peer['cases']) * 2 * 3 - len(cli.failures)} checks passed, {len(cli.failures)} failed "
          f"({len(peer['cases'])} cases, Megatron {peer['commit'][:12]})")
    cli.finish("megatron_activations_cli")


if __name__ == "__main__":
    main()
