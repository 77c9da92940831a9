#!/usr/bin/env python3
"""The MoE table of docs/moe.md, regenerated and checked (issue 38).

    moe_table_cli.py PPSCHED DATA_DIR DOC [--write]

Qwen3-30B-A3B and DeepSeek-V3, per schedule (1F1B, interleaved 1F1B, combined 1F1B, ZB-V, DualPipeV, DualPipe),
at EP 1, 4 and 8 over two inter-node link speeds: `ppsched simulate --json`'s makespan, its
all-to-all time (over all ranks) hidden and exposed, and the largest per-rank peak memory. The
test fails when the table in DOC (between its moe-table markers) differs from what the build
computes (--write puts the new one there), and when the ranking does not move where the physics
says it should:
  - every schedule exposes all of its all-to-all but the two that overlap a forward and a
    backward chunk (DualPipeV, DualPipe), which hide part of it: DualPipeV exposes a smaller
    share than 1F1B at every EP > 1 and link;
  - a faster link shrinks the difference: 1F1B's exposed all-to-all less DualPipeV's (ms) is
    smaller over the fast link, at every EP > 1, and so is the makespan gap between them;
  - one EP rank moves nothing (no all-to-all), and a larger EP holds fewer expert bytes: the
    peak memory falls from EP 1 to EP 8 for every schedule.
"""
import json
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

EXE, DATA, DOC = sys.argv[1], sys.argv[2], sys.argv[3]
WRITE = "--write" in sys.argv[4:]
cli = Cli(EXE)
check = cli.check

MODELS = [
    # (label, config, pipeline ranks, micro-batches, extra training flags)
    ("Qwen3-30B-A3B", "qwen3_30b_a3b.json", 4, 16, []),
    ("DeepSeek-V3", "deepseek_v3.json", 16, 32, ["--recompute", "full"]),
]
SCHEDULES = [("1F1B", "1f1b", 1), ("interleaved", "interleaved-1f1b", 2), ("combined 1F1B", "combined-1f1b", 2),
             ("combined 1F1B, delayed wgrad", "combined-1f1b", 2),
             ("ZB-V", "zbv", 2), ("DualPipeV", "dualpipev", 2), ("DualPipe", "dualpipe", 1)]
# Megatron-Core's --delay-wgrad-compute: the same steps, each backward's weight gradients beside its chain.
FLAGS = {"combined 1F1B, delayed wgrad": ["--delay-wgrad-compute"]}
EPS = [1, 4, 8]
# Inter-node links (GB/s): InfiniBand NDR200 and XDR (800 Gb/s); NVLink 4 inside a node of 8.
LINKS = [("25 GB/s", 25.0), ("100 GB/s", 100.0)]
BEGIN, END = "<!-- moe-table begin -->", "<!-- moe-table end -->"


def link_file(gbps):
    return cli.write("link_%g.json" % gbps, json.dumps({
        "format": "ppsched-costs", "version": 1,
        "link": {"intra_node": {"latency_ms": 0.005, "bandwidth_GBps": 450},
                 "inter_node": {"latency_ms": 0.010, "bandwidth_GBps": gbps}, "ranks_per_node": 8}}))


def run(model, pp, micro, extra, family, vpp, ep, link, flags):
    j = cli.json("simulate", "--generate", family, "--pp", str(pp), "--vpp", str(vpp), "--micro", str(micro),
                 "--model", os.path.join(DATA, "models", "hf", model), "--costs", link, "--ep", str(ep), "--dp", "8",
                 "--distributed-optimizer", *extra, *flags, expect=None)
    j = j[0] if isinstance(j, list) else j
    # Exit 1 when a rank is over the device's memory: the table shows it; it must have run.
    check(j.get("completed") is True, "simulate %s %s EP %d: no completed run" % (model, family, ep))
    moe = j.get("moe") or {}
    return {"makespan": j["makespan_ms"], "a2a": moe.get("a2a_ms", 0.0), "exposed": moe.get("a2a_exposed_ms", 0.0),
            "peak": max(r["peak_memory_bytes"] for r in j["ranks"])}


results = {}
rows = ["| model | inter-node link | EP | schedule | makespan ms | all-to-all ms | hidden | exposed ms | peak memory GiB |",
        "|---|---|---|---|---|---|---|---|---|"]
for label, model, pp, micro, extra in MODELS:
    for link_label, gbps in LINKS:
        link = link_file(gbps)
        for ep in EPS:
            for name, family, vpp in SCHEDULES:
                r = run(model, pp, micro, extra, family, vpp, ep, link, FLAGS.get(name, []))
                results[(label, gbps, ep, name)] = r
                hidden = (r["a2a"] - r["exposed"]) / r["a2a"] if r["a2a"] > 0 else 0.0
                rows.append("| %s | %s | %d | %s | %.0f | %.0f | %.0f %% | %.0f | %.1f |" % (
                    label, link_label, ep, name, r["makespan"], r["a2a"], 100 * hidden, r["exposed"], r["peak"] / 2**30))
