#!/usr/bin/env python3
"""`ppsched tune --pareto` against the frontier sail-sg's v_auto_schedule.py reports.

usage: pareto_cli.py PPSCHED DATA_DIR

With V placement, the paper's unit costs (tests/data/costs/unit_fiw.json: F = I = W = 1 ms, free
transfers, 1 MiB of activation per stage, so memory in MiB counts live chunk activations) and Zero
Bubble's memory accounting, the frontier tune prints must be at or below v_auto_schedule.py's at
every memory cap its output names (tests/data/controllable_memory/v_auto_schedule_frontier.txt):
  - best makespan per cap <= the smallest global makespan of its schedules with that peak or less;
  - best span per cap (--objective span) <= the span it reports, 6M + its bubble.
The searches are bounded by iterations (--seconds 0), never by the clock. Then the flags' rules.
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

MIB = 1 << 20


def reference(data, P, M):
    """peak -> (bubble printed by schedule(), grid span, best ASAP makespan) for (P, M)."""
    out, cur = {}, None
    with open(os.path.join(data, "controllable_memory", "v_auto_schedule_frontier.txt")) as f:
        for line in f:
            m = re.match(r"P=(\d+) M=(\d+)$", line.strip())
            if m:
                cur = (int(m.group(1)), int(m.group(2))) == (P, M)
                continue
            m = re.match(r"\s+peak=(\d+) bubble=(\d+) grid_span=(\d+) asap_span=(\d+) asap_makespan=(\d+)", line)
            if cur and m:
                peak, bubble, grid_span, _, makespan = map(int, m.groups())
                out[peak] = (bubble, grid_span, makespan)
    if not out:
        sys.exit(f"FAILED: no v_auto_schedule frontier for P={P} M={M} in the data file")
    return out


def pareto(cli, costs, P, M, objective):
    j = cli.json("tune", "--pp", str(P), "--micro", str(M), "--vpp", "2", "--placement", "v", "--costs", costs,
                 "--memory-rule", "zero-bubble", "--pareto", "--objective", objective, "--seconds", "0",
                 "--iterations", "1000", "--des-iterations", "10", "--threads", "1", "-q", timeout=600)
    cli.check(j["memory_rule"] == "zero-bubble" and j["objective"] == objective,
              "tune --pareto --objective %s: memory_rule %r, objective %r" % (objective, j["memory_rule"], j["objective"]))
    cli.check(not j["stopped_by_time"], "an iteration-bounded search must not stop by time")
    points = j["pareto"]
    cli.check(points, "an empty frontier")
    # Strictly increasing memory, strictly decreasing objective: no dominated point.
    key = "span_ms" if objective == "span" else "makespan_ms"
    for a, b in zip(points, points[1:]):
        cli.check(a["memory_bytes"] < b["memory_bytes"] and a[key] > b[key], "a dominated point: %r, %r" % (a, b))
    for q in points:
        # the frontier counts the rule's peak
        cli.check(q["memory_bytes"] == max(q["rule_peak_bytes"]), "memory_bytes is not the rule's peak: %r" % (q,))
        cli.check(abs(q["memory_activations"] - q["memory_bytes"] / MIB) < 1e-9, "memory_activations is not the MiB: %r" % (q,))
    return points


def best_within(points, cap_activations, key):
    fits = [q[key] for q in points if q["memory_bytes"] <= cap_activations * MIB]
    return min(fits) if fits else None


def check_grid(cli, data, P, M):
    costs = os.path.join(data, "costs", "unit_fiw.json")
    ref = reference(data, P, M)
    rows = []
    for objective, key, column in (("makespan", "makespan_ms", 2), ("span", "span_ms", 1)):
        points = pareto(cli, costs, P, M, objective)
        for cap in sorted(ref):
            want = min(v[column] for peak, v in ref.items() if peak <= cap)
            got = best_within(points, cap, key)
            rows.append(f"P={P} M={M} cap {cap}: {objective} {got} (v_auto_schedule {want})")
            cli.check(got is not None and got <= want + 1e-9, f"tune --pareto at {cap} activations: best {objective} {got}, "
                      f"above v_auto_schedule.py's {want}\n" + "\n".join(rows))
    print("\n".join(rows))


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    ppsched, data = sys.argv[1], sys.argv[2]
    cli = Cli(ppsched, timeout=120, stop="first")
    for P, M in ((3, 6), (4, 8)):
        check_grid(cli, data, P, M)

    # The text form: one row per point, ascending memory, and the closing line.
    costs = os.path.join(data, "costs", "unit_fiw.json")
    p = cli.run("tune", "--pp", "2", "--micro", "4", "--vpp", "2", "--placement", "v", "--costs", costs,
                "--memory-rule", "zero-bubble", "--pareto", "--seconds", "0", "--iterations", "200", "--des-iterations", "0",
                "--threads", "1", "-q")
    for said in ("memory rule zero-bubble; best makespan per memory cap", "(deterministic for --seed)"):
        cli.check(said in p.stdout, "tune --pareto's text does not say %r:\n%s" % (said, p.stdout))
    cli.check(re.search(r"frontier: \d+ points from \d+ searches", p.stdout), "tune --pareto's text has no frontier line:\n" + p.stdout)

    # Under Zero Bubble's accounting v-min P=2 keeps 2 stage activations (4 MiB) on rank 1;
    # ppsched's, which frees half an activation at BWD_INPUT, 3 MiB: a 3 MiB budget takes it under
    # one rule only.
    base = ["tune", "--pp", "2", "--micro", "4", "--vpp", "2", "--placement", "v", "--costs", costs,
            "--memory-budget", "3MiB", "--seconds", "0", "--iterations", "100", "--des-iterations", "0", "-q"]
    rows = {e["name"]: e for e in cli.json(*base)["leaderboard"]}
    v_min = rows["v-min V=2"]
    cli.check(v_min["verified"], "v-min V=2 in 3 MiB under ppsched's rule: %r" % (v_min,))
    rows = {e["name"]: e for e in cli.json(*base, "--memory-rule", "zero-bubble")["leaderboard"]}
    v_min = rows["v-min V=2"]
    cli.check(not v_min["verified"], "v-min V=2 in 3 MiB under the zero-bubble rule: %r" % (v_min,))
    cli.check("by the zero-bubble rule" in v_min["verdict"], "v-min V=2's verdict does not name the rule: %r" % (v_min,))
    cli.check(v_min["rule_peak_bytes"] == [3 * MIB, 4 * MIB], "v-min V=2's rule peaks: %r" % (v_min,))

    # Flags that do not apply are refused, not ignored.
    for extra, why in ((["--pareto", "-o", "x.json"], "-o does not apply with --pareto"),
                       (["--pareto", "--svg", "x.svg"], "--svg does not apply with --pareto"),
                       (["--pareto-searches", "3"], "--pareto-searches applies only with --pareto"),
                       (["--memory-rule", "bogus"], "--memory-rule")):
        p = cli.run("tune", "--pp", "2", "--micro", "4", *extra, expect=2)
        cli.check(why in p.stderr, "tune %s: the error does not say %r: %s" % (" ".join(extra), why, p.stderr))
    return cli.finish("pareto_cli")


if __name__ == "__main__":
    sys.exit(main())
