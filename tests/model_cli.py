#!/usr/bin/env python3
"""`ppsched model` and --model on check, simulate, compare and tune, end to end.

    model_cli.py PPSCHED DATA_DIR

A model's JSON fields, both layout spellings, a cost file written by `model -o` pricing a
schedule exactly as --model does, the per-rank memory of `simulate --json`, the budget verdict
naming the largest part, recomputation in tune's leaderboard, and the refusals (exit 2).
"""
import json
import os
import sys
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

EXE, DATA = sys.argv[1], sys.argv[2]
LLAMA = os.path.join(DATA, "models", "hf", "llama3_8b.json")
cli = Cli(EXE)
run, check = cli.run, cli.check


def llama_on(path, device):
    """Writes a ppsched-model file: Llama-3-8B (LLAMA) on `device` (the file's "device" object)."""
    with open(path, "w") as f:
        json.dump({"format": "ppsched-model", "version": 1, "hf_config": os.path.abspath(LLAMA), "device": device}, f)


# The target the calibration blocks predict: ZB-V, P=4 V=2 M=16, four blocks a virtual stage.
ZBV_LAYOUT = "4,4,4,4,4,4,4,4"


def zbv_truth(path, truth_model, at_least, what):
    """Writes the ZB-V target to `path` and simulates it under `truth_model`: that makespan must
    be over `at_least` times the plain Llama model's (the truth differs where the fit must see
    it). Returns the truth's simulation."""
    run("generate", "zbv", "--pp", "4", "--vpp", "2", "--micro", "16", "-o", path)
    truth = cli.json("simulate", path, "--model", truth_model, "--layout", ZBV_LAYOUT)
    plain = cli.json("simulate", path, "--model", LLAMA, "--layout", ZBV_LAYOUT)
    check(truth.get("makespan_ms", 0) > at_least * plain.get("makespan_ms", 0),
          "%s: %s vs %s" % (what, truth.get("makespan_ms"), plain.get("makespan_ms")))
    return truth


# ---- ppsched model --json: the interface other tools rely on ----
m = cli.json("model", LLAMA, "--pp", "4")
check(m.get("parameters", {}).get("total") == 8030261248, "parameters.total of Llama-3-8B")
check(all(set(l) >= {"name", "params", "fwd_flops", "activation_bytes", "output_bytes"} for l in m.get("layers", [])),
      "layers[] fields")
check(len(m.get("stages", [])) == 4, "4 stages")
check(all(set(s) >= {"layers", "params", "activation_bytes_per_micro", "fwd_ms", "bwd_ms"} for s in m.get("stages", [])),
      "stages[] fields")
check(m.get("layout", {}).get("counts") == [8, 9, 8, 7], "torchtitan's even split of 32 layers over 4 stages")
check(sum(len(s["layers"]) for s in m["stages"]) == len(m["layers"]), "every layer exactly once")
# Both layout spellings give the same stages.
a = cli.json("model", LLAMA, "--pp", "4", "--layout", "10,8,8,6")
b = cli.json("model", LLAMA, "--pp", "2", "--vpp", "2", "--layout", "Et*10|t*8|t*8|t*6L")
check([s["layers"] for s in a["stages"]] == [s["layers"] for s in b["stages"]], "counts and Megatron's string agree")
check(a["layout"]["megatron"] == "Et*10|t*8|t*8|t*6L", "Megatron string written back")