table = "\n".join(rows)

# ---- the physics ----
for label, _, _, _, _ in MODELS:
    for _, gbps in LINKS:
        for name, _, _ in SCHEDULES:
            r = results[(label, gbps, 1, name)]
            check(r["a2a"] == 0, "%s %s EP 1: no all-to-all (got %g ms)" % (label, name, r["a2a"]))
            check(results[(label, gbps, 8, name)]["peak"] < r["peak"],
                  "%s %s: EP 8 holds less than EP 1 (%d vs %d bytes)" % (label, name, results[(label, gbps, 8, name)]["peak"], r["peak"]))
        for ep in EPS[1:]:
            f1b, dpv = results[(label, gbps, ep, "1F1B")], results[(label, gbps, ep, "DualPipeV")]
            for name in ("1F1B", "interleaved", "ZB-V"):
                r = results[(label, gbps, ep, name)]
                check(abs(r["exposed"] - r["a2a"]) <= 1e-6 * r["a2a"], "%s %s EP %d: nothing overlaps, all exposed" % (label, name, ep))
            for name in ("DualPipeV", "DualPipe", "combined 1F1B", "combined 1F1B, delayed wgrad"):
                r = results[(label, gbps, ep, name)]
                check(r["exposed"] < 0.9 * r["a2a"], "%s %s EP %d at %g GB/s: hides part of its all-to-all (%.0f of %.0f exposed)"
                      % (label, name, ep, gbps, r["exposed"], r["a2a"]))
            check(dpv["exposed"] / dpv["a2a"] < f1b["exposed"] / f1b["a2a"],
                  "%s EP %d at %g GB/s: DualPipeV exposes a smaller share than 1F1B" % (label, ep, gbps))
            # Megatron's combined 1F1B is interleaved 1F1B with its steady steps merged: it exposes
            # less of the same all-to-all, and the step is shorter for it.
            inter, comb = results[(label, gbps, ep, "interleaved")], results[(label, gbps, ep, "combined 1F1B")]
            check(abs(comb["a2a"] - inter["a2a"]) <= 1e-6 * inter["a2a"],
                  "%s EP %d at %g GB/s: combined 1F1B moves interleaved's all-to-all" % (label, ep, gbps))
            check(comb["exposed"] < inter["exposed"] and comb["makespan"] < inter["makespan"],
                  "%s EP %d at %g GB/s: combined 1F1B exposes less than interleaved (%.0f vs %.0f ms) and is faster "
                  "(%.0f vs %.0f ms)" % (label, ep, gbps, comb["exposed"], inter["exposed"], comb["makespan"], inter["makespan"]))
            # --delay-wgrad-compute moves the same all-to-all and hides more of it: each layer's
            # weight gradients run while its dispatch gradient travels instead of before it.
            dly = results[(label, gbps, ep, "combined 1F1B, delayed wgrad")]
            check(abs(dly["a2a"] - comb["a2a"]) <= 1e-6 * comb["a2a"] and dly["exposed"] < comb["exposed"],
                  "%s EP %d at %g GB/s: the delayed weight gradients hide more of the same all-to-all (%.0f vs %.0f ms "
                  "exposed)" % (label, ep, gbps, dly["exposed"], comb["exposed"]))
    slow, fast = LINKS[0][1], LINKS[1][1]
    for ep in EPS[1:]:
        def gap(gbps, key):
            return results[(label, gbps, ep, "1F1B")][key] - results[(label, gbps, ep, "DualPipeV")][key]
        check(gap(fast, "exposed") < gap(slow, "exposed"),
              "%s EP %d: a faster link shrinks the exposed all-to-all DualPipeV saves (%.0f ms at %g GB/s, %.0f at %g)"
              % (label, ep, gap(fast, "exposed"), fast, gap(slow, "exposed"), slow))
        check(gap(fast, "makespan") < gap(slow, "makespan"),
              "%s EP %d: a faster link shrinks the makespan DualPipeV saves over 1F1B (%.0f ms at %g GB/s, %.0f at %g)"
              % (label, ep, gap(fast, "makespan"), fast, gap(slow, "makespan"), slow))

# ---- the table in the docs ----
with open(DOC) as f:
    doc = f.read()
if BEGIN not in doc or END not in doc:
    cli.fail("%s: no %s ... %s block" % (DOC, BEGIN, END))
else:
    head, rest = doc.split(BEGIN, 1)
    old, tail = rest.split(END, 1)
    if WRITE:
        with open(DOC, "w") as f:
            f.write(head + BEGIN + "\n" + table + "\n" + END + tail)
        print("moe_table_cli: wrote the table into " + DOC)
    else:
        check(old.strip() == table.strip(), "%s: the MoE table is not what this build computes; run\n  %s %s %s %s --write\n%s"
              % (DOC, sys.argv[0], EXE, DATA, DOC, table))
cli.finish("moe_table_cli")
