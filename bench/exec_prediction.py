#!/usr/bin/env python3
"""How well a calibrated model predicts a real run, per family and runtime mode (issue 11,
item 7). For each cell of the executor's matrix (tests/exec/matrix.py): run it on Gloo with
--trace (two iterations; the last one is traced), fit a cost model to the trace with
`ppsched calibrate`, predict the same schedule in the mode the trace says ran (`calibrate
--schedule`), and compare with the traced iteration's makespan. Repeated --runs times; prints the
errors and their median |error| per cell, and with --json one JSON document.

A measurement, not a test: run it on a quiet machine (nothing else on the cores), e.g.
  bench/exec_prediction.py --exe build/tools/ppsched-exec --ppsched build/tools/ppsched \\
      --pp 2 --runs 5
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "exec"))
import matrix  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# The model of the PP=2 prediction case (tests/exec/exec_cases.py): large enough that compute,
# not Python or process overhead, fills the iteration.
MODEL = ["--model", "gpt", "--layers", "8", "--hidden", "128", "--heads", "2", "--seq", "32", "--vocab", "64",
         "--micro-batch-size", "2"]


def run(cmd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout


def one(args, c, flags, tmp, keep=None):
    """One measured run of cell `c` in mode `flags`: (measured ms, predicted ms). With `keep` (a
    folder), the schedule and the trace are copied there, to fit them again later."""
    sched = c.schedule
    if sched is None:
        sched = os.path.join(tmp, "sched.json")
        run([args.ppsched, "generate"] + c.generate + ["-o", sched])
    trace = os.path.join(tmp, "run.trace.json")
    costs = os.path.join(tmp, "costs.json")
    run([sys.executable, args.launcher, str(args.pp), "--", args.exe, "--schedule", sched] + MODEL + c.model + flags +
        ["--iterations", "2", "--trace", trace, "--cpu-bind", args.cpu_bind])
    # calibrate --schedule predicts in the mode the trace says ran (otherData.mode: --comm eager
    # runs with the transports' blocking sends, a rendezvous run).
    cal = json.loads(run([args.ppsched, "calibrate", trace, "-o", costs, "--schedule", sched, "--json",
                          "--statistic", args.statistic]))
    if keep:
        os.makedirs(keep, exist_ok=True)
        shutil.copy(sched, os.path.join(keep, "sched.json"))
        n = len([f for f in os.listdir(keep) if f.endswith(".trace.json")])
        shutil.copy(trace, os.path.join(keep, f"run{n}.trace.json"))
    return cal["prediction"]["measured_ms"], cal["prediction"]["predicted_ms"]


# Out of sample (issue 22, item 4): fit once on a traced 1F1B run, predict runs the fit never
# saw. Each target: (name, generate flags). Its layout is what the executor ran, read from the
# target's own trace (otherData.layers), so that the prediction prices the same split.
OUT_OF_SAMPLE_FIT = ["1f1b", "--micro", "8"]
OUT_OF_SAMPLE_TARGETS = [
    ("1f1b M=8 (noise floor: another run of the fitted schedule)", ["1f1b", "--micro", "8"]),
    ("gpipe M=8", ["gpipe", "--micro", "8"]),
    ("zb-h1 M=8", ["zb-h1", "--micro", "8"]),
    ("1f1b M=16", ["1f1b", "--micro", "16"]),
    ("interleaved-1f1b V=2 M=8", ["interleaved-1f1b", "--vpp", "2", "--micro", "8"]),
    ("zbv M=8", ["zbv", "--vpp", "2", "--micro", "8"]),
    ("dualpipev M=8", ["dualpipev", "--vpp", "2", "--micro", "8"]),
    ("1f1b M=8, uneven layout 3+5 (ppsched-exec --layout 3,5)", ["1f1b", "--micro", "8"], ["--layout", "3,5"]),
]


def trace_makespan(path):
    """The traced iteration's makespan: first slice start to last slice end (ms)."""
    with open(path) as f:
        doc = json.load(f)
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    return (max(e["ts"] + e["dur"] for e in xs) - min(e["ts"] for e in xs)) / 1e3, doc["otherData"]


def traced_counts(other, model):
    """The body-layer counts per stage of a traced run (otherData.layers), as --layout takes them."""
    body = {layer["name"] for layer in model["layers"] if layer.get("kind") not in ("embedding", "head")}
    stages = sorted(other["layers"], key=lambda e: e["stage"])
    return ",".join(str(sum(1 for n in st["layers"] if n in body)) for st in stages)


def exec_run(args, sched, trace, extra=()):
    run([sys.executable, args.launcher, str(args.pp), "--", args.exe, "--schedule", sched] + MODEL +
        ["--iterations", "2", "--trace", trace, "--cpu-bind", args.cpu_bind] + list(extra))


