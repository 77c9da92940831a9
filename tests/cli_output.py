#!/usr/bin/env python3
"""What the commands say (issue 23, items 3 and 5), end to end.

    cli_output.py PPSCHED DATA_DIR

A compute-only program in JSON gets its P2P steps as a compute-only CSV does, and the output
says so; a file with some P2P steps is judged as written. The critical path names each P2P
entry as meta or payload; tune prints the bound's name and value (the formula with --explain),
whole words, aligned columns at 8 ranks, one "search from", where each entry comes from; check
notes FSDP steps checked without --dp; "bubble" has one definition, in
the legend of simulate, compare and tune; compare and check name a Chrome trace or a cost file
given as a schedule.
"""
import json
import os
import re
import sys

EXE, DATA = sys.argv[1], sys.argv[2]
BUBBLE = "bubble: a rank's idle time over the run's span"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

cli = Cli(EXE, tmp_prefix="ppsched_output_")
run, check, tmp, write = cli.run, cli.check, cli.tmp, cli.write


# ---- item 3: one rule for compute-only JSON and CSV ----
order = [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]]
doc = {"format": "ppsched-schedule", "version": 1, "name": "hand", "ranks": 2, "stages": 2, "micro_batches": 2,
       "placement": "loop", "programs": order}
hand_json = write("hand.json", json.dumps(doc))
hand_csv = write("hand.csv", "\n".join(",".join(row) for row in order) + "\n")
inserted = {}
for path in [hand_json, hand_csv]:
    p = run("check", path)
    check("verified" in p.stdout, "%s: a compute-only order verifies: %s" % (path, p.stdout[-500:]))
    m = re.search(r"no communication steps: inserted (\d+) by the column scan", p.stderr)
    check(m is not None, "%s: the output says the P2P steps were inserted: %r" % (path, p.stderr))
    inserted[path] = int(m.group(1)) if m else -1
check(inserted[hand_json] == inserted[hand_csv] == 8, "JSON and CSV get the same 8 P2P steps: %r" % inserted)
a, b = os.path.join(tmp, "a.json"), os.path.join(tmp, "b.json")
run("convert", hand_json, "-o", a)
run("convert", hand_csv, "-o", b)
ja, jb = json.load(open(a)), json.load(open(b))
check(ja["programs"] == jb["programs"], "JSON and CSV read to the same programs")
# Some P2P steps, others missing: judged as written (violations, nothing inserted).
mixed = dict(doc)
mixed["programs"] = [["0F0", {"op": "FWD_SEND", "micro": 0, "stage": 0}, "0F1", "0B0", "0B1"],
                     ["1F0", "1B0", "1F1", "1B1"]]
mixed_json = write("mixed.json", json.dumps(mixed))
p = run("check", mixed_json, expect=1)
check("inserted" not in p.stderr, "a file with some P2P steps is taken as written: %r" % p.stderr)
check("violation" in p.stdout, "... and judged: %s" % p.stdout[:300])

# ---- item 5: the critical path names meta and payload ----
sched = os.path.join(tmp, "1f1b.json")
run("generate", "1f1b", "--pp", "4", "--micro", "8", "-o", sched)
p = run("simulate", sched, "--dyn-shape")
line = next((l for l in p.stdout.splitlines() if "critical path:" in l), "")
entries = [e.strip() for e in line.split(":", 1)[1].split("->")] if line else []
check(any("(meta)" in e for e in entries) and any("(payload)" in e for e in entries),
      "the critical path labels meta and payload: %r" % line)
check(BUBBLE in p.stdout, "simulate's legend defines bubble")
j = json.loads(run("simulate", sched, "--dyn-shape", "--json").stdout)
for e in j["critical_path"]:
    if e["lane"] in ("send", "recv"):
        check(e.get("message") in ("meta", "payload"), "critical_path entry without meta/payload: %r" % e)

