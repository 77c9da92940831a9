#!/usr/bin/env python3
"""`tune --partition search` against PyTorch's partitioner on its own test workloads.

    pytorch_partition_cli.py PPSCHED DATA_DIR

tests/data/peers/pytorch_partition/ holds what PyTorch's `optimize_partition_model_layers`
(torch/distributed/pipelining/_partition.py, PR 179212) returned on the six workloads of its test
file, P=4, M=8, for 1F1B, Interleaved1F1B (V=2) and InterleavedZeroBubble (V=2), and each
workload as a ppsched model file with explicit layers (tests/data/peers/README.md). Per workload
and family, under ppsched's DES and the same model:

- the family on PyTorch's partition (`simulate --generate FAMILY --layout <PyTorch's counts>`);
- `tune --partition search --family FAMILY --placement loop` (deterministic: --seconds 0, bounded
  iterations): its best, and the family's own order on the layout it found, are each at most the
  family on PyTorch's partition.

The model files must say what PyTorch was given (FLOPs, boundary bytes, FLOP/s, bytes/s).
"""
import json
import os
import subprocess
import sys

EXE, DATA = sys.argv[1], sys.argv[2]
DIR = os.path.join(DATA, "peers", "pytorch_partition")
TUNE_FLAGS = ["--seconds", "0", "--iterations", "300", "--des-iterations", "20", "--threads", "1", "-q"]
LOOP = ["--placement", "loop"]  # PyTorch's stage placement, which the counts of V = 2 assume
REL = 1e-9
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def jrun(*args):
    p = subprocess.run([EXE] + list(args) + ["--json"], capture_output=True, text=True)
    if p.returncode != 0:
        failures.append("%s: exit %d\n%s%s" % (" ".join(args), p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
        return None
    return json.loads(p.stdout)


def shape(res, fam):
    return ["--pp", str(res["pp"]), "--micro", str(res["micro"])] + (["--vpp", str(fam["vpp"])] if fam["vpp"] > 1 else [])


def family_ms(model, res, fam, counts):
    d = jrun("simulate", "--generate", fam["ppsched_family"], *shape(res, fam), "--model", model,
             "--layout", ",".join(map(str, counts)))
    return d["makespan_ms"] if d else float("inf")


res = json.load(open(os.path.join(DIR, "pytorch_results.json")))
check(len(res["workloads"]) == 6 and all(len(w["families"]) == 3 for w in res["workloads"]), "6 workloads x 3 families")
for w in res["workloads"]:
    model = os.path.join(DIR, w["model_file"])
    m = json.load(open(model))
    # The model file says what PyTorch was given: forward FLOPs, backward = input + weight
    # gradients, the boundary bytes after each layer, FLOP/s and bytes/s (both over the scale).
    layers = m["layers"]
    check([l["fwd_flops"] for l in layers] == w["forward_flops"], "%s: forward FLOPs" % w["name"])
    check([l["bwd_input_flops"] + l["bwd_weight_flops"] for l in layers] == w["backward_flops"], "%s: backward FLOPs" % w["name"])
    check([l["output_bytes"] for l in layers] == w["communication_volume"] + [0], "%s: boundary bytes" % w["name"])
    scale = w["ppsched_time_scale"]
    check(abs(m["device"]["flops_per_s"] * scale / w["device_compute_throughput"] - 1) < 1e-12 and m["device"]["mfu"] == 1,
          "%s: FLOP/s" % w["name"])
    check(abs(m["link"]["bandwidth_GBps"] * 1e9 * scale / w["network_bandwidth"] - 1) < 1e-12 and m["link"]["latency_ms"] == 0,
          "%s: bytes/s" % w["name"])
    for fam in w["families"]:
        name = "%s %s" % (w["name"], fam["ppsched_family"])
        check(sum(fam["best_counts"]) == len(layers) and len(fam["best_counts"]) == res["pp"] * fam["vpp"],
              "%s: PyTorch's partition covers the layers" % name)
        theirs = family_ms(model, res, fam, fam["best_counts"])
        t = jrun("tune", *shape(res, fam), "--model", model, "--partition", "search", "--family", fam["ppsched_family"],
                 *LOOP, *TUNE_FLAGS)
        if not t:
            continue
        ours = family_ms(model, res, fam, t["layout"])
        check(ours <= theirs * (1 + REL),
              "%s: the family's order on ppsched's layout %s takes %.9g ms, above PyTorch's partition %s: %.9g ms" % (
                  name, t["layout"], ours, fam["best_counts"], theirs))
        check(t["makespan_ms"] <= theirs * (1 + REL),
              "%s: tune's best %.9g ms (layout %s) above the family on PyTorch's partition %s: %.9g ms" % (
                  name, t["makespan_ms"], t["layout"], fam["best_counts"], theirs))
        print("%-40s PyTorch %-26s %14.9g ms   ppsched %-26s %14.9g ms (family) %14.9g ms (%s)" % (
            name, ",".join(map(str, fam["best_counts"])), theirs, ",".join(map(str, t["layout"])), ours,
            t["makespan_ms"], t["best"]))

for f in failures:
    print("FAIL", f)
print("%d failures" % len(failures))
sys.exit(1 if failures else 0)
