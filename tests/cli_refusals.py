#!/usr/bin/env python3
"""Every flag acts or is refused (issue 23, item 4), end to end.

    cli_refusals.py PPSCHED DATA_DIR

One refused-flag case per command (exit 2, "error:" first, the flag named); --format/--to and
the output extension must agree; a byte figure needs its unit; a cost file's per-stage arrays
must fit the schedule's stages (costs --template --stages N writes one that does); the same
option set on every command that prices a schedule; the parser's errors start with "error:"
and name the nearest command or flag; bare `ppsched` prints the command map.
"""
import json
import os
import sys

EXE, DATA = sys.argv[1], sys.argv[2]
LLAMA = os.path.join(DATA, "models", "hf", "llama3_8b.json")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

cli = Cli(EXE, timeout=120, tmp_prefix="ppsched_refusals_")
run, check, refused, tmp = cli.run, cli.check, cli.refused, cli.tmp


sched = os.path.join(tmp, "1f1b.json")
run("generate", "1f1b", "--pp", "2", "--micro", "4", "-o", sched)
trace = os.path.join(tmp, "run.trace.json")
run("simulate", sched, "--trace", trace)

# ---- one refused flag per command ----
refused(["generate", "1f1b", "--pp", "2", "--micro", "4", "--overflow", "min"], "--overflow")
refused(["show", sched, "--micro", "3"], "--micro")
refused(["convert", sched, "-o", os.path.join(tmp, "c.json"), "--to", "csv"], "--to", "c.json")
refused(["check", sched, "--pp", "8"], "--pp")
refused(["simulate", sched, "--micro", "3"], "--micro")
refused(["compare", sched, "--memory-budget", "10"], "--memory-budget", "unit")
refused(["costs", "--template", "--json"], "--template")
refused(["calibrate", trace, "--eager-threshold", "4096"], "--eager-threshold", "unit")
refused(["fuzz", "--cases", "0"], "--cases")
refused(["tune", "--pp", "2", "--micro", "4", "--explain", "--json", "-q"], "--explain")
refused(["model", LLAMA, "--pp", "0"], "--pp")

# ---- --format and the output extension agree ----
out_json = os.path.join(tmp, "x.json")
refused(["generate", "1f1b", "--pp", "2", "--micro", "4", "--format", "csv", "-o", out_json], "--format csv", "x.json")
check(not os.path.exists(out_json), "a refused generate wrote its file")
p = run("generate", "1f1b", "--pp", "2", "--micro", "4", "--format", "csv", "-o", os.path.join(tmp, "x.csv"))
check("wrote " in p.stderr and "x.csv" in p.stderr, "generate -o says what it wrote: %r" % p.stderr)
run("check", os.path.join(tmp, "x.csv"))
p = run("generate", "1f1b", "--pp", "2", "--micro", "4", "--format", "csv")  # stdout: the flag decides
check(p.stdout.startswith("0F0"), "generate --format csv on stdout writes CSV: %r" % p.stdout[:80])
check(p.stderr == "", "generate to stdout prints no 'wrote': %r" % p.stderr)

# ---- byte figures need a unit ----
refused(["check", sched, "--memory-budget", "10"], "--memory-budget", "10GiB")
refused(["simulate", sched, "--memory-budget", "1e9"], "--memory-budget", "unit")
refused(["check", sched, "--activation-bytes", "4096"], "--activation-bytes")
refused(["tune", "--pp", "2", "--micro", "4", "--memory-budget", "60", "-q"], "--memory-budget")
for good in ["10GiB", "512MB", "4096B", "1.5e9B"]:
    p = run("check", sched, "--memory-budget", good, expect=None)
    check(p.returncode in (0, 1), "--memory-budget %s is taken: exit %d %s" % (good, p.returncode, p.stderr[:300]))

# ---- a cost file's per-stage arrays against the schedule's stages ----
t4 = os.path.join(tmp, "t4.json")
with open(t4, "w") as f:
    f.write(run("costs", "--template").stdout)
t8 = os.path.join(tmp, "t8.json")
with open(t8, "w") as f:
    f.write(run("costs", "--template", "--stages", "8").stdout)
check(len(json.load(open(t8))["bytes"]["activation"]) == 8, "costs --template --stages 8 has 8 per-stage values")
gen8 = ["--generate", "1f1b", "--pp", "8", "--micro", "8"]
for cmd in ["check", "simulate"]:
    refused([cmd] + gen8 + ["--costs", t4], "4 per-stage values for 8 stages", "--stages 8")
run("simulate", *gen8, "--costs", t8)
s8 = os.path.join(tmp, "s8.json")
run("generate", "1f1b", "--pp", "8", "--micro", "8", "-o", s8)
refused(["compare", s8, "--costs", t4], "shorter than")
refused(["costs", t4, "--stages", "8"], "4 per-stage values for 8 stages")

# ---- the same option set on every command that prices a schedule ----
for cmd in ["check", "simulate", "compare", "tune"]:
    h = run(cmd, "--help").stdout
    for flag in ["--memory-budget", "--model", "--dp", "--costs"]:
        check(flag in h, "%s --help has no %s" % (cmd, flag))
p = run("simulate", sched, "--memory-budget", "1MiB", expect=None)
check("budget 1.0 MiB" in p.stdout or "1.0 MiB" in p.stdout + p.stderr, "simulate --memory-budget acts: %r" % p.stdout[-600:])

# ---- the parser's errors ----
refused(["simulat"], "did you mean 'simulate'?")
refused(["simulate", sched, "--mirco", "8"], "--mirco", "did you mean --micro?")
refused(["check", "--generate", "1f1b", "--pp", "2", "--micro", "x"], "--micro")
refused(["--versoin"], "ppsched has no flag --versoin", "did you mean --version?")
p = refused(["frobnicate"], "unknown command 'frobnicate'")
check("did you mean" not in p.stderr, "no suggestion for a word near nothing: %r" % p.stderr[:200])
p = run(expect=2)
commands = ["generate", "show", "convert", "check", "simulate", "compare", "costs", "calibrate", "fuzz", "tune", "model", "plan"]
lines = [l for l in p.stdout.splitlines() if l.startswith("  ")]
check([l.split()[0] for l in lines] == commands, "bare ppsched prints one line per command: %r" % p.stdout)
check(all(len(l) <= 100 for l in lines), "each command on one short line: %r" % p.stdout)

# ---- output folders are made as named (no shell between: a quote in the name is a name) ----
quoted = os.path.join(tmp, "it's here", "min")
p = run("fuzz", "--testing-planted-bug", "--cases", "300", "--out", quoted, expect=1)
check(os.path.isfile(os.path.join(quoted, "minimal.json")) and os.path.isfile(os.path.join(quoted, "reproduce.sh")),
      "fuzz --out makes a folder whose name has a quote: %r" % p.stderr[-300:])
blocker = os.path.join(tmp, "a file")
open(blocker, "w").close()
p = run("fuzz", "--testing-planted-bug", "--cases", "300", "--out", os.path.join(blocker, "sub"), expect=2)
check("cannot create the output folder" in p.stderr, "fuzz --out under a file is refused: %r" % p.stderr[-300:])

cli.finish("cli_refusals")
