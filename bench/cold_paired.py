#!/usr/bin/env python3
"""The end-to-end figure as a user meets it: ppsched right after another process, paired.

    bench/cold_paired.py [--ppsched EXE] [--runs N] [--heavy-mib M] [--policies glibc,heap,huge]
                         [--pytorch-cmd CMD] [--json OUT] [--check] [-- PPSCHED ARGS...]

Each repetition runs, for every memory policy in turn (the order rotates from one repetition to
the next, so that none always goes first):
  1. the "previous job": a process that touches --heavy-mib MiB (default 300) and exits, a
     stand-in for the user's last Python job; with --pytorch-cmd, that command instead (e.g.
     PyTorch's schedule build + _add_send_recv + _simulate_comms_compute), timed as well;
  2. `ppsched ARGS` under that policy (PPSCHED_MALLOC=glibc|heap|huge, tools/process_memory.hpp),
     its user and system CPU time and peak RSS read from wait4().
Then the warm figure: each policy run back to back (one discarded run, then --runs runs).

Default ARGS: simulate --generate interleaved-1f1b --pp 32 --vpp 4 --micro 1024 (782,336 steps).
--expanded counts the steps an MoE run expands into (its steps plus the phases of its MoE stages'
compute steps, `simulate --json`'s moe.expanded_phases) and a step's bytes over the process's own
(the peak RSS less that of simulating 1F1B at P=2, M=2 under the same policy).
Prints per policy the median user, system and CPU seconds with their range, the peak RSS and
bytes per step, the ratio to the PyTorch command when given (else to --pytorch-cpu-s, the CPU
seconds of PyTorch's run measured elsewhere), and the cold/warm ratio; --json writes it all.

--check asserts ratios between the policies measured in the same alternation: the default
policy's cold CPU is at most --tolerance (default 1.15) times the best policy's; with
--max-bytes-per-step, also that the default policy's peak RSS over the step count is at most
that many bytes (memory, not time: the same on any machine of the class); with --max-cold-cpu-s
(benchmarks only: an absolute time), that its median cold CPU is at most that.
A figure the docs publish from this script is pinned that way.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

DEFAULT_ARGS = ["simulate", "--generate", "interleaved-1f1b", "--pp", "32", "--vpp", "4", "--micro", "1024"]
# --expanded: the process's own memory, a simulation of a handful of steps.
BASELINE_ARGS = ["simulate", "--generate", "1f1b", "--pp", "2", "--micro", "2"]
HEAVY = "import sys; b = b'\\x01' * ({} << 20); sys.exit(0 if b[-1] == 1 else 1)"


def timed(cmd, env=None):
    """(user s, sys s, peak RSS bytes, wall s, stdout) of one child process."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    if p.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}")
    return ru.ru_utime, ru.ru_stime, ru.ru_maxrss * 1024, wall, out.decode("utf-8", "replace")


