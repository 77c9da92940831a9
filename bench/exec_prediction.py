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
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
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
