#!/usr/bin/env python3
"""`ppsched compare` models one network for every schedule: with an MPipe schedule in the set,
a schedule without an MPipe layer runs the tower on stage 0 (marked, and the table says so);
--body-only prices each schedule as written, as `ppsched simulate` does.

    compare_cli.py PPSCHED
"""
import os
import sys
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402




def main():
    exe = sys.argv[1]
    cli = Cli(exe, timeout=120, stop="exit", verbose=True)
    with tempfile.TemporaryDirectory() as tmp:
        inter = os.path.join(tmp, "interleaved.json")
        mpipe = os.path.join(tmp, "mpipe.json")
        cli.run("generate", "interleaved-1f1b", "--pp", "4", "--vpp", "2", "--micro", "8", "-o", inter)
        cli.run("generate", "mpipe-transpose", "--pp", "4", "--vpp", "2", "--micro", "8", "--tower", "trainable",
                "--owner-backward", "-o", mpipe)
        rows = {os.path.basename(r["file"]): r for r in cli.json("compare", inter, mpipe)}
        body = {os.path.basename(r["file"]): r for r in cli.json("compare", inter, mpipe, "--body-only")}
        alone = cli.json("simulate", inter)
        # simulate takes check's mode flags: --dyn-shape sends a meta before every body FWD P2P,
        # each costing a link latency, so the makespan grows.
        dyn = cli.json("simulate", inter, "--dyn-shape")
        text = cli.run("compare", inter, mpipe).stdout
        print(text)
        i, m = rows["interleaved.json"], rows["mpipe.json"]
        checks = [
            (dyn["makespan_ms"] > alone["makespan_ms"], "simulate --dyn-shape prices the extra metas"),
            (i["tower_on_stage0"] and not m["tower_on_stage0"], "only the schedule without an MPipe layer gets the tower"),
            ("tower (trainable) on stage 0" in i["costs"], "the priced model names the tower on stage 0"),
            (m["makespan_ms"] < i["makespan_ms"], "owner-backward MPipe is faster on the same network"),
            (m["makespan_ms"] == body["mpipe.json"]["makespan_ms"], "the MPipe schedule is priced alike either way"),
            (body["interleaved.json"]["makespan_ms"] == alone["makespan_ms"], "--body-only equals simulate"),
            (i["makespan_ms"] > alone["makespan_ms"], "the tower costs the baseline time"),
            (text.startswith("network: the body plus the MPipe tower (trainable)"), "the table says which network"),
            ("interleaved.json *" in text, "the baseline's row is marked"),
        ]
        for ok, what in checks:
            cli.check(ok, what)
    cli.finish("compare_cli")


if __name__ == "__main__":
    main()
