#!/usr/bin/env python3
"""The console examples of README.md and docs/*.md are what the build prints.

    doc_examples.py PPSCHED SOURCE_ROOT

A block fenced as ```console whose first line starts with `$ ppsched ` is a console example: the command runs
from SOURCE_ROOT (`ppsched` is the built PPSCHED) and its stdout must equal the rest of the
block, line for line (trailing blanks ignored). A figure published this way fails this test the
day it stops being true. Other blocks are illustrations and are not run.

Markdown tables that a page marks with `<!-- checked by tests/doc_examples.py: NAME -->` are
recomputed by the function of that name below and compared cell by cell.
"""
import glob
import json
import os
import re
import shlex
import subprocess
import sys

EXE, ROOT = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
failures = []
checked = 0
GiB = 2 ** 30
LLAMA = "tests/data/models/hf/llama3_8b.json"


def ppsched(args):
    p = subprocess.run([EXE] + args, capture_output=True, text=True, cwd=ROOT)
    return p


def blocks(text):
    """(line number, lines) of each block fenced as ```console."""
    out, cur, start, info = [], None, 0, ""
    for n, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            if cur is None:
                cur, start, info = [], n, line[3:].strip()
            else:
                if info == "console":
                    out.append((start, cur))
                cur = None
        elif cur is not None:
            cur.append(line)
    return out


def tables(text):
    """{name: (line number, header, rows)} of the tables marked for checking."""
    out = {}
    lines = text.split("\n")
    for n, line in enumerate(lines):
        m = re.match(r"<!-- checked by tests/doc_examples.py: (\w+) -->", line.strip())
        if not m:
            continue
        k = n + 1
        while k < len(lines) and not lines[k].startswith("|"):
            k += 1
        rows = []
        while k < len(lines) and lines[k].startswith("|"):
            rows.append([c.strip() for c in lines[k].strip().strip("|").split("|")])
            k += 1
        out[m.group(1)] = (n + 1, rows[0], rows[2:])
    return out


# ---- the tables' recomputations ----

FAMILIES = {"1F1B": ["1f1b"], "interleaved 1F1B (V=2)": ["interleaved-1f1b", "--vpp", "2"],
            "ZB-V": ["zbv", "--vpp", "2"], "DualPipeV": ["dualpipev", "--vpp", "2"]}
SETTINGS = {"FlashAttention on": [], "distributed optimizer": ["--distributed-optimizer"],
            "FlashAttention off": ["--flash-attention", "off"],
            "FlashAttention off, selective recomputation": ["--flash-attention", "off", "--recompute", "selective"],
            "full recomputation": ["--recompute", "full"]}


def llama_fit(header, row):
    """Llama-3-8B, 4096 tokens, PP 4 x DP 8, 32 micro-batches, 80 GiB: makespan and peaks."""
    fam = FAMILIES[row[0]]
    settings = SETTINGS[row[1]]
    p = ppsched(["simulate", "--generate", fam[0], "--pp", "4", "--micro", "32"] + fam[1:] +
                ["--model", LLAMA, "--dp", "8", "--memory-budget", "80GiB", "--json"] + settings)
    d = json.loads(p.stdout)
    per = d["memory"]["per_rank"]
    peaks = " / ".join("%.2f" % (r["peak_bytes"] / GiB) for r in per)
    res = " / ".join("%.2f" % (r["resident_bytes"] / GiB) for r in per)
    act = " / ".join("%.2f" % (r["activations_peak_bytes"] / GiB) for r in per)
    fits = "yes" if p.returncode == 0 else "no (exit %d)" % p.returncode
    return [row[0], row[1], "%.1f" % d["makespan_ms"], res, act, peaks, fits]


