#!/usr/bin/env python3
"""`ppsched calibrate` on input it cannot use: exit 2 and a message naming the file and what is
wrong; on a simulated trace: exit 0, a cost file `ppsched costs` accepts, and a prediction.

    calibrate_cli.py PPSCHED DATA_DIR
"""
import json
import os
import sys
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402




def main():
    exe, data = sys.argv[1], sys.argv[2]
    cli = Cli(exe, timeout=120, stop="exit")
    schedules = os.path.join(data, "schedules")
    a_schedule = os.path.join(schedules, sorted(f for f in os.listdir(schedules) if f.endswith(".json"))[0])
    bad = [
        (a_schedule, None, "not a Chrome trace"),
        (os.path.join(data, "traces", "no_args.trace.json"), None, "no args"),
        (os.path.join(data, "traces", "dangling_flow.trace.json"), None, "has a start but no end"),
        # found by libFuzzer: a number JSON cannot hold threw nlohmann's out_of_range, uncaught
        (os.path.join(data, "traces", "fuzz_number_overflow.trace.json"), None, "number overflow"),
        ("/nonexistent/trace.json", None, "cannot open"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        notjson = os.path.join(tmp, "notjson.json")
        with open(notjson, "w") as f:
            f.write("this is not a trace\n")
        bad.append((notjson, None, "not JSON"))
        for path, extra, needle in bad:
            p = cli.run("calibrate", path, "-o", os.path.join(tmp, "c.json"), *(extra or []), expect=None)
            ok = p.returncode == 2 and (needle is None or needle in p.stderr) and path.split("/")[-1] in p.stderr
            print(f"calibrate {path}: exit {p.returncode}: {p.stderr.strip()}")
            cli.check(ok, f"{path}: expected exit 2 with '{needle}', got {p.returncode}: {p.stderr}")

        # A good trace: simulate writes one, calibrate fits it, the fitted file is a valid cost
        # file, and predicting the same schedule is reported.
        sched = os.path.join(tmp, "1f1b.json")
        trace = os.path.join(tmp, "1f1b.trace.json")
        costs = os.path.join(tmp, "fitted.json")
        for cmd in (["generate", "1f1b", "--pp", "4", "--micro", "8", "-o", sched],
                    ["simulate", sched, "--trace", trace]):
            p = cli.run(*cmd, expect=None)
            cli.check(p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr}")
        p = cli.run("calibrate", trace, "-o", costs, "--schedule", sched, "--json", expect=None)
        print(p.stdout.strip())
        if cli.check(p.returncode == 0, f"calibrate of a simulated trace: exit {p.returncode}: {p.stderr}"):
            j = json.loads(p.stdout)
            err = j["prediction"]["relative_error"]
            print(f"simulated 1f1b re-predicted with its fitted model: relative error {err:.3g}")
            # The embedded default has 4 MiB eager threshold and 32 MiB activations, so only the
            # 64-byte metas are eager; their fit is what keeps this from being exact.
            cli.check(abs(err) <= 0.01, f"a simulated trace predicted with its own fit is off by {err:.3g}")
            c = cli.run("costs", costs, expect=None)
            cli.check(c.returncode == 0, f"ppsched costs rejects the fitted file: {c.stderr}")
        # A trace whose slices last 10^12 ms: the fit would be a cost file `costs` refuses (times
        # over 10^9 ms), so calibrate refuses it, naming the event, and writes nothing.
        with open(trace) as f:
            absurd = json.load(f)
        for ev in absurd["traceEvents"]:
            if ev.get("ph") == "X":
                ev["dur"] = ev["dur"] * 1e12
        absurd_path = os.path.join(tmp, "absurd.trace.json")
        with open(absurd_path, "w") as f:
            json.dump(absurd, f)
        refused = os.path.join(tmp, "absurd_costs.json")
        p = cli.run("calibrate", absurd_path, "-o", refused, expect=None)
        print(f"calibrate of a trace with absurd durations: exit {p.returncode}: {p.stderr.strip()}")
        cli.check(p.returncode == 2 and "over the limit of 1e9 ms" in p.stderr and "traceEvents[" in p.stderr
                  and not os.path.exists(refused), f"absurd trace: expected exit 2 and no file, got {p.returncode}: {p.stderr}")
        # A schedule that did not run: exit 2.
        other = os.path.join(tmp, "2.json")
        cli.run("generate", "1f1b", "--pp", "2", "--micro", "4", "-o", other)
        p = cli.run("calibrate", trace, "--schedule", other, expect=None)
        print(f"calibrate --schedule (wrong schedule): exit {p.returncode}: {p.stderr.strip()}")
        cli.check(p.returncode == 2 and "not the schedule that ran" in p.stderr,
                  f"wrong --schedule: expected exit 2, got {p.returncode}: {p.stderr}")
    return cli.finish("calibrate_cli")


if __name__ == "__main__":
    sys.exit(main())
