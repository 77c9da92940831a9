#!/usr/bin/env python3
"""The quick start's traces through the command line, and `ppsched show`'s wrapping.

    trace_cli.py PPSCHED VALIDATE_TRACE

Every schedule tools/quickstart traces (P=4, M=8) is generated and simulated with --trace and
--trace-per-rank by the ppsched binary, and every file is run through the strict validator
(tests/support/trace_validator.hpp); --trace-per-rank makes its folder and parents; `show`
wraps to --width, else $COLUMNS, else 120 when stdout is not a terminal.
"""
import json
import os
import sys
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

# The quick start's families and flags (tools/quickstart).
FAMILIES = [
    ["gpipe"],
    ["1f1b"],
    ["interleaved-1f1b", "--vpp", "2"],
    ["combined-1f1b", "--vpp", "2"],
    ["looped-bfs", "--vpp", "2"],
    ["zb-h1"],
    ["zbv", "--vpp", "2"],
    ["dualpipev", "--vpp", "2"],
    ["mpipe-transpose", "--vpp", "2", "--overflow", "full", "--tower", "trainable"],
    ["mpipe-transpose", "--vpp", "2", "--overflow", "min", "--tower", "trainable"],
    ["mpipe-transpose", "--vpp", "2", "--tower", "trainable", "--owner-backward"],
]




def lines_within(cli, text, width, what):
    worst = max((len(l) for l in text.splitlines()), default=0)
    cli.check(worst <= width, f"{what}: a line of {worst} characters, wider than {width}:\n{text}")
    print(f"{what}: {len(text.splitlines())} lines, the longest {worst} <= {width}")


def main():
    ppsched, validate = sys.argv[1], sys.argv[2]
    cli = Cli(ppsched, timeout=120, stop="first")
    with tempfile.TemporaryDirectory() as tmp:
        traces = []
        for k, fam in enumerate(FAMILIES):
            sched = os.path.join(tmp, f"s{k}.json")
            cli.run("generate", fam[0], "--pp", "4", "--micro", "8", *fam[1:], "-o", sched)
            trace = os.path.join(tmp, f"s{k}.trace.json")
            per_rank = os.path.join(tmp, "per-rank", f"s{k}", "nested")  # none of it exists yet
            cli.run("simulate", sched, "--trace", trace, "--trace-per-rank", per_rank)
            ranks = sorted(os.listdir(per_rank))
            cli.check(ranks == [f"rank{r}.json" for r in range(4)], f"--trace-per-rank {per_rank} wrote {ranks}")
            traces += [trace] + [os.path.join(per_rank, r) for r in ranks]
        p = cli.command([validate] + traces, expect=None)
        print(p.stdout)
        cli.check(p.returncode == 0, f"the validator rejects a quick-start trace (exit {p.returncode})")

        # A folder that cannot be made: exit 2, the path in the message.
        blocker = os.path.join(tmp, "a-file")
        with open(blocker, "w") as f:
            f.write("x")
        sched = os.path.join(tmp, "s0.json")
        p = cli.run("simulate", sched, "--trace-per-rank", os.path.join(blocker, "sub"), expect=2)
        cli.check("a-file" in p.stderr, f"--trace-per-rank under a file: {p.stderr}")
        print("--trace-per-rank under a file:", p.stderr.strip())

        # show: --width, then $COLUMNS, then 120 (stdout is a pipe here).
        mpipe = os.path.join(tmp, "s7.json")
        env = dict(os.environ)
        env.pop("COLUMNS", None)
        lines_within(cli, cli.run("show", mpipe, "--width", "60", env=env).stdout, 60, "show --width 60")
        narrow = cli.run("show", mpipe, env=dict(env, COLUMNS="45")).stdout
        lines_within(cli, narrow, 45, "show with COLUMNS=45")
        default = cli.run("show", mpipe, env=env).stdout
        lines_within(cli, default, 120, "show through a pipe without COLUMNS")
        cli.check(max(len(l) for l in default.splitlines()) > 100, "the default width is not 120: " + default)
        cli.check(cli.run("show", mpipe, "--width", "200", env=dict(env, COLUMNS="45")).stdout != narrow,
                  "--width does not override $COLUMNS")
        cli.run("show", mpipe, "--width", "0", env=env, expect=2)

        # show --json escapes the schedule's name.
        with open(mpipe) as f:
            doc = json.load(f)
        doc["name"] = 'quote " backslash \\ tab \t bell \u0007'
        odd = os.path.join(tmp, "odd.json")
        with open(odd, "w") as f:
            json.dump(doc, f)
        got = cli.json("show", odd, env=env)
        cli.check(got["name"] == doc["name"], f"show --json name {got['name']!r}")
    cli.finish("trace_cli")


if __name__ == "__main__":
    main()