# ---- compare: the legend; a trace or a cost file given as a schedule ----
p = run("compare", sched)
check(BUBBLE in p.stdout, "compare's legend defines bubble")
trace = os.path.join(tmp, "run.trace.json")
run("simulate", sched, "--trace", trace)
costs = write("costs.json", run("costs", "--template", "--stages", "4").stdout)
for cmd in ["compare", "check"]:
    p = run(cmd, sched, trace, expect=2)
    check("Chrome trace" in p.stderr and "traceEvents" in p.stderr, "%s names a trace: %r" % (cmd, p.stderr))
    check(p.stderr.startswith("error:"), "%s: 'error:' first: %r" % (cmd, p.stderr))
    p = run(cmd, costs, expect=2)
    check("cost file" in p.stderr and "--costs" in p.stderr, "%s names a cost file: %r" % (cmd, p.stderr))

# ---- check: FSDP steps without --dp are verified with a note saying what was not checked ----
fsdp = os.path.join(tmp, "fsdp.json")
run("generate", "1f1b", "--pp", "2", "--micro", "4", "--fsdp-steps", "-o", fsdp)
p = run("check", fsdp)
check("FSDP_* steps but no data parallelism (--dp 1)" in p.stdout, "check notes FSDP steps without --dp: %r" % p.stdout)
p = run("check", fsdp, "--dp", "2")
check("no data parallelism" not in p.stdout, "no such note with --dp 2: %r" % p.stdout)

# ---- tune: bound by name and value, whole words, aligned columns, one "search from" ----
base = ["tune", "--pp", "8", "--micro", "8", "--iterations", "300", "--des-iterations", "10", "--seed", "1", "-q",
        "--threads", "1"]
p = run(*base)
out = p.stdout
check("lower bound:" in out and "binding:" in out, "tune names the bound: %s" % out[-800:])
check("how the bounds are computed: " not in out and "--explain" in out, "the formula only with --explain")
check(all(len(l) < 300 for l in out.splitlines()), "no ~600-character line: %r" % max(out.splitlines(), key=len))
check("search from search from" not in out, "one 'search from': %s" % out)
check(BUBBLE in out, "tune's legend defines bubble")
lines = out.splitlines()
head = next((k for k, l in enumerate(lines) if "makespan ms" in l and "verdict" in l), None)
check(head is not None, "tune's table header: %s" % out[:600])
if head is not None:
    header = lines[head]
    rows = []
    for l in lines[head + 1:]:
        if not re.match(r"^\s+\d+\s", l):
            break
        rows.append(l)
    check(len(rows) >= 2, "tune's leaderboard rows: %s" % out[:1500])
    # What each entry is: a family as generated, or what the search found it from.
    c = header.index("from")
    kinds = [r[c:].split("  ")[0] for r in rows]
    check("family" in kinds and all(k.strip() for k in kinds), "tune's 'from' column: %r" % kinds)
    for col in ["from", "peak memory per rank", "verdict"]:
        c = header.index(col)
        for r in rows:
            check(len(r) > c and r[c - 1] == " " and r[c] != " ", "column %r misaligned at 8 ranks:\n%s\n%s" % (col, header, r))
p = run(*base, "--explain")
check("how the bounds are computed: " in p.stdout, "--explain prints the formula")
# Verdicts: whole, or cut at a word boundary with " ..." (the JSON has them whole).
small = base + ["--memory-budget", "30.3GiB"]  # some verify, some are over it
text = run(*small, expect=None).stdout
j = json.loads(run(*small, "--json", expect=None).stdout or "{}")
check(any(not e["verified"] for e in j.get("leaderboard", [])) and any(e["verified"] for e in j.get("leaderboard", [])),
      "tune under 30.3GiB: some entries over the budget, some within")
for e in j.get("leaderboard", []):
    v = e["verdict"]
    if e["verified"] or v in text:
        continue
    shown = None
    for l in text.splitlines():
        m = re.match(r"^\s+\d+\s+(.*?)\s{2,}", l)
        if m and m.group(1) == e["name"] and l.endswith(" ..."):
            shown = l
    if shown is None:
        cli.fail("verdict of %s neither whole nor clipped with ' ...': %r" % (e["name"], v))
        continue
    stem = shown[:-4].rstrip()
    cut = next((k for k in range(len(v), 0, -1) if stem.endswith(v[:k])), 0)
    check(cut > 0 and (cut == len(v) or v[cut] in " ,;:"), "verdict cut mid-word: %r of %r" % (shown, v))

cli.finish("cli_output")