def megatron_interleave(header, row):
    """Rank 0's exact activation peak of interleaved 1F1B over 1F1B's (P in flight) against
    Megatron's 1 + (P-1)/(P V) (scaled by min(1, M/P)), on the default model."""
    P, V, M = int(row[0]), int(row[1]), int(row[2])
    g = row[3]

    def act0(args):
        p = ppsched(["simulate", "--generate"] + args + ["--json"])
        return json.loads(p.stdout)["memory"]["per_rank"][0]["activations_peak_bytes"]

    base = act0(["1f1b", "--pp", str(P), "--micro", str(P)])
    extra = [] if g == "default" else ["--group-size", g]
    il = act0(["interleaved-1f1b", "--pp", str(P), "--vpp", str(V), "--micro", str(M)] + extra)
    meg = (1 + (P - 1) / (P * V)) * min(1.0, M / P)
    exact = il / base
    verdict = "equal" if abs(exact - meg) < 5e-4 else ("over by %.0f%%" % (100 * (meg / exact - 1)) if meg > exact
                                                        else "under by %.0f%%" % (100 * (1 - meg / exact)))
    return [row[0], row[1], row[2], g, "%.4f" % exact, "%.4f" % meg, verdict]


def megatron_first_stage(header, row):
    """Megatron's activation estimate (theoretical_memory_usage.py, restated: s b h (18 + 4 f / h)
    per layer x L layers, + 8 s b P + s b h P for the embedding, x the interleaving penalty)
    beside ppsched's exact peak of rank 0, Llama-3-8B at 4096 tokens, PP 4, 32 micro-batches."""
    fam = FAMILIES[row[0]]
    cfg = json.load(open(os.path.join(ROOT, LLAMA)))
    s, b, h, f, L, P = 4096, 1, cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], 4
    meg = s * b * h * (18 + 4 * f / h) * L + 8 * s * b * P + s * b * h * P
    V = int(fam[2]) if "--vpp" in fam else None
    if V:
        meg *= 1 + (P - 1) / (P * V)
    p = ppsched(["simulate", "--generate", fam[0], "--pp", "4", "--micro", "32"] + fam[1:] + ["--model", LLAMA, "--json"])
    per = json.loads(p.stdout)["memory"]["per_rank"]
    exact0 = per[0]["activations_peak_bytes"]
    exact_max = max(r["activations_peak_bytes"] for r in per)
    has_formula = fam[0] in ("1f1b", "interleaved-1f1b")  # Megatron's estimator knows these two
    return [row[0], "%.2f" % (exact0 / GiB), "%.2f" % (exact_max / GiB),
            "%.2f" % (meg / GiB) if has_formula else "no formula"]


MODELS = {"GPT-2": "gpt2", "Llama-3-8B": "llama3_8b", "Llama-3-70B": "llama3_70b", "Qwen3-30B-A3B": "qwen3_30b_a3b"}


def partition_gain(header, row):
    """tune --partition search against torchtitan's even split (deterministic: --seconds 0 and
    bounded iterations)."""
    model = "tests/data/models/hf/%s.json" % MODELS[row[0]]
    args = ["tune", "--model", model, "--partition", "search", "--seconds", "0", "--iterations", "2000",
            "--des-iterations", "50", "-q", "--json"] + shlex.split(row[1].strip("`"))
    d = json.loads(ppsched(args).stdout)
    p = d["partition"]
    return [row[0], row[1], ",".join(map(str, p["even_layout"])), "%.1f" % p["even_makespan_ms"],
            ",".join(map(str, d["layout"])), "%.1f" % d["makespan_ms"], d["best"], "%.1f%%" % (100 * p["gain_over_even"])]


PT_DIR = "tests/data/peers/pytorch_partition"
PT_TUNE = ["--seconds", "0", "--iterations", "300", "--des-iterations", "20", "--threads", "1", "-q", "--json"]
PT_NAMES = {"1F1B": "1f1b", "Interleaved1F1B V=2": "interleaved-1f1b", "InterleavedZeroBubble V=2": "interleaved-zb"}
_pt_any = {}