# ---- the resident bytes: Megatron's 18 and 6 + 12/DP bytes per parameter ----
plain = cli.json("model", LLAMA, "--pp", "4", "--layout", "8,8,8,8")
dist = cli.json("model", LLAMA, "--pp", "4", "--layout", "8,8,8,8", "--dp", "8", "--distributed-optimizer")
p0 = plain["stages"][0]["params"]
check(plain["stages"][0]["resident_bytes"] == 18 * p0, "18 bytes per parameter")
check(dist["stages"][0]["weights_bytes"] + dist["stages"][0]["grads_bytes"] == 6 * p0, "6 bytes unsharded")
check(dist["stages"][0]["optimizer_bytes"] == -(-12 * p0 // 8), "12/DP bytes of optimizer state")

with tempfile.TemporaryDirectory() as tmp:
    # ---- model -o: an ordinary cost file that prices as --model does ----
    costs = os.path.join(tmp, "llama_pp4.json")
    p = run("model", LLAMA, "--pp", "4", "-o", costs)
    check("wrote " + costs in p.stdout, "model -o says what it wrote")
    by_model = cli.json("simulate", "--generate", "1f1b", "--pp", "4", "--micro", "8", "--model", LLAMA)
    by_file = cli.json("simulate", "--generate", "1f1b", "--pp", "4", "--micro", "8", "--costs", costs)
    check(abs(by_model.get("makespan_ms", 0) - by_file.get("makespan_ms", 1)) < 1e-9, "model -o reproduces the makespan")
    check(by_model.get("memory") == by_file.get("memory"), "model -o reproduces the memory")
    # A figure over a cost file's limits is refused by the writer, naming it; nothing is written.
    huge = os.path.join(tmp, "huge.json")
    with open(huge, "w") as f:
        json.dump({"format": "ppsched-model", "version": 1, "layers": [
            {"name": "big", "params": 10 ** 12, "fwd_flops": 1e12, "activation_bytes": 10 ** 6, "output_bytes": 10 ** 6}]}, f)
    too_big = os.path.join(tmp, "too_big.json")
    p = run("model", huge, "-o", too_big, expect=2)
    check("-o: the costs of this layout do not fit a cost file" in p.stderr and "bytes is over the limit" in p.stderr
          and "(1 TiB)" in p.stderr, "model -o names the figure over the limits: " + p.stderr)
    check(not os.path.exists(too_big), "model -o writes nothing it could not read back")
    # A cost file given with --model overrides what it sets.
    override = os.path.join(tmp, "slow.json")
    with open(override, "w") as f:
        json.dump({"format": "ppsched-costs", "version": 1, "compute": {"FWD": 50, "BWD": 100}}, f)
    both = cli.json("simulate", "--generate", "1f1b", "--pp", "4", "--micro", "8", "--model", LLAMA, "--costs", override)
    check(both.get("makespan_ms", 0) > by_model.get("makespan_ms", 0), "--costs overrides the model's compute")
    def sizes(sim):
        return [{k: v for k, v in r.items() if not k.endswith("time_ms")} for r in sim.get("memory", {}).get("per_rank", [])]
    check(sizes(both) == sizes(by_model), "... and keeps its memory")

# ---- simulate --json memory.per_rank ----
per_rank = by_model.get("memory", {}).get("per_rank", [])
check(len(per_rank) == 4, "memory.per_rank has every rank")
for r in per_rank:
    check(set(r) >= {"params_bytes", "grads_bytes", "optimizer_bytes", "activations_peak_bytes", "peak_bytes"},
          "memory.per_rank fields")
    at = r["at_peak"]
    check(r["peak_bytes"] == r["params_bytes"] + r["grads_bytes"] + r["optimizer_bytes"] + at["activations_bytes"] +
          at["buffers_bytes"] + at["gathered_params_bytes"] + at["workspace_bytes"], "peak = resident + live parts")
    check(r["activations_peak_bytes"] >= at["activations_bytes"], "the activations' own peak is at least their share")
# 1F1B: rank 0 holds P = 4 micro-batches' activations (Megatron's in-flight count).
check(per_rank and per_rank[0]["activations_peak_bytes"] == 4 * plain["stages"][0]["activation_bytes_per_micro"] or
      per_rank[0]["activations_peak_bytes"] == 4 * m["stages"][0]["activation_bytes_per_micro"],
      "1F1B rank 0 keeps P micro-batches")

# ---- the budget judges the whole peak and names the largest part ----
p = run("check", "--generate", "1f1b", "--pp", "4", "--micro", "8", "--model", LLAMA, "--memory-budget", "35GiB", expect=1)
check("[memory]" in p.stdout and "The largest part is the optimizer state" in p.stdout, "memory verdict names the largest part:\n" + p.stdout)
p = run("check", "--generate", "1f1b", "--pp", "4", "--micro", "8", "--model", LLAMA, "--memory-budget", "35GiB",
        "--dp", "8", "--distributed-optimizer", expect=0)
check("verified" in p.stdout, "the distributed optimizer brings it under 35 GiB")
p = run("simulate", "--generate", "gpipe", "--pp", "4", "--micro", "16", "--model", LLAMA, expect=1)
check("budget 75.65 GiB per rank (usable: 79.65 GiB device less a 4.00 GiB reserve)" in p.stdout and "over it" in p.stdout,
      "simulate reports ranks over the usable device memory and says how it is derived")

# ---- recomputation in tune's leaderboard: memory out, time in ----
def tune(*extra):
    return cli.json("tune", "--pp", "4", "--micro", "8", "--model", LLAMA, "--seconds", "0", "--iterations", "200",
                    "--des-iterations", "0", "-q", "--flash-attention", "off", "--memory-budget", "1000GiB", *extra)

def family(t, name):
    return next(e for e in t.get("leaderboard", []) if e["name"] == name)

none, full = tune(), tune("--recompute", "full")
check(max(family(full, "1f1b")["peak_memory_bytes"]) < max(family(none, "1f1b")["peak_memory_bytes"]),
      "full recomputation lowers 1F1B's peak in the leaderboard")
check(family(full, "1f1b")["makespan_ms"] > family(none, "1f1b")["makespan_ms"], "... and lengthens it")

# ---- compare --model ----
with tempfile.TemporaryDirectory() as tmp:
    f1 = os.path.join(tmp, "a.json")
    run("generate", "1f1b", "--pp", "4", "--micro", "8", "-o", f1)
    rows = cli.json("compare", f1, "--model", LLAMA)
    check(rows and rows[0].get("peak_memory_bytes", 0) > 30 * 2 ** 30, "compare prices the model's memory")

# ---- tune --partition search: the layout searched with the schedule ----
with tempfile.TemporaryDirectory() as tmp:
    lay, best = os.path.join(tmp, "layout.txt"), os.path.join(tmp, "best.json")
    t = cli.json("tune", "--pp", "4", "--micro", "8", "--model", LLAMA, "--dp", "8", "--distributed-optimizer",
                 "--partition", "search", "--family", "1f1b", "--family", "zb-h1", "--seconds", "0", "--iterations", "500",
                 "--des-iterations", "20", "-q", "--layout-out", lay, "-o", best)
    counts = t.get("layout", [])
    part = t.get("partition", {})
    check(len(counts) == 4 and sum(counts) == 32, "tune --json layout: 4 stages, 32 decoder layers: %s" % counts)
    check(part.get("layouts_evaluated", 0) > 2 and part.get("even_layout") == [8, 9, 8, 7],
          "partition: layouts evaluated, torchtitan's even split as the baseline: %s" % part)
    check(t["makespan_ms"] <= part.get("even_makespan_ms", 0) + 1e-9, "never slower than the even split")
    check(all(e.get("layout") for e in t.get("leaderboard", [])), "every leaderboard row names its layout")
    check(all(e["name"].split()[0] in ("1f1b", "zb-h1", "found") for e in t["leaderboard"]),
          "--family keeps the other families out: %s" % [e["name"] for e in t["leaderboard"]])
    text = open(lay).read().split("\n") if os.path.exists(lay) else ["", ""]
    check(text[0] == ",".join(map(str, counts)) and text[1] == t.get("layout_megatron"),
          "--layout-out: the counts, then Megatron's string: %s" % text[:2])
    # Both spellings read back as the same stages, and the written schedule simulates as tuned.
    m1 = cli.json("model", LLAMA, "--pp", "4", "--layout", text[0])
    m2 = cli.json("model", LLAMA, "--pp", "4", "--layout", text[1])
    check([s["layers"] for s in m1.get("stages", [])] == [s["layers"] for s in m2.get("stages", [])],
          "the layout's two spellings agree")
    sim = cli.json("simulate", best, "--model", LLAMA, "--dp", "8", "--distributed-optimizer", "--layout", text[0])
    check(abs(sim.get("makespan_ms", 0) - t["makespan_ms"]) < 1e-6, "the tuned schedule simulates as tuned on its layout")
# Refused: a flag that cannot apply.
base = ["tune", "--pp", "4", "--micro", "8", "--seconds", "0", "-q"]
for extra, needle in [(["--partition", "search"], "needs --model"),
                      (["--layout-out", "x.txt"], "needs --model"),
                      (["--model", LLAMA, "--partition", "search", "--layout", "8,8,8,8"], "give one"),
                      (["--model", LLAMA, "--partition-layouts", "9"], "only with --partition search"),
                      (["--model", LLAMA, "--partition", "search", "--pareto"], "does not apply"),
                      (["--family", "nope"], "not a family"),
                      (["--family", "1f1b", "--no-families"], "contradict")]:
    p = run(*(base + extra), expect=2)
    check(needle in p.stderr, "%s: %s" % (" ".join(extra), p.stderr.strip()[:200]))

# ---- per-layer calibration: fit on one run, predict another family, V and layout ----
with tempfile.TemporaryDirectory() as tmp:
    trace, other = os.path.join(tmp, "t.json"), os.path.join(tmp, "zbv.json")
    fitted = os.path.join(tmp, "fitted.json")
    # The same network on a device the fit must correct (half the rate, another MFU).
    wrong = os.path.join(tmp, "wrong.json")
    llama_on(wrong, {"flops_per_s": 5e14, "mfu": 0.3})
    run("simulate", "--generate", "1f1b", "--pp", "4", "--micro", "8", "--model", LLAMA, "--layout", "10,8,8,6",
        "--trace", trace)
    run("generate", "zbv", "--pp", "4", "--vpp", "2", "--micro", "16", "-o", other)
    cal = cli.json("calibrate", trace, "--model", wrong, "--trace-layout", "10,8,8,6", "--schedule", other,
                   "--layout", ZBV_LAYOUT, "--model-out", fitted)
    truth = cli.json("simulate", other, "--model", LLAMA, "--layout", ZBV_LAYOUT)
    kinds = cal.get("per_layer", {}).get("kinds", [])
    check(len(kinds) == 3 and all(abs(k["flops_per_s"] / (989e12 * 0.45) - 1) < 1e-3 for k in kinds),
          "the fitted rates are the traced device's 989 TFLOP/s x 0.45: %s" % kinds)
    pred = cal.get("prediction", {})
    check(pred.get("measured_ms", 0) is None, "another run: no measured figure to compare")
    err = abs(pred.get("predicted_ms", 0) - truth.get("makespan_ms", -1)) / max(truth.get("makespan_ms", 1), 1e-9)
    check(err < 1e-3, "per-layer prediction of ZB-V V=2 M=16 on another layout from a 1F1B M=8 trace: %s vs %s" %
          (pred.get("predicted_ms"), truth.get("makespan_ms")))
    # The per-stage fit cannot: the same trace's cost file has 4 stages, the schedule 8.
    p = run("calibrate", trace, "--schedule", other, expect=2)
    check("not the schedule that ran" in p.stderr, "the per-stage fit refuses another shape: " + p.stderr[-200:])
    # The written model reads back and prices the schedule as the prediction did.
    again = cli.json("simulate", other, "--model", fitted, "--layout", ZBV_LAYOUT)
    check(abs(again.get("makespan_ms", 0) - pred.get("predicted_ms", -1)) < 1e-6, "--model-out reads back as fitted")
    p = run("calibrate", trace, "--trace-layout", "8,8,8,8", expect=2)
    check("--model" in p.stderr, "--trace-layout without --model is refused")

# ---- the split backward measured once: a whole-backward trace predicts split schedules ----
# The truth: the same network on a device whose split backward costs more than the whole (stage
# 0: no input gradient, the weight half 1.05 of the whole; the others 0.55 + 1.0, as the
# executor's autograd split measures). A 1F1B trace cannot show it (its backwards are whole): the
# trace's otherData.split_backward probes (what ppsched-exec --trace writes) carry it into the fit.
with tempfile.TemporaryDirectory() as tmp:
    truth_model, wrong = os.path.join(tmp, "truth.json"), os.path.join(tmp, "wrong.json")
    split = {"first_stage": {"input": 0.0, "weight": 1.05}, "other_stages": {"input": 0.55, "weight": 1.0}}
    llama_on(truth_model, {"split_backward": split})
    llama_on(wrong, {"flops_per_s": 5e14, "mfu": 0.3})
    trace, probed, other = (os.path.join(tmp, n) for n in ("t.json", "probed.json", "zbv.json"))
    fitted = os.path.join(tmp, "fitted.json")
    run("simulate", "--generate", "1f1b", "--pp", "4", "--micro", "8", "--model", truth_model, "--layout", "8,8,8,8",
        "--trace", trace)
    with open(trace) as f:
        doc = json.load(f)
    doc["otherData"]["split_backward"] = [
        {"stage": s, "bwd_ms": 10.0, "bwd_input_ms": 0.0 if s == 0 else 5.5, "bwd_weight_ms": 10.5 if s == 0 else 10.0}
        for s in range(4)]
    with open(probed, "w") as f:
        json.dump(doc, f)
    truth = zbv_truth(other, truth_model, 1.05, "the truth's split backward costs more than its FLOPs say")
    cal = cli.json("calibrate", probed, "--model", wrong, "--trace-layout", "8,8,8,8", "--schedule", other,
                   "--layout", ZBV_LAYOUT, "--model-out", fitted)
    pred = cal.get("prediction", {})
    err = abs(pred.get("predicted_ms", 0) - truth.get("makespan_ms", -1)) / max(truth.get("makespan_ms", 1), 1e-9)
    check(err < 1e-3, "ZB-V from a probed 1F1B trace: %s predicted vs %s" % (pred.get("predicted_ms"), truth.get("makespan_ms")))
    check(any("stage 0: BWD_INPUT 0.00 + BWD_WEIGHT 1.05; other stages: BWD_INPUT 0.55 + BWD_WEIGHT 1.00" in n
              for n in cal.get("notes", [])), "calibrate says how it priced split steps: %s" % cal.get("notes"))
    unprobed = cli.json("calibrate", trace, "--model", wrong, "--trace-layout", "8,8,8,8", "--schedule", other,
                        "--layout", ZBV_LAYOUT).get("prediction", {})
    check(abs(unprobed.get("predicted_ms", 0) - truth.get("makespan_ms", 0)) > 0.05 * truth.get("makespan_ms", 0),
          "without the probes the fit prices split halves by their FLOPs (over 5 %% off): %s" % unprobed.get("predicted_ms"))
    with open(fitted) as f:
        check(json.load(f).get("device", {}).get("split_backward") == split, "--model-out keeps the split fractions")
    again = cli.json("simulate", other, "--model", fitted, "--layout", ZBV_LAYOUT)
    check(abs(again.get("makespan_ms", 0) - pred.get("predicted_ms", -1)) < 1e-6, "--model-out reads back as fitted")
    # A fraction out of range is refused where it is.
    llama_on(wrong, {"split_backward": {"other_stages": {"input": 101, "weight": 1}}})
    p = run("model", wrong, "--pp", "4", expect=2)
    check("device.split_backward.other_stages.input" in p.stderr, "a bad split fraction is located: " + p.stderr[-200:])

# ---- a slower rank measured once: its stages are priced at its own speed ----
# The truth: rank 0 of four takes 1.5x (forward) and 1.8x (backward) what the rates say (a slower
# core, as the executor's runs on a two-core VM show). The per-layer fit alone spreads rank 0's
# excess over every rank; its rank factors (device.rank_time_factors) keep it on rank 0, and a
# ZB-V schedule (V placement: rank 0 holds stages 0 and 7) on another layout is priced with it.
with tempfile.TemporaryDirectory() as tmp:
    truth_model, wrong = os.path.join(tmp, "truth.json"), os.path.join(tmp, "wrong.json")
    slow = [{"FWD": 1.5, "BWD_INPUT": 1.8, "BWD_WEIGHT": 1.8}] + [{"FWD": 1.0, "BWD_INPUT": 1.0, "BWD_WEIGHT": 1.0}] * 3
    llama_on(truth_model, {"rank_time_factors": slow})
    llama_on(wrong, {"flops_per_s": 5e14, "mfu": 0.3})
    trace, other, fitted = (os.path.join(tmp, n) for n in ("t.json", "zbv.json", "fitted.json"))
    run("simulate", "--generate", "1f1b", "--pp", "4", "--micro", "8", "--model", truth_model, "--layout", "8,8,8,8",
        "--trace", trace)
    truth = zbv_truth(other, truth_model, 1.2, "the truth's slow rank costs the schedule")
    cal = cli.json("calibrate", trace, "--model", wrong, "--trace-layout", "8,8,8,8", "--schedule", other,
                   "--layout", ZBV_LAYOUT, "--model-out", fitted)
    factors = cal.get("per_layer", {}).get("rank_time_factors", [])
    check(len(factors) == 4 and all(abs(f["FWD"] / factors[1]["FWD"] - (1.5 if f["rank"] == 0 else 1)) < 0.01 and
                                    abs(f["BWD_INPUT"] / factors[1]["BWD_INPUT"] - (1.8 if f["rank"] == 0 else 1)) < 0.01
                                    for f in factors),
          "the fitted rank factors are the truth's up to a common scale: %s" % factors)
    pred = cal.get("prediction", {})
    err = abs(pred.get("predicted_ms", 0) - truth.get("makespan_ms", -1)) / max(truth.get("makespan_ms", 1), 1e-9)
    check(err < 0.01, "ZB-V from a 1F1B trace with a slow rank: %s predicted vs %s" % (pred.get("predicted_ms"), truth.get("makespan_ms")))
    again = cli.json("simulate", other, "--model", fitted, "--layout", ZBV_LAYOUT)
    check(abs(again.get("makespan_ms", 0) - pred.get("predicted_ms", -1)) < 1e-6, "--model-out's rank factors read back")
    # Without them (the pooled rates alone) the same prediction is over 5 % off.
    with open(fitted) as f:
        doc = json.load(f)
    del doc["device"]["rank_time_factors"]
    pooled = os.path.join(tmp, "pooled.json")
    with open(pooled, "w") as f:
        json.dump(doc, f)
    p = cli.json("simulate", other, "--model", pooled, "--layout", ZBV_LAYOUT)
    check(abs(p.get("makespan_ms", 0) - truth.get("makespan_ms", 0)) > 0.05 * truth.get("makespan_ms", 0),
          "the pooled rates alone miss the slow rank by over 5 %%: %s vs %s" % (p.get("makespan_ms"), truth.get("makespan_ms")))
    # Another rank count: priced at the fitted rates alone, and said so.
    two = os.path.join(tmp, "two.json")
    run("generate", "1f1b", "--pp", "2", "--micro", "4", "-o", two)
    p = run("simulate", two, "--model", fitted, "--layout", "16,16", expect=1)  # 1: rank 0 over its 80 GiB
    check("describe 4 ranks, the schedule has 2" in p.stderr, "a schedule on other ranks is noted: " + p.stderr[-200:])
    p = run("tune", "--pp", "4", "--micro", "8", "--seconds", "0", "-q", "--model", fitted, "--iterations", "5")
    check("are not applied" in p.stderr, "tune says it prices stages, not ranks: " + p.stderr[-300:])
    # A factor out of range is refused where it is.
    llama_on(wrong, {"rank_time_factors": [{"FWD": 1, "BWD_INPUT": 0, "BWD_WEIGHT": 1}]})
    p = run("model", wrong, "--pp", "4", expect=2)
    check("device.rank_time_factors[0].BWD_INPUT" in p.stderr, "a bad rank factor is located: " + p.stderr[-200:])

# ---- tied and shared weights: a rank holds each parameter once (issue 36) ----
GPT2 = os.path.join(DATA, "models", "hf", "gpt2.json")


def rank_params(*args):
    """Each rank's parameters (its bf16 weights / 2) from simulate --json."""
    sim = cli.json("simulate", *args)
    return [r["params_bytes"] // 2 for r in sim.get("memory", {}).get("per_rank", [])]


# One rank with the embedding's and the tied head's stages: GPT-2's published 124,439,808.
check(rank_params("--generate", "interleaved-1f1b", "--pp", "1", "--vpp", "2", "--micro", "4", "--model", GPT2,
                  "--layout", "6,6", "--seq-len", "1024") == [124439808], "GPT-2 on one rank holds 124,439,808 parameters")
# V placement, rank 0 with stages 0 and 3; by hand: the embedding V h + 1024 h = 39,383,808, six
# layers of 12 h^2 + 13 h = 7,087,872, the final LayerNorm 2 h = 1,536; rank 1 six layers.
for fam in ("zbv", "dualpipev"):
    got = rank_params("--generate", fam, "--pp", "2", "--vpp", "2", "--micro", "8", "--model", GPT2, "--layout", "3,3,3,3")
    check(got == [39383808 + 6 * 7087872 + 1536, 6 * 7087872], "%s: rank 0 holds the tied weight once: %s" % (fam, got))
with tempfile.TemporaryDirectory() as tmp:
    # model -o carries the shared weights: the cost file prices the ranks as --model does.
    costs = os.path.join(tmp, "gpt2_v.json")
    run("model", GPT2, "--pp", "2", "--vpp", "2", "--layout", "3,3,3,3", "-o", costs)
    with open(costs) as f:
        shared = json.load(f)["memory"].get("shared_weights")
    check(shared == [{"stages": [0, 3], "weights_bytes": 2 * 38597376, "grads_bytes": 4 * 38597376,
                      "optimizer_bytes": 12 * 38597376}], "model -o writes the tied table: %s" % shared)
    check(rank_params("--generate", "zbv", "--pp", "2", "--vpp", "2", "--micro", "8", "--costs", costs) ==
          [39383808 + 6 * 7087872 + 1536, 6 * 7087872], "the cost file's ranks hold the tied weight once")
    bad = os.path.join(tmp, "bad_shared.json")
    with open(bad, "w") as f:
        json.dump({"format": "ppsched-costs", "version": 1, "compute": {"FWD": 1},
                   "memory": {"weights_bytes": [4, 2], "shared_weights": [{"stages": [0, 1], "weights_bytes": 3}]}}, f)
    p = run("simulate", "--generate", "1f1b", "--pp", "2", "--micro", "2", "--costs", bad, expect=2)
    check("memory.shared_weights[0]" in p.stderr and "more than stage 1 holds" in p.stderr,
          "shared weights larger than a stage's are refused: " + p.stderr[-300:])
    with open(bad, "w") as f:
        json.dump({"format": "ppsched-costs", "version": 1, "compute": {"FWD": 1},
                   "memory": {"shared_weights": [{"stages": [1, 0]}]}}, f)
    p = run("simulate", "--generate", "1f1b", "--pp", "2", "--micro", "2", "--costs", bad, expect=2)
    check("memory.shared_weights[0].stages[1]" in p.stderr, "unordered shared stages are located: " + p.stderr[-300:])
# DeepSeek-V3: the MTP module's stage holds the embedding too (Megatron builds it there): both
# stages hold the published 671,026,419,200, the MTP module (11,610,068,224 by hand, test_workload)
# and a second embedding, 129280 x 7168 = 926,679,040.
DS = os.path.join(DATA, "models", "hf", "deepseek_v3.json")
ds = cli.json("model", DS, "--pp", "2", "--layout", "31,31")
check(sum(s["params"] for s in ds.get("stages", [])) == 671026419200 + 11610068224 + 926679040,
      "DeepSeek-V3's MTP stage holds the embedding: %s" % [s["params"] for s in ds.get("stages", [])])

# ---- sequence lengths against the model's positions (issue 36) ----
p = run("model", GPT2, "--seq-len", "4096", expect=2)
check("--seq-len 4096" in p.stderr and "n_positions) is 1024" in p.stderr, "GPT-2 refuses 4096 tokens: " + p.stderr[-300:])
p = run("simulate", "--generate", "1f1b", "--pp", "2", "--micro", "2", "--model", GPT2, "--seq-len", "1025", expect=2)
check("n_positions) is 1024" in p.stderr, "simulate refuses 1025 tokens on GPT-2: " + p.stderr[-300:])
check(cli.json("model", GPT2, "--seq-len", "1024").get("training", {}).get("seq_len") == [1024], "GPT-2 takes 1024 tokens")
check(cli.json("model", GPT2).get("training", {}).get("seq_len") == [1024], "GPT-2's default length is its 1024 positions")
check(cli.json("model", LLAMA, "--seq-len", "8192").get("notes") == [], "Llama-3-8B at its 8192 positions: no note")
long_llama = cli.json("model", LLAMA, "--seq-len", "16384")
check(any("max_position_embeddings) 8192" in n and "not trained" in n and "no rope_scaling" in n
          for n in long_llama.get("notes", [])), "RoPE past max_position_embeddings is noted: %s" % long_llama.get("notes"))
p = run("model", LLAMA, "--seq-len", "16384")
check("note: sequence length 16384 is over" in p.stdout, "model's text says so: " + p.stdout[-400:])
p = run("simulate", "--generate", "1f1b", "--pp", "4", "--micro", "4", "--model", LLAMA, "--seq-len", "16384",
        "--memory-budget", "1000GiB")
check("note: sequence length 16384 is over" in p.stderr, "simulate notes it on stderr: " + p.stderr[-300:])
with tempfile.TemporaryDirectory() as tmp:
    # Qwen2.5's documented YaRN setting: factor 4 over 32768 original positions.
    yarn = os.path.join(tmp, "yarn.json")
    with open(yarn, "w") as f:
        json.dump({"format": "ppsched-model", "version": 1, "hf_config": dict(
            json.load(open(os.path.join(DATA, "models", "hf", "qwen2.5_7b.json"))), max_position_embeddings=32768,
            rope_scaling={"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"})}, f)
    notes = cli.json("model", yarn, "--seq-len", "65536").get("notes", [])
    check(any("rope_scaling yarn, factor 4" in n and "131072 positions, which cover it" in n for n in notes),
          "rope_scaling's reach is said: %s" % notes)
    notes = cli.json("model", yarn, "--seq-len", "262144").get("notes", [])
    check(any("over the 131072 positions" in n for n in notes), "past rope_scaling's reach: %s" % notes)
    # A model file's own training.seq_len past learned positions is refused, naming it.
    long_gpt = os.path.join(tmp, "gpt2_long.json")
    with open(long_gpt, "w") as f:
        json.dump({"format": "ppsched-model", "version": 1, "hf_config": os.path.abspath(GPT2),
                   "training": {"seq_len": 2048}}, f)
    p = run("model", long_gpt, expect=2)
    check("training.seq_len 2048" in p.stderr and "n_positions" in p.stderr, "training.seq_len past n_positions: " + p.stderr[-300:])
    run("model", long_gpt, "--seq-len", "512")  # the flag wins over the file

# ---- the attention core's FLOPs under the causal mask (issue 36 item 5) ----
def fwd_flops(*extra):
    d = cli.json("model", LLAMA, *extra)
    return d.get("training", {}).get("attention_core"), sum(l["fwd_flops"] for l in d.get("layers", []) if l["kind"] == "decoder")


causal, eager, full = fwd_flops(), fwd_flops("--flash-attention", "off"), fwd_flops("--attention-core", "full")
# Llama-3-8B at 4096 tokens: the core (QK^T and the weighted sum, 2 T s a d each) is
# 4 x 4096^2 x 4096 per layer over the whole matrix, half of that causal; 32 layers.
core = 4 * 4096 ** 2 * 4096 * 32
check(causal[0] == "causal" and eager[0] == "full" and full[0] == "full", "attention_core in --json: %s" % [causal, eager, full])
check(abs(eager[1] - causal[1] - core / 2) < 1e-3 * core and eager[1] == full[1], "the causal core is half the full one")
p = run("model", LLAMA)
check("FlashAttention on, attention core causal (half of s x s)" in p.stdout, "model's text names the core: " + p.stdout[:600])
p = run("model", LLAMA, "--flash-attention", "off", "--attention-core", "causal", expect=2)
check("needs FlashAttention" in p.stderr, "a causal core without FlashAttention is refused: " + p.stderr[-300:])
p = run("model", os.path.join(DATA, "models", "listed_8_layers.json"), "--attention-core", "full", expect=2)
check("--attention-core does not apply" in p.stderr, "--attention-core on listed layers is refused: " + p.stderr[-300:])
with tempfile.TemporaryDirectory() as tmp:
    eager_file = os.path.join(tmp, "eager_causal.json")
    with open(eager_file, "w") as f:
        json.dump({"format": "ppsched-model", "version": 1, "hf_config": os.path.abspath(LLAMA),
                   "training": {"flash_attention": False, "attention_core": "causal"}}, f)
    p = run("model", eager_file, expect=2)
    check("(training.attention_core)" in p.stderr and "needs FlashAttention" in p.stderr,
          "a model file's causal core without FlashAttention is located: " + p.stderr[-300:])
    with open(eager_file, "w") as f:
        json.dump({"format": "ppsched-model", "version": 1, "hf_config": os.path.abspath(LLAMA),
                   "training": {"attention_core": "full"}}, f)
    check(cli.json("model", eager_file).get("training", {}).get("attention_core") == "full", "training.attention_core is read")
p = run("simulate", "--generate", "1f1b", "--pp", "2", "--micro", "2", "--attention-core", "full", expect=2)
check("--model" in p.stderr, "--attention-core without --model is refused: " + p.stderr[-300:])

# ---- FSDP without a pipeline: FSDP2 gathers two wrapped blocks at a time ----
# Hand derivation (docs/model.md "FSDP without a pipeline"): the file's units are 100, 40, 200,
# 60 and 151 M parameters (embedding, three decoder layers, norm + head); neighbours together
# 140, 240, 260, 211 M. The peak is layers.1 + layers.2: 260 M x 2 B (bf16) x 3/4 (over 4
# replicas a rank gathers what it does not hold) = 390,000,000 B. The whole model, what a
# pipeline stage holding all of it gathers: 551 M x 2 x 3/4 = 826,500,000 B.
units = os.path.join(DATA, "models", "listed_fsdp_units.json")
m = cli.json("model", units, "--dp", "4", "--fsdp")
g = (m or {}).get("fsdp_gather") or {}
check(g.get("per_block") is True and g.get("peak_bytes") == 390000000 and g.get("peak_units") == ["layers.1", "layers.2"],
      "model --dp 4 --fsdp without a pipeline gathers layers.1 + layers.2 (390,000,000 B): %s" % g)
check(m and m["stages"][0]["gathered_bytes"] == 390000000, "the stage's gathered_bytes is FSDP2's peak")
p = run("model", units, "--dp", "4", "--fsdp")
check("FSDP2 per-block gather (2 blocks of 5)" in p.stdout, "model names the rule: " + p.stdout[-600:])
sim = cli.json("simulate", "--generate", "1f1b", "--pp", "1", "--micro", "4", "--fsdp-steps", "--model", units, "--dp", "4", "--fsdp")
check(sim and sim["memory"]["per_rank"][0]["at_peak"]["gathered_params_bytes"] == 390000000,
      "simulate --pp 1 --fsdp gathers FSDP2's peak at the rank's peak")
check(sim and sim["data_parallel"]["gather_rule"] == "FSDP2 per-block gather (2 blocks of 5)", "simulate --json names the rule")

# ---- FSDP without a pipeline: the time of its per-unit collectives ----
# Hand derivation, event by event (docs/model.md "FSDP without a pipeline"). Listed layers cost
# fwd_flops / (989e12 x 0.5) s forward and twice that backward (bwd_flops defaults to 2 x fwd).
# Over 4 replicas on the intra-node link (450 GB/s, 5 us) a unit of P parameters all-gathers
# 3/4 x 2P B (bf16) and reduce-scatters 3/4 x 4P B (fp32 gradients), each in ring time
# 3/4 x B / bw + 3 x latency. One communicator: one collective at a time, in issue order.
# Each layer is priced to the microsecond (layers.0: 0.6067 -> 0.607 ms); the stage's forward is
# their sum, 6.576 ms, as `ppsched model` prints it.
flops = {"emb": 1.0e9, "l0": 3.0e11, "l1": 1.5e12, "l2": 4.5e11, "norm": 1.0e9, "head": 1.0e12}
fw = {k: round(v / (989e12 * 0.5) * 1e3, 3) for k, v in flops.items()}
check(abs(sum(fw.values()) - 6.576) < 1e-9, "the stage's forward is 6.576 ms")
bw_ = {k: 2 * v for k, v in fw.items()}
def ag(p): return 0.75 * 2 * p / 450e9 * 1e3 + 3 * 0.005
def rs(p): return 0.75 * 4 * p / 450e9 * 1e3 + 3 * 0.005
# Forward: the embedding's all-gather first; each unit's start lets the next one's run.
e_start = ag(100e6)                                  # compute waits for the embedding
lane = e_start + ag(40e6)                            # layers.0 gathered while the embedding runs
l0_start = max(e_start + fw["emb"], lane)
lane = max(lane, l0_start) + ag(200e6)               # layers.1 while layers.0 runs
l1_start = max(l0_start + fw["l0"], lane)
lane = max(lane, l1_start) + ag(60e6)                # layers.2 while layers.1 runs
l2_start = max(l1_start + fw["l1"], lane)
lane = max(lane, l2_start) + ag(151e6)               # norm + head while layers.2 runs
tail_start = max(l2_start + fw["l2"], lane)
f_span = tail_start + fw["norm"] + fw["head"]
f_exposed = f_span - sum(fw.values())
# Backward, in reverse: norm + head is still gathered (kept since its forward); each unit's
# start lets the previous one's all-gather run; each unit's end issues its reduce-scatter.
ready_l2 = lane = ag(60e6)                           # layers.2 while the head runs
tail_end = bw_["head"] + bw_["norm"]
lane = max(lane, tail_end) + rs(151e6)               # norm + head reduce-scattered
l2_start = max(tail_end, ready_l2)
ready_l1 = lane = max(lane, l2_start) + ag(200e6)    # layers.1, queued behind that
l2_end = l2_start + bw_["l2"]
lane = max(lane, l2_end) + rs(60e6)
l1_start = max(l2_end, ready_l1)
ready_l0 = lane = max(lane, l1_start) + ag(40e6)
l1_end = l1_start + bw_["l1"]
lane = max(lane, l1_end) + rs(200e6)
l0_start = max(l1_end, ready_l0)
ready_e = lane = max(lane, l0_start) + ag(100e6)     # the embedding, behind rs(layers.1)
l0_end = l0_start + bw_["l0"]
lane = max(lane, l0_end) + rs(40e6)
e_start = max(l0_end, ready_e)
e_end = e_start + bw_["emb"]
b_span = max(e_end, max(lane, e_end) + rs(100e6))   # the last reduce-scatter ends the backward
b_exposed = b_span - sum(bw_.values())
collectives = (ag(100e6) + ag(40e6) + ag(200e6) + ag(60e6) + ag(151e6)        # forward
               + ag(60e6) + ag(200e6) + ag(40e6) + ag(100e6)                  # backward gathers
               + rs(151e6) + rs(60e6) + rs(200e6) + rs(40e6) + rs(100e6))     # reduce-scatters
dpj = (sim or {}).get("data_parallel", {})
check(sim and dpj.get("collective_timing") == "fsdp2_per_unit", "a one-stage --fsdp schedule from a model times FSDP2's units: %s" % dpj)
check(sim and abs(dpj["collective_ms"] - 4 * collectives) < 1e-6,
      "4 micro-batches x every unit's collectives: %.6f ms, hand %.6f" % (dpj.get("collective_ms", -1), 4 * collectives))
check(sim and abs(dpj["exposed_ms"] - 4 * (f_exposed + b_exposed)) < 1e-6,
      "not hidden: 4 x (forward %.6f + backward %.6f) ms, got %.6f" % (f_exposed, b_exposed, dpj.get("exposed_ms", -1)))
check(sim and abs(sim["makespan_ms"] - 4 * (f_span + b_span)) < 1e-6,
      "makespan = 4 x (forward span + backward span) = %.6f ms, got %.6f" % (4 * (f_span + b_span), sim and sim["makespan_ms"]))
p = run("simulate", "--generate", "1f1b", "--pp", "1", "--micro", "4", "--fsdp-steps", "--model", units, "--dp", "4", "--fsdp")
check("FSDP2 collectives: every forward all-gathers the 5 units one by one, every backward gathers the 4 not kept" in p.stdout,
      "simulate says how FSDP2 was timed: " + p.stdout[:800])
# A cost file's bytes.params drops the units: one all-gather and one reduce-scatter of the
# whole stage's 551 M x 2 B per step, each 3/4 x 1.102e9 / 450e9 s + 15 us.
with tempfile.TemporaryDirectory() as tmp:
    params_file = os.path.join(tmp, "params.json")
    with open(params_file, "w") as f:
        json.dump({"format": "ppsched-costs", "version": 1, "bytes": {"params": 1102000000}}, f)
    whole = cli.json("simulate", "--generate", "1f1b", "--pp", "1", "--micro", "4", "--fsdp-steps", "--model", units, "--costs",
                     params_file, "--dp", "4", "--fsdp")
check(whole and whole["data_parallel"]["collective_timing"] == "per_fsdp_step" and
      abs(whole["makespan_ms"] - (4 * (sum(fw.values()) + sum(bw_.values())) + 2 * ag(551e6))) < 1e-6,
      "bytes.params: the whole stage once per step, 82.615 ms: %s" % (whole and whole["makespan_ms"]))
# Without FSDP_* steps in the schedule nothing is gathered, and nothing is timed.
# (The checks also say that the forward then computes on sharded parameters: exit 1.)
plain = json.loads(run("simulate", "--generate", "1f1b", "--pp", "1", "--micro", "4", "--model", units, "--dp", "4", "--fsdp",
                       "--json", expect=1).stdout or "null")
check(plain and plain["data_parallel"]["collective_ms"] == 0 and abs(plain["makespan_ms"] - 4 * (sum(fw.values()) + sum(bw_.values()))) < 1e-6,
      "no FSDP_* steps: no collectives priced")

# With a pipeline the stage is gathered whole, as before: stage 0 = embedding + layers.0-1, 340 M.
m2 = cli.json("model", units, "--pp", "2", "--layout", "2,1", "--dp", "4", "--fsdp")
check(m2 and (m2.get("fsdp_gather") or {}).get("per_block") is False and
      [st["gathered_bytes"] for st in m2["stages"]] == [510000000, 316500000],
      "with a pipeline each stage gathers its whole parameters (340 M and 211 M x 2 x 3/4)")
sim2 = cli.json("simulate", "--generate", "1f1b", "--pp", "2", "--micro", "4", "--fsdp-steps", "--model", units, "--layout", "2,1",
                "--dp", "4", "--fsdp")
check(sim2 and sim2["memory"]["per_rank"][0]["at_peak"]["gathered_params_bytes"] == 510000000,
      "simulate --pp 2 --fsdp: rank 0 gathers its whole stage")

# ---- refusals ----
p = run("simulate", "--generate", "1f1b", "--pp", "4", "--micro", "8", "--seq-len", "4096", expect=2)
check("--model" in p.stderr, "--seq-len without --model is refused")
listed = os.path.join(DATA, "models", "listed_8_layers.json")
p = run("model", listed, "--recompute", "full", expect=2)
check("does not apply" in p.stderr, "--recompute on a listed model is refused")
p = run("model", LLAMA, "--pp", "4", "--layout", "8,8,8", expect=2)
check("3 stages but the schedule has 4" in p.stderr, "a layout with the wrong stage count is refused")
p = run("model", os.path.join(DATA, "costs", "bad_format.json"), expect=2)
check("error:" in p.stderr, "a cost file given as a model is refused")

# ---- MoE (issue 38): expert parallelism, the all-to-all's streams, their refusals ----
QWEN_MOE = os.path.join(DATA, "models", "hf", "qwen3_30b_a3b.json")
moe = cli.json("simulate", "--generate", "dualpipev", "--pp", "2", "--vpp", "2", "--micro", "4", "--model", QWEN_MOE,
               "--ep", "4", "--dp", "4", "--trace", os.path.join(cli.tmp, "moe_trace.json"), expect=None)
moe = moe[0] if isinstance(moe, list) else moe
check((moe.get("moe") or {}).get("ep") == 4 and moe["moe"]["a2a_ms"] > 0, "simulate --json: moe.ep and its all-to-all")
check(moe["moe"]["a2a_exposed_ms"] < moe["moe"]["a2a_ms"], "DualPipeV hides part of its all-to-all")
check(all({"a2a_ms", "a2a_exposed_ms", "a2a_contention_ms"} <= set(r) for r in moe.get("ranks", [])), "ranks[]: a2a fields")
with open(os.path.join(cli.tmp, "moe_trace.json")) as f:
    threads = [e["args"]["name"] for e in json.load(f)["traceEvents"] if e.get("name") == "thread_name"]
check("comm stream" in threads, "the trace has a comm stream lane: %s" % sorted(set(threads)))
# A cost file written from the model keeps expert parallelism and the experts' bytes.
costs_path = os.path.join(cli.tmp, "moe_costs.json")
run("model", QWEN_MOE, "--pp", "2", "--ep", "4", "--dp", "4", "-o", costs_path)
with open(costs_path) as f:
    written = json.load(f)
check(written.get("moe", {}).get("ep") == 4 and written["moe"].get("expert_param_bytes"), "model -o writes the moe section")
check(cli.json("simulate", "--generate", "1f1b", "--pp", "2", "--micro", "4", "--costs", costs_path, "--dp", "4",
               expect=None) != {}, "the cost file it wrote is read back")
# tune --ep-search: every EP's best, the winner's report.
t = cli.json("tune", "--pp", "2", "--micro", "4", "--model", QWEN_MOE, "--dp", "8", "--ep-search", "1,8", "--seconds", "0",
             "--iterations", "100", "--family", "1f1b", "--family", "dualpipev", "--vpp-max", "2", "-q", expect=None)
check([e.get("ep") for e in t.get("ep_search", [])] == [1, 8] and t.get("ep") in (1, 8), "tune --ep-search lists each EP: %s"
      % t.get("ep_search"))
cli.refused(["simulate", "--generate", "1f1b", "--pp", "2", "--micro", "4", "--model", QWEN_MOE, "--ep", "3", "--dp", "3"],
            "--ep 3", "does not divide the 128 routed experts")
cli.refused(["simulate", "--generate", "1f1b", "--pp", "2", "--micro", "4", "--model", QWEN_MOE, "--ep", "8"],
            "does not divide the 1 ranks of a stage")
cli.refused(["simulate", "--generate", "1f1b", "--pp", "2", "--micro", "4", "--model", LLAMA, "--ep", "2", "--dp", "2"],
            "needs a model with routed experts")
cli.refused(["simulate", "--generate", "1f1b", "--pp", "2", "--micro", "4", "--ep", "2"], "--ep", "--model")
cli.refused(["tune", "--pp", "2", "--micro", "4", "--model", QWEN_MOE, "--ep", "8", "--dp", "8", "--ep-search", "1,8"],
            "--ep-search and --ep")
cli.refused(["tune", "--pp", "2", "--micro", "4", "--ep-search", "1,8"], "--ep-search needs --model")

cli.finish("model_cli")
