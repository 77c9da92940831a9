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
  iterations): its best (what it minimises: the family's variants and the F/I/W orders it found,
  each on its layout) is at most the family on PyTorch's partition.

Where a V has at most --partition-layouts (400) layouts, the search times every one, PyTorch's
among them, so that comparison cannot fail there (every V = 1 row, and V = 2 on 8 layers). There
the test judges the search against an optimum it finds itself: it enumerates the search's space
(docs/model.md: every split of the layers in order, each middle stage holding a layer when there
are at least as many layers as stages, the first and last stage possibly empty), times the
family on every layout with `compare` (a layout's score is the DES makespan of the family's best
variant -- interleaved-1f1b's --less-memory, --overlap-b-f, --dxdw-split --, the objective the
search claims to minimise; the enumeration and the minimum are the test's, not the search's
code), and requires tune to have weighed those variants and timed that many layouts, and the
family's best variant on tune's layout to take the smallest of those times.

The model files must say what PyTorch was given (FLOPs, boundary bytes, FLOP/s, bytes/s).
"""
import itertools
import json
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

EXE, DATA = sys.argv[1], sys.argv[2]
DIR = os.path.join(DATA, "peers", "pytorch_partition")
TUNE_FLAGS = ["--seconds", "0", "--iterations", "300", "--des-iterations", "20", "--threads", "1", "-q"]
LOOP = ["--placement", "loop"]  # PyTorch's stage placement, which the counts of V = 2 assume
REL = 1e-9
LAYOUT_BUDGET = 400  # tune's --partition-layouts default: a V with at most this many layouts is timed whole
# The orders a family stands for in tune (docs/schedules.md's options of each family).
VARIANTS = {"1f1b": [[]], "interleaved-1f1b": [[], ["--less-memory"], ["--overlap-b-f"], ["--overlap-b-f", "--dxdw-split"]],
            "interleaved-zb": [[]]}
cli = Cli(EXE, tmp_prefix="pytorch_partition_cli.")
TMP, check = cli.tmp, cli.check


def shape(res, fam):
    return ["--pp", str(res["pp"]), "--micro", str(res["micro"])] + (["--vpp", str(fam["vpp"])] if fam["vpp"] > 1 else [])


def family_ms(model, res, fam, counts):
    d = cli.json("simulate", "--generate", fam["ppsched_family"], *shape(res, fam), "--model", model,
                 "--layout", ",".join(map(str, counts)))
    return d["makespan_ms"] if d else float("inf")


def layouts(layers, stages):
    """Every split of `layers` layers, in order, over `stages` stages: every middle stage holds a
    layer when there are at least as many layers as stages, the first and last may hold none."""
    low = [0] + [1 if layers >= stages else 0] * (stages - 2) + [0]
    free = layers - sum(low)
    for cuts in itertools.combinations(range(free + stages - 1), stages - 1):  # stars and bars
        ends = (-1,) + cuts + (free + stages - 1,)
        yield [low[i] + ends[i + 1] - ends[i] - 1 for i in range(stages)]


def variant_files(res, fam):
    """The family's variants as schedule files, generated once."""
    files = []
    for k, flags in enumerate(VARIANTS[fam["ppsched_family"]]):
        path = os.path.join(TMP, "%s_v%d_%d.json" % (fam["ppsched_family"], fam["vpp"], k))
        if not os.path.exists(path):
            cli.run("generate", fam["ppsched_family"], *shape(res, fam), *flags, "-o", path)
        files.append(path)
    return files


def best_variant_ms(model, files, counts):
    """The fastest of the family's variants on a layout, timed by `compare` (one process)."""
    d = cli.json("compare", *files, "--model", model, "--layout", ",".join(map(str, counts)))
    return min(r["makespan_ms"] for r in d if r["ok"]) if d else float("inf")


def optimum(model, res, fam, space):
    """The smallest makespan of the family's best variant over `space`, and the layouts that
    take it."""
    files = variant_files(res, fam)
    with ThreadPoolExecutor(max(2, os.cpu_count() or 1)) as pool:
        times = list(pool.map(lambda counts: best_variant_ms(model, files, counts), space))
    best = min(times)
    return best, [c for c, t in zip(space, times) if t <= best * (1 + REL)]


res = json.load(open(os.path.join(DIR, "pytorch_results.json")))
exhaustive_rows = 0
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
        t = cli.json("tune", *shape(res, fam), "--model", model, "--partition", "search", "--family", fam["ppsched_family"],
                     *LOOP, *TUNE_FLAGS)
        if not t:
            continue
        ours = family_ms(model, res, fam, t["layout"])
        space = list(layouts(len(layers), res["pp"] * fam["vpp"]))
        if len(space) <= LAYOUT_BUDGET:
            exhaustive_rows += 1
            best, argmin = optimum(model, res, fam, space)
            weighed = sorted({e["name"] for e in t["leaderboard"] if e["origin"] == "family" and not e["name"].startswith("found")})
            want = sorted(" ".join([fam["ppsched_family"]] + v + (["V=%d" % fam["vpp"]] if fam["vpp"] > 1 else []))
                          for v in VARIANTS[fam["ppsched_family"]])
            check(weighed == want, "%s: tune weighed the family's orders %s, the test's optimum %s" % (name, weighed, want))
            check(t["partition"]["layouts_evaluated"] == len(space),
                  "%s: tune timed %d layouts, the space has %d" % (name, t["partition"]["layouts_evaluated"], len(space)))
            check(t["layout"] in space, "%s: tune's layout %s is outside the search's space" % (name, t["layout"]))
            on_ours = best_variant_ms(model, variant_files(res, fam), t["layout"])
            check(on_ours <= best * (1 + REL),
                  "%s: the family's best variant on ppsched's layout %s takes %.9g ms, above the optimum over all %d "
                  "layouts, %.9g ms at %s" % (name, t["layout"], on_ours, len(space), best, argmin))
            print("%-40s the best of all %d layouts: %.9g ms at %s" % (name, len(space), best, argmin))
        # What tune minimises is its best schedule over everything it timed (the family's variants
        # and the F/I/W orders it found), so that is what is judged against PyTorch's partition;
        # the family's own order on tune's layout is printed, not judged (on heuristic_interleaved's
        # interleaved-1f1b it takes 1718.15 ms there against 1717.77 on PyTorch's partition, while
        # tune's best on that layout, an F/I/W order, takes 1585.56). Where the space is timed
        # whole, the family's best variant on tune's layout is judged against the optimum above.
        check(t["makespan_ms"] <= theirs * (1 + REL),
              "%s: tune's best %.9g ms (layout %s) above the family on PyTorch's partition %s: %.9g ms" % (
                  name, t["makespan_ms"], t["layout"], fam["best_counts"], theirs))
        print("%-40s PyTorch %-26s %14.9g ms   ppsched %-26s %14.9g ms (family) %14.9g ms (%s)" % (
            name, ",".join(map(str, fam["best_counts"])), theirs, ",".join(map(str, t["layout"])), ours,
            t["makespan_ms"], t["best"]))

check(exhaustive_rows == 14, "%d rows timed whole, expected 14 (the six V = 1 rows, V = 2 on the four 8-layer "
      "workloads)" % exhaustive_rows)
shutil.rmtree(TMP, ignore_errors=True)
cli.finish("pytorch_partition_cli")
