#!/usr/bin/env python3
"""Two builds' bench_search alternated, per shape the ratio of their DES search rates.

Runs `--base` and `--new` (bench_search programs) `--rounds` times each, alternating, on the
benchmarks `--filter` selects (BM_DesSearch by default: tune's DES hill climb, moves_per_s;
BM_DesEvaluation reports evals_per_s). Per shape it prints both medians and the median of the
per-round ratios new/base with their range, then the median of those over the shapes per
thread count. A base without the T argument (one thread) is compared with every T of the new
build. docs/performance.md's DES search table was measured with it, ce5b7b3 as the base.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(binary, flt):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "o.json")
        subprocess.run([binary, "--benchmark_filter=" + flt, "--benchmark_out=" + out, "--benchmark_out_format=json"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        with open(out) as f:
            rows = json.load(f)["benchmarks"]
    got = {}
    for x in rows:
        key = x["name"].split("/min_time")[0].split("/real_time")[0]
        if x.get("error_occurred"):
            print(f"{binary}: {key}: {x.get('error_message')}", file=sys.stderr)
            continue
        got[key] = x.get("moves_per_s", x.get("evals_per_s"))
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--filter", default="BM_DesSearch/")
    a = ap.parse_args()
    runs = {"base": [], "new": []}
    for _ in range(a.rounds):
        runs["base"].append(run(a.base, a.filter))
        runs["new"].append(run(a.new, a.filter))
    per_threads = {}
    for key in sorted(runs["new"][0]):
        base_key = key.split("/T:")[0] + "/T:1" if "/T:" in key else key
        pairs = [(n.get(key), b.get(base_key, b.get(key.split("/T:")[0]))) for n, b in zip(runs["new"], runs["base"])]
        pairs = [(n, b) for n, b in pairs if n and b]
        if not pairs:
            continue
        ratios = [n / b for n, b in pairs]
        threads = key.split("/T:")[1] if "/T:" in key else "1"
        per_threads.setdefault(threads, []).append(statistics.median(ratios))
        print(f"{key:40s} base {statistics.median(b for _, b in pairs):10.0f}  new {statistics.median(n for n, _ in pairs):10.0f}"
              f"  ratio {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")
    for t, v in sorted(per_threads.items()):
        print(f"T={t}: median ratio over {len(v)} shapes {statistics.median(v):.3f} (shapes {min(v):.2f}-{max(v):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