def pytorch_partition(header, row):
    """PyTorch's _partition.py search (tests/data/peers/pytorch_partition/pytorch_results.json)
    against tune --partition search --family F --placement loop, both timed by ppsched's DES on
    the workload's model file; and the search over every family and V <= 2."""
    res = json.load(open(os.path.join(ROOT, PT_DIR, "pytorch_results.json")))
    w = next(x for x in res["workloads"] if x["name"] == row[0])
    fam = next(f for f in w["families"] if f["ppsched_family"] == PT_NAMES[row[1]])
    model = "%s/%s" % (PT_DIR, w["model_file"])
    shape = ["--pp", str(res["pp"]), "--micro", str(res["micro"])]
    vpp = ["--vpp", str(fam["vpp"])] if fam["vpp"] > 1 else []

    def family_ms(counts):
        args = ["simulate", "--generate", fam["ppsched_family"]] + shape + vpp + ["--model", model, "--layout",
                                                                               ",".join(map(str, counts)), "--json"]
        return json.loads(ppsched(args).stdout)["makespan_ms"]

    t = json.loads(ppsched(["tune"] + shape + vpp + ["--model", model, "--partition", "search", "--family",
                                                     fam["ppsched_family"], "--placement", "loop"] + PT_TUNE).stdout)
    if row[0] not in _pt_any:
        _pt_any[row[0]] = json.loads(ppsched(["tune"] + shape + ["--vpp-max", "2", "--model", model, "--partition",
                                                                  "search"] + PT_TUNE).stdout)
    a = _pt_any[row[0]]
    ms = lambda v: "%.1f" % v
    return [row[0], row[1], ",".join(map(str, fam["best_counts"])), ms(family_ms(fam["best_counts"])),
            ",".join(map(str, t["layout"])), ms(family_ms(t["layout"])), ms(t["makespan_ms"]),
            "%s %s" % (a["best"], ",".join(map(str, a["layout"]))), ms(a["makespan_ms"])]


CHECKS = {"partition_gain": partition_gain, "pytorch_partition": pytorch_partition, "llama_fit": llama_fit, "megatron_interleave": megatron_interleave, "megatron_first_stage": megatron_first_stage}

pages = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
for page in pages:
    text = open(page, encoding="utf-8").read()
    rel = os.path.relpath(page, ROOT)
    for start, lines in blocks(text):
        if not lines or not lines[0].startswith("$ ppsched "):
            failures.append("%s:%d: a console block must start with `$ ppsched `" % (rel, start))
            continue
        args = shlex.split(lines[0][len("$ ppsched "):])
        p = ppsched(args)
        got = [l.rstrip() for l in p.stdout.rstrip("\n").split("\n")]
        want = [l.rstrip() for l in lines[1:]]
        checked += 1
        if got != want:
            diff = next((i for i in range(max(len(got), len(want)))
                         if i >= len(got) or i >= len(want) or got[i] != want[i]), 0)
            failures.append("%s:%d: `ppsched %s` (exit %d) prints, from line %d of the block:\n  got:  %s\n  want: %s" % (
                rel, start, " ".join(args), p.returncode, diff + 2,
                got[diff] if diff < len(got) else "<end>", want[diff] if diff < len(want) else "<end>"))
    for name, (line, header, rows) in tables(text).items():
        if name not in CHECKS:
            failures.append("%s:%d: no check named %s" % (rel, line, name))
            continue
        if not rows:
            failures.append("%s:%d: table %s has no rows" % (rel, line, name))
        for row in rows:
            checked += 1
            try:
                got = CHECKS[name](header, row)
            except (KeyError, ValueError, IndexError) as e:
                failures.append("%s:%d: table %s, row %s: cannot recompute (%s)" % (rel, line, name, row, e))
                continue
            if got != row:
                failures.append("%s:%d: table %s:\n  page:     %s\n  ppsched:  %s" % (rel, line, name, row, got))

if checked < 4:
    failures.append("only %d console examples and table rows found: the pages lost their checked examples" % checked)
for f in failures:
    print("FAIL", f)
print("%d console examples and table rows checked, %d failures" % (checked, len(failures)))
sys.exit(1 if failures else 0)
