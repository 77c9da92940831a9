#!/usr/bin/env python3
"""PyTorch's iteration-time estimates beside ppsched's DES, on the `_partition.py` workloads.

    pytorch_estimates_cli.py PPSCHED DATA_DIR

tests/data/peers/pytorch_partition/pytorch_estimates.json holds what PyTorch's own simulator
(`simulate_pipeline_schedule` of torch/distributed/pipelining/_partition.py, run unmodified,
tests/data/peers/README.md) returned on each workload's searched partition, with and without
communication, and the per-rank compute order its generator gives each family. docs/model.md
("PyTorch's estimates beside ppsched's") explains each difference; this test derives the
figures it compares with itself, never from ppsched's earlier output:

- `ideal`: the compute-only makespan of the family's order (every step as early as its rank and
  its data allow), the test's own list scheduling;
- `blocking`: the same order as ppsched lowers it, replayed by the test with every P2P step
  waited where it is posted and messages of no bytes (the rebalance workload has none).

Per row: ppsched's compute order is PyTorch's; ideal <= ppsched --overlap-p2p <= PyTorch (PyTorch
has ppsched's dependencies plus one serialised communication chain per rank); PyTorch without
communication equals ideal where its chain adds no wait (common, and the rows listed in
CHAIN_WAIT), else exceeds it by the listed amount. On rebalance (no bytes): ppsched --overlap-p2p
equals ideal, and ppsched's blocking default equals the test's blocking replay.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

EXE, DATA = sys.argv[1], sys.argv[2]
DIR = os.path.join(DATA, "peers", "pytorch_partition")
FAMILY = {"1F1B": ("1f1b", 1), "Interleaved1F1B": ("interleaved-1f1b", 2), "InterleavedZeroBubble": ("interleaved-zb", 2)}
REL = 1e-9
# PyTorch's compute-only estimate above `ideal` (ms of the model file's clock): its send of micro
# k waits on its rank's communication chain for a receive its lockstep lowering put first.
CHAIN_WAIT = {("rebalance", "1F1B"): 18.0, ("rebalance", "Interleaved1F1B"): 15.0,
              ("rebalance", "InterleavedZeroBubble"): 22.0}
cli = Cli(EXE, tmp_prefix="pytorch_estimates_cli.")
check, TMP = cli.check, cli.tmp


def stage_costs(w, counts):
    """Per stage forward, input- and weight-gradient ms, as PyTorch prices them (FLOPs over FLOP/s,
    the backward split floor(B/2) + rest), on the model file's clock."""
    k = 1e3 * w["ppsched_time_scale"] / w["device_compute_throughput"]
    f, bi, bw, i = [], [], [], 0
    for n in counts:
        fl, b = sum(w["forward_flops"][i:i + n]), sum(w["backward_flops"][i:i + n])
        f.append(fl * k), bi.append((b // 2) * k), bw.append((b - b // 2) * k)
        i += n
    return f, bi, bw


def ideal(rows, f, bi, bw):
    """Every compute step in its rank's order, as early as its rank and its data allow."""
    stages, end, pos, free = len(f), {}, [0] * len(rows), [0.0] * len(rows)
    moved = True
    while moved:
        moved = False
        for r, row in enumerate(rows):
            while pos[r] < len(row):
                s, kind, m = re.fullmatch(r"(\d+)([FBIW])(\d+)", row[pos[r]]).groups()
                s, m = int(s), int(m)
                deps = {"F": [("F", s - 1, m)] if s else [],
                        "W": [("I", s, m)]}.get(kind, [("F", s, m)] + ([("G", s + 1, m)] if s + 1 < stages else []))
                if any(d not in end for d in deps):
                    break
                start = max([free[r]] + [end[d] for d in deps])
                free[r] = start + {"F": f[s], "B": bi[s] + bw[s], "I": bi[s], "W": bw[s]}[kind]
                end[(kind, s, m)] = free[r]
                if kind in "BI":
                    end[("G", s, m)] = free[r]  # the input gradient the stage below waits for
                pos[r] += 1
                moved = True
    check(all(pos[r] == len(rows[r]) for r in range(len(rows))), "the compute order stalls")
    return max(free)


def blocking(programs, f, bi, bw):
    """ppsched's lowering replayed with every P2P step waited where posted, messages of no bytes:
    a send leaves when it is posted and its payload's compute finished; a receive returns once
    its send left. Compute is launched without waiting, in order on the rank's stream."""
    pos, host, stream, left = [0] * len(programs), [0.0] * len(programs), [0.0] * len(programs), {}
    moved = True
    while moved:
        moved = False
        for r, prog in enumerate(programs):
            while pos[r] < len(prog):
                st = prog[pos[r]]
                if st is not None:
                    op, s, m = st["op"], st["stage"], st["micro"]
                    if op in ("FWD_SEND", "BWD_SEND"):
                        host[r] = max(host[r], stream[r])
                        left[(op[:3], s, m)] = host[r]
                    elif op in ("FWD_RECV", "BWD_RECV"):
                        key = ("FWD", s - 1, m) if op == "FWD_RECV" else ("BWD", s + 1, m)
                        if key not in left:
                            break
                        host[r] = max(host[r], left[key])
                    else:
                        start = max(host[r], stream[r])
                        stream[r] = start + {"FWD": f[s], "BWD": bi[s] + bw[s], "BWD_INPUT": bi[s], "BWD_WEIGHT": bw[s]}[op]
                pos[r] += 1
                moved = True
    check(all(pos[r] == len(programs[r]) for r in range(len(programs))), "the blocking replay stalls")
    return max(stream)


res = json.load(open(os.path.join(DIR, "pytorch_results.json")))
est = json.load(open(os.path.join(DIR, "pytorch_estimates.json")))
workloads = {w["name"]: w for w in res["workloads"]}
check(len(est["estimates"]) == 18, "18 rows (6 workloads x 3 families)")
for e in est["estimates"]:
    w, kind = workloads[e["workload"]], e["schedule_type"]
    family, vpp = FAMILY[kind]
    name = "%s %s %s" % (e["workload"], kind, ",".join(map(str, e["counts"])))
    shape = ["--pp", str(est["pp"]), "--micro", str(est["micro"])] + (["--vpp", str(vpp)] if vpp > 1 else [])
    sched = os.path.join(TMP, "%s.json" % family)
    if cli.run("generate", family, *shape, "-o", sched).returncode != 0:
        continue
    csv = os.path.join(TMP, "%s.csv" % family)
    if cli.run("convert", sched, "-o", csv, "--csv-kind", "compute_only").returncode != 0:
        continue
    ours = [[c.strip() for c in line.split(",") if c.strip()] for line in open(csv).read().strip().split("\n")]
    theirs = [row.split() for row in est["compute_orders"][kind]]
    check(ours == theirs, "%s: ppsched's compute order is not PyTorch's" % name)
    f, bi, bw = stage_costs(w, e["counts"])
    best = ideal(theirs, f, bi, bw)
    clock = 1e3 * w["ppsched_time_scale"]  # PyTorch's seconds on the model file's clock
    pt, pt_compute = e["iteration_time_s"] * clock, e["iteration_time_no_comm_s"] * clock
    model = os.path.join(DIR, w["model_file"])
    sim = ["simulate", "--generate", family, *shape, "--model", model, "--layout", ",".join(map(str, e["counts"]))]
    out = cli.json(*sim)
    overlap_out = cli.json(*sim, "--overlap-p2p")
    if not out or not overlap_out:
        continue
    default_ms, overlap_ms = out["makespan_ms"], overlap_out["makespan_ms"]
    wait = CHAIN_WAIT.get((e["workload"], kind), None)
    if wait is not None or e["workload"] == "common":
        check(abs(pt_compute - best - (wait or 0.0)) <= REL * best,
              "%s: PyTorch without communication %.9g, the compute-only makespan %.9g + %s" % (name, pt_compute, best, wait or 0))
    check(pt_compute >= best * (1 - REL), "%s: PyTorch without communication %.9g below the compute-only %.9g" % (name, pt_compute, best))
    check(best * (1 - REL) <= overlap_ms <= pt * (1 + REL),
          "%s: ppsched --overlap-p2p %.9g outside [compute-only %.9g, PyTorch %.9g]" % (name, overlap_ms, best, pt))
    if e["workload"] == "rebalance":
        check(abs(overlap_ms - best) <= REL * best, "%s: ppsched --overlap-p2p %.9g, the compute-only makespan %.9g" % (name, overlap_ms, best))
        block = blocking(json.load(open(sched))["programs"], f, bi, bw)
        check(abs(default_ms - block) <= REL * block, "%s: ppsched's blocking default %.9g, the test's blocking replay %.9g" % (name, default_ms, block))
    print("%-52s PyTorch %12.6f (compute %12.6f)  ideal %12.6f  ppsched %12.6f  --overlap-p2p %12.6f" % (
        name, pt, pt_compute, best, default_ms, overlap_ms))

cli.finish("pytorch_estimates_cli")