def summary(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ppsched", default=os.path.join(os.path.dirname(__file__), "..", "build", "tools", "ppsched"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--heavy-mib", type=int, default=300)
    ap.add_argument("--policies", default="glibc,heap,huge")
    ap.add_argument("--default-policy", default=None, help="the policy the build uses (default: ask ppsched's env-less run)")
    ap.add_argument("--pytorch-cmd", default=None, help="shell command of PyTorch's run, alternated as the previous job")
    ap.add_argument("--pytorch-cpu-s", type=float, default=None, help="PyTorch's CPU seconds measured elsewhere")
    ap.add_argument("--json", default=None)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--tolerance", type=float, default=1.15)
    ap.add_argument("--max-bytes-per-step", type=float, default=None,
                    help="with --check: the default policy's peak RSS per step is at most this")
    ap.add_argument("--max-cold-cpu-s", type=float, default=None,
                    help="with --check: the default policy's median cold CPU seconds is at most this (a benchmark's "
                         "bound on its machine class, not a test)")
    ap.add_argument("--expanded", action="store_true",
                    help="count steps as `simulate --json` expands them: its steps plus the phases its MoE stages' "
                         "compute steps run (moe.expanded_phases), and count a step's bytes over the process's own "
                         "(the peak RSS less that of a 1F1B P=2 M=2 simulation under the same policy)")
    ap.add_argument("args", nargs="*")
    a = ap.parse_args()
    args = a.args or DEFAULT_ARGS
    exe = os.path.abspath(a.ppsched)
    policies = [p for p in a.policies.split(",") if p]
    for p in policies:
        if p not in ("glibc", "heap", "huge"):
            raise SystemExit(f"--policies: unknown policy {p!r} (glibc, heap, huge)")
    # MALLOC_PERTURB_ (meson test sets it) makes glibc fill every block it hands out, touching
    # capacity a run reserves and never uses: measured as a user runs it, without it.
    base_env = {k: v for k, v in os.environ.items()
                if k not in ("PPSCHED_MALLOC", "PPSCHED_DEFAULT_MALLOC", "MALLOC_PERTURB_")}

    def env_of(policy):
        return dict(base_env, PPSCHED_MALLOC=policy)

    # The step count, for bytes per step: `ppsched check` of the same input says it.
    baseline = {p: 0 for p in policies}
    if a.expanded:
        _, _, _, _, out = timed([exe] + args + ["--json"], env_of(policies[0]))
        j = json.loads(out)
        j = j[0] if isinstance(j, list) else j
        steps = j["steps"] + ((j.get("moe") or {}).get("expanded_phases") or 0)
        for p in policies:
            baseline[p] = min(timed([exe] + BASELINE_ARGS, env_of(p))[2] for _ in range(3))
    else:
        _, _, _, _, out = timed([exe, "check"] + args[1:], env_of(policies[0]))
        m = re.search(r"verified \((\d+) steps on", out)
        steps = int(m.group(1)) if m else None

    cold = {p: {"user": [], "sys": [], "cpu": [], "rss": [], "wall": []} for p in policies}
    torch = {"cpu": [], "wall": []}
    previous = [sys.executable, "-c", HEAVY.format(a.heavy_mib)]
    for k in range(a.runs):
        order = policies[k % len(policies):] + policies[:k % len(policies)]
        for p in order:
            if a.pytorch_cmd:
                u, s_, _, w, _ = timed(["/bin/sh", "-c", a.pytorch_cmd], base_env)
                torch["cpu"].append(u + s_)
                torch["wall"].append(w)
            else:
                timed(previous, base_env)
            u, s_, rss, w, _ = timed([exe] + args, env_of(p))
            c = cold[p]
            c["user"].append(u)
            c["sys"].append(s_)
            c["cpu"].append(u + s_)
            c["rss"].append(rss)
            c["wall"].append(w)
    warm = {}
    for p in policies:
        timed([exe] + args, env_of(p))
        xs = [timed([exe] + args, env_of(p)) for _ in range(a.runs)]
        warm[p] = {"user": [x[0] for x in xs], "sys": [x[1] for x in xs], "cpu": [x[0] + x[1] for x in xs]}

    torch_cpu = statistics.median(torch["cpu"]) if torch["cpu"] else a.pytorch_cpu_s
    result = {"command": ["ppsched"] + args, "steps": steps, "runs": a.runs, "previous_job":
              a.pytorch_cmd or f"a process touching {a.heavy_mib} MiB", "pytorch_cpu_s": torch_cpu,
              "pytorch_measured_here": bool(torch["cpu"]), "policies": {}}
    print(f"ppsched {' '.join(args)}" + (f"  ({steps:,} {'expanded ' if a.expanded else ''}steps)" if steps else ""))
    print(f"cold: each run right after {result['previous_job']}; warm: back to back; {a.runs} runs each, "
          "median [min-max], CPU s = user + sys")
    head = f"{'policy':<7} {'cold user':>18} {'cold sys':>18} {'cold CPU':>18} {'warm CPU':>18} {'peak RSS':>9} {'B/step':>7}"
    if torch_cpu:
        head += f" {'vs PyTorch':>10}"
    print(head)
    for p in policies:
        c, w = cold[p], warm[p]
        row = {"cold_user_s": summary(c["user"]), "cold_sys_s": summary(c["sys"]), "cold_cpu_s": summary(c["cpu"]),
               "warm_cpu_s": summary(w["cpu"]), "warm_user_s": summary(w["user"]), "warm_sys_s": summary(w["sys"]),
               "peak_rss_bytes": max(c["rss"]), "cold_wall_s": summary(c["wall"])}
        if steps:
            row["bytes_per_step"] = max(max(c["rss"]) - baseline[p], 0) / steps
            row["baseline_rss_bytes"] = baseline[p]
        if torch_cpu:
            row["vs_pytorch"] = torch_cpu / row["cold_cpu_s"]["median"]
        result["policies"][p] = row

        def f(d):
            return f"{d['median']:.3f} [{d['min']:.2f}-{d['max']:.2f}]"
        line = (f"{p:<7} {f(row['cold_user_s']):>18} {f(row['cold_sys_s']):>18} {f(row['cold_cpu_s']):>18} "
                f"{f(row['warm_cpu_s']):>18} {row['peak_rss_bytes'] / 2**20:>7.0f}Mi {row.get('bytes_per_step', 0):>7.0f}")
        if torch_cpu:
            line += f" {row['vs_pytorch']:>9.0f}x"
        print(line)
    if torch["cpu"]:
        print(f"PyTorch's run (the previous job): CPU {statistics.median(torch['cpu']):.2f} s median "
              f"[{min(torch['cpu']):.2f}-{max(torch['cpu']):.2f}]")
    best = min(policies, key=lambda p: result["policies"][p]["cold_cpu_s"]["median"])
    result["best_cold"] = best
    default = a.default_policy
    if default is None:
        # The build's default: what ppsched reports with no policy in its environment.
        p = subprocess.run([exe, "--version"], capture_output=True, text=True, env=base_env)
        m = re.search(r"memory policy (\w+)", p.stdout + p.stderr)
        default = m.group(1) if m else None
    result["default"] = default
    print(f"best cold: {best}" + (f"; the build's default: {default}" if default else ""))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(result, fh, indent=1)
    if a.check:
        if default not in result["policies"]:
            raise SystemExit(f"--check: the default policy ({default}) was not measured")
        ratio = result["policies"][default]["cold_cpu_s"]["median"] / result["policies"][best]["cold_cpu_s"]["median"]
        print(f"check: default ({default}) cold CPU / best ({best}) = {ratio:.2f} (bound {a.tolerance})")
        failed = ratio > a.tolerance
        if a.max_bytes_per_step is not None:
            per_step = result["policies"][default].get("bytes_per_step")
            if per_step is None:
                raise SystemExit("--max-bytes-per-step: the step count is unknown (`ppsched check` did not say it)")
            print(f"check: default ({default}) peak RSS {per_step:.0f} bytes a step (bound {a.max_bytes_per_step:g})")
            failed = failed or per_step > a.max_bytes_per_step
        if a.max_cold_cpu_s is not None:
            cpu = result["policies"][default]["cold_cpu_s"]["median"]
            print(f"check: default ({default}) cold CPU {cpu:.3f} s (bound {a.max_cold_cpu_s:g} s)")
            failed = failed or cpu > a.max_cold_cpu_s
        if failed:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
