#!/usr/bin/env python3
"""A pin that checks nothing fails (issue 36 item 11).

    pin_guard.py BENCH_PROGRAM CHEAP_BENCHMARK

Google Benchmark exits 0 when --benchmark_filter matches no benchmark, so a pin test whose
filter stopped matching (a renamed benchmark) would pass forever. bench/bench_main.cpp exits 1
then, and under --pins (what the pin tests pass) also when a run reports no `pin_checks` above 0.
This runs BENCH_PROGRAM (any program built with bench_main.cpp):
  - with a filter that matches nothing, with and without --pins: exit 1, saying so;
  - CHEAP_BENCHMARK (a regex naming one quick benchmark that is not a pin) under --pins: exit 1,
    naming it as having checked nothing;
  - the same benchmark without --pins: exit 0 (the guard fails pins, not every run).
"""
import subprocess
import sys

BENCH, CHEAP = sys.argv[1], sys.argv[2]
failures = []


def expect(args, rc, said):
    p = subprocess.run([BENCH] + args, capture_output=True, text=True, timeout=120)
    what = " ".join(["bench"] + args)
    if p.returncode != rc:
        failures.append("%s: exit %d, expected %d\n%s" % (what, p.returncode, rc, p.stderr[-1000:]))
    elif said and said not in p.stderr:
        failures.append("%s: stderr does not say %r:\n%s" % (what, said, p.stderr[-1000:]))
    else:
        print("ok: %s: exit %d" % (what, rc))


expect(["--pins", "--benchmark_filter=^BM_NoSuchPin$"], 1, "error: no benchmark matches --benchmark_filter=^BM_NoSuchPin$")
expect(["--benchmark_filter=^BM_NoSuchPin$"], 1, "error: no benchmark matches")
expect(["--pins", "--benchmark_filter=" + CHEAP], 1, "its assertions checked nothing (no pin_checks counter above 0)")
expect(["--benchmark_filter=" + CHEAP], 0, None)
for f in failures:
    print("FAIL", f)
sys.exit(1 if failures else 0)
