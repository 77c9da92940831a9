#!/usr/bin/env python3
"""`ppsched show --compute` and `ppsched show --timeline` (issue 23, item 6), end to end.

    show_views.py PPSCHED

--compute: the compute steps of each rank in program order, communication left out (PyTorch
pipelining's compute-only view), pinned exactly for 1F1B at P = 4, M = 4. --timeline: the
simulated run as a grid of one column per time unit (PyTorch's schedule visualizer), pinned
exactly under a cost file of FWD 10 ms and BWD 20 or 30 ms; 1F1B's warm-up staircase (rank r's
first compute, F0, in column r) under the default costs; every compute step shown, in program
order; --unit, --width and --json acting; the flags that do not apply refused (exit 2).
"""
import json
import os
import re
import sys

EXE = sys.argv[1]
ENV = {k: v for k, v in os.environ.items() if k != "COLUMNS"}


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

cli = Cli(EXE, env=ENV, tmp_prefix="ppsched_show_")
run, check, tmp, write = cli.run, cli.check, cli.tmp, cli.write


def rows(text):
    """The grid's rank rows ("r0 | ..."), in order."""
    return [l for l in text.splitlines() if re.match(r"r\d+ \|", l)]


p4m4 = os.path.join(tmp, "1f1b_p4_m4.json")
p4m8 = os.path.join(tmp, "1f1b_p4_m8.json")
inter = os.path.join(tmp, "interleaved_p2_v2_m4.json")
run("generate", "1f1b", "--pp", "4", "--micro", "4", "-o", p4m4)
run("generate", "1f1b", "--pp", "4", "--micro", "8", "-o", p4m8)
run("generate", "interleaved-1f1b", "--pp", "2", "--vpp", "2", "--micro", "4", "-o", inter)
costs_b20 = write("f10_b20.json", json.dumps({"format": "ppsched-costs", "version": 1, "compute": {"FWD": 10, "BWD": 20}}))
costs_b30 = write("f10_b30.json", json.dumps({"format": "ppsched-costs", "version": 1, "compute": {"FWD": 10, "BWD": 30}}))

# ---- --compute: exactly ----
COMPUTE_P4_M4 = """\
1f1b: 4 ranks, 4 stages (loop), 4 micro-batches, compute steps only, in program order (communication left out)
     compute step 0..7
r0 | F0s0 F1s0 F2s0 F3s0 B0s0 B1s0 B2s0 B3s0
r1 | F0s1 F1s1 F2s1 B0s1 F3s1 B1s1 B2s1 B3s1
r2 | F0s2 F1s2 B0s2 F2s2 B1s2 F3s2 B2s2 B3s2
r3 | F0s3 B0s3 F1s3 B1s3 F2s3 B2s3 F3s3 B3s3
legend: <short><micro>s<stage>; F=FWD; B=BWD
"""
got = run("show", p4m4, "--compute", "--width", "120").stdout
check(got == COMPUTE_P4_M4, "show --compute of 1f1b P=4 M=4:\n%s\nexpected:\n%s" % (got, COMPUTE_P4_M4))
got = run("show", p4m4, "--compute", "--max-steps", "2", "--width", "120").stdout
check(rows(got) == ["r0 | F0s0 F1s0", "r1 | F0s1 F1s1", "r2 | F0s2 F1s2", "r3 | F0s3 B0s3"],
      "show --compute --max-steps 2 counts compute steps: %r" % rows(got))
check("(showing the first 2 compute steps of each rank)" in got, "--max-steps says what it left out: %r" % got)
doc = json.loads(run("show", p4m4, "--compute", "--json").stdout)
check(doc.get("view") == "compute" and doc["ranks"][3] == ["F0s3", "B0s3", "F1s3", "B1s3", "F2s3", "B2s3", "F3s3", "B3s3"],
      "show --compute --json: %r" % doc)
# The program view is unchanged: communication and all.
plain = run("show", p4m4, "--width", "120").stdout
check("FS0s0" in plain and "legend: <short><micro>s<stage>; F=FWD; B=BWD; FS=FWD_SEND" in plain and ".=idle" in plain,
      "show without a view flag prints the program as before: %r" % plain[:600])

# ---- --timeline: exactly, under a cost file ----
TIMELINE_B20 = [
    "r0 | F0 F1 F2 F3 .  .  .  .  .  .  B0 B0 .  B1 B1 .  B2 B2 .  B3 B3",
    "r1 | .  F0 F1 F2 .  .  .  .  B0 B0 F3 B1 B1 .  B2 B2 .  B3 B3 .  .",
    "r2 | .  .  F0 F1 .  .  B0 B0 F2 B1 B1 F3 B2 B2 .  B3 B3 .  .  .  .",
    "r3 | .  .  .  F0 B0 B0 F1 B1 B1 F2 B2 B2 F3 B3 B3 .  .  .  .  .  .",
]
TIMELINE_B30 = [
    "r0 | F0 F1 F2 F3 .  .  .  .  .  .  .  .  .  B0 B0 B0 .  B1 B1 B1 .  B2 B2 B2 .  B3 B3 B3",
    "r1 | .  F0 F1 F2 .  .  .  .  .  .  B0 B0 B0 F3 B1 B1 B1 .  B2 B2 B2 .  B3 B3 B3 .  .  .",
    "r2 | .  .  F0 F1 .  .  .  B0 B0 B0 F2 B1 B1 B1 F3 B2 B2 B2 .  B3 B3 B3 .  .  .  .  .  .",
    "r3 | .  .  .  F0 B0 B0 B0 F1 B1 B1 B1 F2 B2 B2 B2 F3 B3 B3 B3 .  .  .  .  .  .  .  .  .",
]
for costs, want, makespan in [(costs_b20, TIMELINE_B20, "210.000"), (costs_b30, TIMELINE_B30, "280.000")]:
    got = run("show", p4m4, "--timeline", "--costs", costs, "--width", "120").stdout
    check(rows(got) == want, "show --timeline --costs %s:\n%s\nexpected rows:\n%s" % (costs, got, "\n".join(want)))
    check("simulated makespan %s ms" % makespan in got and "one column = 10.000 ms (the shortest compute step)" in got
          and "costs: " + costs in got, "the timeline's header: %r" % got[:400])
    check("a cell is the compute step running at the middle of its column" in got, "the timeline's legend: %r" % got[-400:])