def out_of_sample(args):
    """Per repetition: one fit run, then every target run back to back; each target predicted
    from the fit (calibrate --model with the executor's own model file) and measured."""
    errors = {t[0]: [] for t in OUT_OF_SAMPLE_TARGETS}
    measured = {t[0]: [] for t in OUT_OF_SAMPLE_TARGETS}
    in_sample = []
    with tempfile.TemporaryDirectory() as tmp:
        scheds = {}
        for name, gen, *_ in [("fit", OUT_OF_SAMPLE_FIT)] + OUT_OF_SAMPLE_TARGETS:
            scheds[name] = os.path.join(tmp, f"{len(scheds)}.json")
            run([args.ppsched, "generate"] + gen + ["--pp", str(args.pp), "-o", scheds[name]])
        model_file = os.path.join(tmp, "model.json")
        for rep in range(args.runs):
            fit_trace = os.path.join(tmp, "fit.trace.json")
            exec_run(args, scheds["fit"], fit_trace, ["--model-out", model_file])
            with open(model_file) as f:
                model = json.load(f)
            cal = json.loads(run([args.ppsched, "calibrate", fit_trace, "--model", model_file, "--schedule",
                                  scheds["fit"], "--json"]))
            in_sample.append(cal["prediction"]["predicted_ms"] / cal["prediction"]["measured_ms"] - 1)
            for name, _, *exec_flags in OUT_OF_SAMPLE_TARGETS:
                trace = os.path.join(tmp, "target.trace.json")
                exec_run(args, scheds[name], trace, exec_flags[0] if exec_flags else ())
                ms, other = trace_makespan(trace)
                pred = json.loads(run([args.ppsched, "calibrate", fit_trace, "--model", model_file, "--schedule",
                                       scheds[name], "--layout", traced_counts(other, model), "--json"]))
                errors[name].append(pred["prediction"]["predicted_ms"] / ms - 1)
                measured[name].append(ms)
            if not args.json:
                print(f"repetition {rep + 1}: in-sample {100 * in_sample[-1]:+.1f} %; " +
                      "; ".join(f"{t[0].split(' (')[0]} {100 * errors[t[0]][-1]:+.1f} %" for t in OUT_OF_SAMPLE_TARGETS),
                      flush=True)
    cells = [{"target": n, "errors": errors[n], "median_abs_error": statistics.median(abs(e) for e in errors[n]),
              "measured_ms": measured[n]} for n, *_ in OUT_OF_SAMPLE_TARGETS]
    load = os.getloadavg()
    if args.json:
        print(json.dumps({"pp": args.pp, "runs": args.runs, "fit": " ".join(OUT_OF_SAMPLE_FIT), "model": MODEL,
                          "in_sample_errors": in_sample, "cells": cells, "load_average": load}, indent=1))
    else:
        print(f"fit: {' '.join(OUT_OF_SAMPLE_FIT)} PP={args.pp} (per-layer: calibrate --model, the executor's "
              f"--model-out); in-sample median |error| {100 * statistics.median(abs(e) for e in in_sample):.1f} %")
        for c in cells:
            print(f"  {c['target']:58s} median |error| {100 * c['median_abs_error']:5.1f} %   runs: " +
                  " ".join(f"{100 * e:+.1f}" for e in c["errors"]) +
                  f"   (measured {statistics.median(c['measured_ms']):.1f} ms)")
        print(f"load average now {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", default=os.path.join(ROOT, "build", "tools", "ppsched-exec"))
    ap.add_argument("--ppsched", default=os.path.join(ROOT, "build", "tools", "ppsched"))
    ap.add_argument("--launcher", default=os.path.join(ROOT, "tools", "launch-local"))
    ap.add_argument("--data", default=os.path.join(ROOT, "tests", "data"))
    ap.add_argument("--pp", type=int, default=2, choices=(2, 4))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--micro", type=int, default=8, help="micro-batches of the generated cells (default 8)")
    ap.add_argument("--modes", default=",".join(matrix.MATRIX_MODES), help="comma-separated (default: all)")
    ap.add_argument("--families", default="", help="comma-separated (default: every family of each mode)")
    ap.add_argument("--statistic", default="mean", choices=("median", "mean"),
                    help="calibrate's per-stage step time (default: mean, calibrate's default)")
    ap.add_argument("--cpu-bind", default="auto", choices=("auto", "none", "blocks"),
                    help="ppsched-exec --cpu-bind (default auto: at PP=2 on two cores each rank gets a core of its own; "
                         "none shows what the OS's placement costs the prediction)")
    ap.add_argument("--keep", default="", help="copy each cell's schedule and traces to KEEP/<mode>/<family>/")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out-of-sample", action="store_true",
                    help="fit one traced 1F1B run per repetition (per-layer, with the executor's model file) and "
                         "predict other families, V, micro-batch counts and another run of the same schedule")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.out_of_sample:
        return out_of_sample(args)
    only = set(f for f in args.families.split(",") if f)
    results = []
    t0 = time.monotonic()
    for mode in args.modes.split(","):
        flags, families = matrix.MATRIX_MODES[mode]
        for fam in families:
            if only and fam not in only:
                continue
            c = matrix.cell(fam, args.pp, args.data, micro=args.micro)
            errors, pairs = [], []
            with tempfile.TemporaryDirectory() as tmp:
                for _ in range(args.runs):
                    keep = os.path.join(args.keep, mode, fam) if args.keep else None
                    measured, predicted = one(args, c, flags, tmp, keep)
                    pairs.append((measured, predicted))
                    errors.append(predicted / measured - 1)
            med = statistics.median(abs(e) for e in errors)
            results.append({"mode": mode, "family": fam, "pp": args.pp, "errors": errors, "median_abs_error": med,
                            "measured_ms": [m for m, _ in pairs], "predicted_ms": [p for _, p in pairs]})
            if not args.json:
                print(f"{mode:18s} {fam:26s} PP={args.pp} median |error| {100 * med:5.1f} %   runs: " +
                      " ".join(f"{100 * e:+.1f}" for e in errors) +
                      f"   (measured {statistics.median(m for m, _ in pairs):.1f} ms)", flush=True)
    load = os.getloadavg()
    if args.json:
        print(json.dumps({"pp": args.pp, "runs": args.runs, "cpu_bind": args.cpu_bind, "load_average": load,
                          "cells": results}, indent=1))
    else:
        within = sum(1 for r in results if r["median_abs_error"] <= 0.03)
        print(f"{within} of {len(results)} cells within 3 % (median |error| over {args.runs} runs, --cpu-bind "
              f"{args.cpu_bind}); "
              f"{time.monotonic() - t0:.0f} s; load average now {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
