#!/usr/bin/env python3
"""Issue 36 item 7: the defaults that pick a schedule are stated, settable figures.

    device_assumptions_cli.py PPSCHED DATA_DIR

1. Two computes on one device take turns. An OVERLAP_F_B / OVERLAP_B_F step of DualPipeV runs a
   forward and a backward together; one device runs them one after the other unless a
   measurement says otherwise, so by default a rank's busy time is the sum of its computes. With
   F = 1 ms and a backward of 2 ms (I = W = 1) and free links, every rank of DualPipeV P=4 V=2 M=8
   runs 2 stages x 8 micro-batches x (1 + 2) ms = 48 ms of compute (derived here by hand, not
   read from ppsched): its busy time must be 48 ms. With --overlap-efficiency e an OVERLAP step
   takes max(a, b) + (1 - e) min(a, b), so the rank's busy time is 48 - e x (the shorter
   sub-step of each of its OVERLAP steps), counted here from the generated schedule. The old
   default (0.5, no flag) fails the first check.
2. Usable capacity. The default device is an H100 SXM 80 GB as its driver reports it (81,559
   MiB, NVML) less a 4 GiB reserve: 77,463 MiB per rank, the budget every plan is held to (the
   old default: 80 GiB, more than the device has). A peak within 5 % below the budget is marked
   tight; --memory-reserve and --memory-margin move both, and each is stated in the output.
3. A flag that does not apply is refused: calibrate measures the overlap, check times nothing.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

EXE, DATA = sys.argv[1], sys.argv[2]
MIB, GIB = 1 << 20, 1 << 30
cli = Cli(EXE, tmp_prefix="device_assumptions_cli.")
run, check, tmp = cli.run, cli.check, cli.tmp
costs = os.path.join(tmp, "costs.json")
with open(costs, "w") as f:
    json.dump({"format": "ppsched-costs", "version": 1,
               "compute": {"FWD": 1.0, "BWD": 2.0, "BWD_INPUT": 1.0, "BWD_WEIGHT": 1.0},
               "link": {"latency_ms": 0.0, "bandwidth_GBps": None}}, f)
sched = os.path.join(tmp, "dualpipev.json")
run("generate", "dualpipev", "--pp", "4", "--vpp", "2", "--micro", "8", "-o", sched)
with open(sched) as f:
    doc = json.load(f)

# Per rank: the shorter sub-step of each OVERLAP step, by the costs above (a forward 1 ms; a
# whole backward 2 ms, each half 1 ms).
MS = {"FWD": 1.0, "BWD": 2.0, "BWD_INPUT": 1.0, "BWD_WEIGHT": 1.0}
shorter = []
for prog in doc["programs"]:
    total = 0.0
    for step in prog:
        if step and str(step.get("op", "")).startswith("OVERLAP"):
            subs = step.get("sub_steps", [])
            times = [MS[s["op"]] for s in subs if s.get("op") in MS]
            check(len(times) == 2, "an OVERLAP step without two computes: %s" % json.dumps(step)[:300])
            if len(times) == 2:
                total += min(times)
    shorter.append(total)
check(all(s > 0 for s in shorter), "DualPipeV P=4 should have OVERLAP steps on every rank: %s" % shorter)


def busy(*extra):
    out = json.loads(run("simulate", sched, "--costs", costs, "--json", *extra).stdout or "[{}]")
    r = out[0] if isinstance(out, list) else out
    return [x["busy_ms"] for x in r.get("ranks", [])], r.get("assumptions", {})


b, a = busy()
check(len(b) == 4 and all(abs(x - 48.0) < 1e-9 for x in b),
      "default: a rank's computes take turns, busy 2 x 8 x (1 + 2) = 48 ms each; got %s" % b)
check(a.get("overlap_efficiency") == 0, "simulate --json states overlap_efficiency 0: %s" % a)
for e in (0.5, 1.0):
    b, a = busy("--overlap-efficiency", str(e))
    want = [48.0 - e * s for s in shorter]
    check(len(b) == 4 and all(abs(x - w) < 1e-9 for x, w in zip(b, want)),
          "--overlap-efficiency %g: busy 48 - e x shorter sub-steps = %s, got %s" % (e, want, b))
    check(a.get("overlap_efficiency") == e, "simulate --json states the overlap it used: %s" % a)
text = run("simulate", sched, "--costs", costs).stdout
check("OVERLAP steps priced with overlap_efficiency 0.00 (serial" in text,
      "simulate's text says how OVERLAP steps are priced:\n" + text[:600])
run("simulate", sched, "--costs", costs, "--overlap-efficiency", "1.5", expect=2)

# 2. Usable capacity: 81,559 MiB less 4 GiB.
usable = 81559 * MIB - 4 * GIB
check(usable == 77463 * MIB, "hand arithmetic")
model = os.path.join(DATA, "models", "listed_8_layers.json")
with open(model) as f:
    listed = json.load(f)
plain = dict(listed)
plain["device"] = {k: v for k, v in listed.get("device", {}).items() if k not in ("memory_bytes", "memory_reserve_bytes")}
plain_path = os.path.join(tmp, "plain.json")
with open(plain_path, "w") as f:
    json.dump(plain, f)
m = json.loads(run("model", plain_path, "--json").stdout or "{}")
check(m.get("device", {}).get("memory_bytes") == 81559 * MIB and m["device"].get("usable_memory_bytes") == usable,
      "the default device: 81,559 MiB, usable %d: %s" % (usable, m.get("device")))
t = run("model", plain_path).stdout
check("75.65 GiB usable per rank (79.65 GiB less a 4.00 GiB reserve" in t, "model states the capacity:\n" + t[:800])
m = json.loads(run("model", plain_path, "--memory-reserve", "1GiB", "--json").stdout or "{}")
check(m.get("device", {}).get("usable_memory_bytes") == 81559 * MIB - GIB, "--memory-reserve 1GiB: %s" % m.get("device"))
run("model", plain_path, "--memory-reserve", "90GiB", expect=2)
run("simulate", sched, "--costs", costs, "--memory-reserve", "1GiB", expect=2)  # needs --model

gen = ["simulate", "--generate", "1f1b", "--pp", "2", "--micro", "4", "--json"]
r = json.loads(run(*gen, "--model", plain_path).stdout or "{}")
a = r.get("assumptions", {})
check(a.get("memory_budget_bytes") == usable and "less a 4.00 GiB reserve" in str(a.get("memory_budget_basis")),
      "simulate holds a model's plan to the usable capacity and says why: %s" % a)
peak = max(x["peak_memory_bytes"] for x in r["ranks"])


def tight_with(memory_bytes, *extra):
    doc = dict(plain)
    doc["device"] = dict(plain["device"], memory_bytes=memory_bytes, memory_reserve_bytes=GIB)
    path = os.path.join(tmp, "sized.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    out = json.loads(run(*gen, "--model", path, *extra).stdout or "{}")
    return out.get("memory", {}).get("tight_ranks")


# The peak at 97 % of the usable capacity is within 5 % of it; at 90 %, not; at 97 % with a 2 %
# margin, not.
near, far = int(peak / 0.97) + GIB, int(peak / 0.90) + GIB
t = tight_with(near)
check(t and len(t) >= 1, "a peak 3 %% below the usable capacity is tight: %s" % t)
check(tight_with(far) == [], "a peak 10 %% below it is not tight: %s" % tight_with(far))
check(tight_with(near, "--memory-margin", "0.02") == [], "--memory-margin 0.02 moves the mark")

# 3. Refused where it does not apply.
trace = os.path.join(tmp, "t.json")
run("simulate", sched, "--costs", costs, "--trace", trace)
run("calibrate", trace, "--overlap-efficiency", "0.5", expect=2)
run("check", sched, "--overlap-efficiency", "0.5", expect=2)

cli.finish("device_assumptions_cli")
print("device assumptions: serial overlap by default (busy 48 ms a rank), e=0.5/1 as derived; usable %d MiB; "
      "tight marking at 3 %% below, not at 10 %%" % (usable // MIB))