# ---- --timeline under the default costs (as simulate prices it): the staircase ----
got = run("show", p4m8, "--timeline", "--width", "400").stdout
grid = [r.split(" | ")[1].split() for r in rows(got)]
check(len(grid) == 4, "4 rank rows: %r" % got)
sim = run("simulate", p4m8).stdout
m = re.search(r"makespan ([\d.]+) ms", sim)
check(m is not None and ("simulated makespan %s ms" % m.group(1)) in got,
      "the timeline's makespan is simulate's: %r vs %r" % (got[:300], sim[:200]))
for r, cells in enumerate(grid):
    first = next((k for k, c in enumerate(cells) if c != "."), None)
    check(first == r and cells[first] == "F0", "1F1B's staircase: rank %d's first compute is %r in column %r" %
          (r, cells[first] if first is not None else None, first))
# Every compute step shows, in program order (the compute view's, stage left out on one-stage ranks).
compute = json.loads(run("show", p4m8, "--compute", "--json").stdout)["ranks"]
for r, cells in enumerate(grid):
    runs = [c for k, c in enumerate(cells) if c != "." and (k == 0 or cells[k - 1] != c)]
    check(runs == [re.sub(r"s\d+$", "", l) for l in compute[r]], "rank %d: timeline order %r, program order %r" % (r, runs, compute[r]))
tl = json.loads(run("show", p4m8, "--timeline", "--json").stdout)
check(tl.get("view") == "timeline" and tl["ranks"] == grid and tl["hidden_steps"] == 0 and tl["columns"] == len(grid[0]),
      "show --timeline --json is the text grid: %r" % {k: v for k, v in tl.items() if k != "ranks"})
# A rank of several stages names them; the order is still the program's.
got = run("show", inter, "--timeline", "--width", "400").stdout
icompute = json.loads(run("show", inter, "--compute", "--json").stdout)["ranks"]
for r, row in enumerate(rows(got)):
    cells = row.split(" | ")[1].split()
    runs = [c for k, c in enumerate(cells) if c != "." and (k == 0 or cells[k - 1] != c)]
    check(runs == icompute[r], "interleaved rank %d: timeline %r, program %r" % (r, runs, icompute[r]))

# --unit: a coarser column hides the short steps, and says so; --width wraps.
got = run("show", p4m8, "--timeline", "--unit", "100").stdout
check("one column = 100.000 ms (--unit)" in got and "12 columns" in got, "--unit 100 acts: %r" % got[:300])
check(re.search(r"\(\d+ of 64 compute steps are shorter than a column", got) is not None, "hidden steps are said: %r" % got)
got = run("show", p4m8, "--timeline", "--width", "40").stdout
check(all(len(l) <= 40 for l in got.splitlines()), "--width 40: %r" % [l for l in got.splitlines() if len(l) > 40])
check(len(rows(got)) > 4 and got.count("     column ") > 1, "--width 40 wraps the columns into blocks: %r" % got[:500])
# The run flags act: --comm eager changes nothing visible here, --memory-budget judges the run.
run("show", p4m4, "--timeline", "--memory-budget", "1MiB", expect=1)

# ---- refusals ----
cli.refused(["show", p4m4, "--compute", "--timeline"], "--compute", "--timeline", silent=True)
cli.refused(["show", p4m4, "--timeline", "--max-steps", "3"], "--max-steps", silent=True)
cli.refused(["show", p4m4, "--timeline", "--no-idle"], "--no-idle", silent=True)
cli.refused(["show", p4m4, "--timeline", "--summary"], "--summary", silent=True)
cli.refused(["show", p4m4, "--compute", "--no-idle"], "--no-idle", silent=True)
cli.refused(["show", p4m4, "--compute", "--summary"], "--summary", silent=True)
cli.refused(["show", p4m4, "--unit", "10"], "--unit", "--timeline", silent=True)
cli.refused(["show", p4m4, "--compute", "--unit", "10"], "--unit", "--timeline", silent=True)
cli.refused(["show", p4m4, "--costs", costs_b20], "--costs", "--timeline", silent=True)
cli.refused(["show", p4m4, "--compute", "--comm", "eager"], "--comm", "--timeline", silent=True)
cli.refused(["show", p4m4, "--dp", "2"], "--dp", "--timeline", silent=True)
cli.refused(["show", p4m4, "--timeline", "--unit", "0.00001"], "--unit", "columns", silent=True)
cli.refused(["show", p4m4, "--timeline", "--unit", "0"], "--unit", silent=True)
h = run("show", "--help").stdout
for flag in ["--compute", "--timeline", "--unit", "--costs", "--model"]:
    check(flag in h, "show --help has no %s" % flag)

cli.finish("show_views")
