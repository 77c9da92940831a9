#!/usr/bin/env python3
"""ppsched-exec under the launchers' contracts: torchrun (default static rendezvous with the
agent's store, two agents with the c10d rendezvous, the failure summary read from
TORCHELASTIC_ERROR_FILE), and the failures that must be stated in the launcher's language
(flag limits before any communication, a c10 exception, a store port already taken).

    launcher_cases.py --list
    launcher_cases.py --exe E --launcher L [--torchrun T] CASE

The torchrun cases need torchrun (Debian: python3-torch, installed by tools/setup); they are
skipped, with a message naming what is missing, only when no torchrun can be found.
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

from harness import GPT, Failure, free_port, registry, strict_json

# A PP=4 1F1B on the tiny GPT of exec_cases.py: well under a second of compute per rank.
PP4 = ["--generate", "1f1b", "--pp", "4", "--micro", "8"] + GPT
SKIP = 77  # meson's "skipped" exit status

CASES, case = registry()


class Skip(Exception):
    pass


def need_torchrun(ctx):
    if not ctx.torchrun:
        # In CI the machine is set up by tools/setup, which installs torchrun: its absence is a
        # broken setup, not a property of the machine.
        if os.environ.get("CI") == "true":
            raise Failure("torchrun not found under CI=true (tools/setup installs python3-torch)")
        raise Skip("torchrun not found (Debian: apt-get install python3-torch, as tools/setup does); "
                   "the torchrun contract is untested on this machine")
    return ctx.torchrun


# torch 1.13's torchrun on Python 3.11 (Debian 12) crashes on its default "--redirects 0 --tee 0":
# Std.from_str finds no member for "0" or "3" (3.11 iterates only a Flag's single-bit members),
# so to_map gets None ("'NoneType' object has no attribute 'get'"; fixed in torch 2.0). "1"
# works: each worker's stdout goes to a log file and, teed, to the console as "[default<r>]:...";
# stderr is left alone.
TORCHRUN_STREAMS = ["--redirects", "1", "--tee", "1"]


def torchrun(ctx, nproc, args, extra=(), limit=150):
    """Starts one torchrun agent of `nproc` ppsched-exec workers; returns the Popen. The
    options are spelled with underscores: torch 1.13's torchrun knows only those, 2.x both."""
    cmd = ([need_torchrun(ctx), "--nproc_per_node", str(nproc)] + TORCHRUN_STREAMS + list(extra) +
           ["--no_python", ctx.exe] + args)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))


def finish(p, limit=150):
    try:
        out, err = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise Failure(f"torchrun did not finish within {limit} s\n--- stdout\n{out}\n--- stderr\n{err}")
    return p.returncode, out, err


def json_summary(out, err):
    for line in out.splitlines():
        line = re.sub(r"^\[[a-z]+\d+\]:", "", line.strip())  # torchrun's tee prefix
        if line.startswith("{") and '"parity"' in line:
            return strict_json(line)
    raise Failure("no JSON summary from rank 0\n--- stdout\n" + out + "\n--- stderr\n" + err)


def check_parity(s, ranks, out, err):
    p = s["parity"]
    if not s["ok"] or not p["ok"] or s["ranks"] != ranks:
        raise Failure("run or parity failed: " + json.dumps(s) + "\n--- stderr\n" + err)
    print(f"{s['schedule']} on {s['ranks']} ranks ({s['transport']}): loss {s['loss']:.6g}, parity ok, "
          f"max_rel_error {p['max_rel_error']:.3g} over {p['tensors']} gradients")


def check_local_world(s, local_world, err):
    """--cpu-bind auto read torchrun's LOCAL_WORLD_SIZE (exec/cpu_binding.hpp): every rank's reason
    names it, whether it bound the rank (enough free CPUs) or not."""
    allowed = os.sched_getaffinity(0)
    for b in s["cpu_binding"]["ranks"]:
        if len(allowed) != os.cpu_count():
            expect = "already restricted"
        elif local_world <= len(allowed):
            expect = f"of {local_world} bound to CPUs"
        else:
            expect = f"{local_world} ranks on {len(allowed)} CPUs"
        if expect not in b["reason"]:
            raise Failure(f"rank {b['rank']}'s CPU binding does not follow LOCAL_WORLD_SIZE={local_world} "
                          f"(expected '{expect}'): {b}\n--- stderr\n{err}")
    print("cpu binding: " + "; ".join(f"rank {b['rank']}: {b['reason']}" for b in s["cpu_binding"]["ranks"]))


@case("torchrun_default_rendezvous_pp4")
def _(ctx):
    # torchrun's default is the static rendezvous: its agent hosts a TCPStore on
    # MASTER_ADDR:MASTER_PORT and sets TORCHELASTIC_USE_AGENT_STORE=True. Before, rank 0 tried
    # to host a second store on that port and failed with errno 98.
    port = free_port()
    t0 = time.monotonic()
    rc, out, err = finish(torchrun(ctx, 4, PP4 + ["--check-parity", "--json", "--timeout", "60"],
                                   extra=["--master_port", str(port)]))
    if rc != 0:
        raise Failure(f"torchrun exited {rc}\n--- stdout\n{out}\n--- stderr\n{err}")
    s = json_summary(out, err)
    check_parity(s, 4, out, err)
    check_local_world(s, 4, err)
    print(f"torchrun --nproc_per_node 4 --master_port {port} (static rendezvous, agent store): ok in "
          f"{time.monotonic() - t0:.1f} s")


def two_agents(ctx, args, port):
    """Two torchrun agents ("nodes") of two workers each meeting through the c10d rendezvous at
    127.0.0.1:port; both must exit 0 and only rank 0 prints a JSON summary. Returns (stdout,
    stderr) of both."""
    agents = []
    for node in (0, 1):
        agents.append(torchrun(ctx, 2, args + ["--check-parity", "--json", "--timeout", "60"],
                               extra=["--nnodes", "2", "--node_rank", str(node), "--rdzv_backend", "c10d",
                                      "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", f"ppsched-{port}"]))
    results = [finish(a) for a in agents]
    for node, (rc, out, err) in enumerate(results):
        if rc != 0:
            raise Failure(f"agent {node} exited {rc}\n--- stdout\n{out}\n--- stderr\n{err}")
    summaries = [ln for rc, out, err in results for ln in out.splitlines() if '"parity"' in ln]
    if len(summaries) != 1:
        raise Failure(f"expected one JSON summary (rank 0's), got {len(summaries)}: {summaries}")
    return "\n".join(r[1] for r in results), "\n".join(r[2] for r in results)


@case("torchrun_two_agents_c10d_pp4")
def _(ctx):
    # Two "nodes" on this machine: two agents meeting through the c10d rendezvous, two workers
    # each; the agents pick MASTER_ADDR/MASTER_PORT and rank 0 hosts the store there.
    port = free_port()
    t0 = time.monotonic()
    out, err = two_agents(ctx, PP4, port)
    s = json_summary(out, err)
    check_parity(s, 4, out, err)
    check_local_world(s, 2, err)  # each agent's two workers: LOCAL_WORLD_SIZE 2, not the world's 4
    print(f"two torchrun agents x 2 workers, c10d rendezvous at 127.0.0.1:{port}: ok in {time.monotonic() - t0:.1f} s")


@case("torchrun_two_agents_c10d_pp2_dp2_fsdp")
def _(ctx):
    # The two-node run: two agents (one per "node"), two workers each, a 1F1B pipeline
    # of 2 ranks replicated twice (--dp 2, DeviceMesh ("dp", "pp"): node 0 holds replica 0,
    # node 1 replica 1), parameters sharded over each DP group (--fsdp).
    port = free_port()
    t0 = time.monotonic()
    args = ["--generate", "1f1b", "--pp", "2", "--micro", "4", "--fsdp-steps", "--dp", "2", "--fsdp"] + GPT
    out, err = two_agents(ctx, args, port)
    s = json_summary(out, err)
    check_parity(s, 2, out, err)
    if s.get("dp") != 2 or s.get("world_size") != 4 or not s.get("fsdp"):
        raise Failure("the summary does not describe a PP=2 x DP=2 --fsdp job: " + json.dumps(s))
    print(f"two torchrun agents x 2 workers, PP=2 x DP=2 --fsdp, c10d rendezvous at 127.0.0.1:{port}: ok in "
          f"{time.monotonic() - t0:.1f} s")


FAILURE_BLOCK = re.compile(r"^\s*rank\s*:\s*(\d+) \(local_rank: (\d+)\)\s*$", re.M)


def summary_failures(err):
    """torchrun's "Failures / Root Cause" summary: [(rank, error_file, traceback text)]."""
    m = err.rfind("Root Cause (first observed failure):")
    if m < 0:
        raise Failure("torchrun printed no failure summary:\n" + err)
    start = err.rfind("Failures:", 0, m)
    blocks = re.split(r"\n\s*\[\d+\]:\n", err[start:])
    found = []
    for b in blocks[1:]:
        r = FAILURE_BLOCK.search(b)
        f = re.search(r"error_file:\s*(\S+)", b)
        t = re.search(r"traceback\s*:\s*(.*?)(?:\n-{5,}|\n={5,}|\Z)", b, re.S)
        if r and f:
            found.append((int(r.group(1)), f.group(1), t.group(1) if t else ""))
    return found, err[m:]


@case("torchrun_failure_summary_names_the_rank_and_its_message")
def _(ctx):
    # Rank 2 throws at step 6; every rank exits 1, each writes TORCHELASTIC_ERROR_FILE, and
    # torchrun's summary quotes the messages instead of "error_file: <N/A>".
    port = free_port()
    args = PP4 + ["--timeout", "30", "--heartbeat-timeout", "3", "--fail-at", "2:6:throw"]
    rc, out, err = finish(torchrun(ctx, 4, args, extra=["--master_port", str(port)]))
    if rc == 0:
        raise Failure("torchrun exited 0 although rank 2 failed\n" + err)
    failures, root = summary_failures(err)
    if not failures:
        raise Failure("no failure entries in torchrun's summary:\n" + err)
    for rank, error_file, tb in failures:
        if error_file == "<N/A>":
            raise Failure(f"rank {rank}: error_file <N/A> in torchrun's summary:\n" + err)
        if "rank 2 failed at iteration 0, step 6 (" not in tb or "injected fault" not in tb:
            raise Failure(f"rank {rank}'s entry does not quote rank 2's failure: {tb!r}\n" + err)
    if "rank 2 failed at iteration 0, step 6 (" not in root:
        raise Failure("the root cause does not name rank 2's failure:\n" + root)
    print(f"torchrun exit {rc}; summary entries for ranks {sorted(r for r, _, _ in failures)}; root cause:")
    for ln in root.splitlines()[:12]:
        print("   " + ln)


@case("torchrun_refusal_reaches_the_summary")
def _(ctx):
    # A refusal before any communication (exit 2) is reported the same way.
    rc, out, err = finish(torchrun(ctx, 2, ["--generate", "1f1b", "--pp", "2", "--micro", "4", "--lr", "nan"] + GPT,
                                   extra=["--master_port", str(free_port())]), limit=90)
    failures, root = summary_failures(err)
    ranks = sorted(r for r, _, _ in failures)
    if rc == 0 or not failures or any(f == "<N/A>" for _, f, _ in failures):
        raise Failure(f"exit {rc}, failures {failures}:\n{err}")
    if "--lr: 'nan' is not a learning rate" not in root or "exited with status 2" not in root:
        raise Failure("the summary does not quote the refusal:\n" + root)
    print(f"refusal in torchrun's summary (ranks {ranks}):")
    for ln in root.splitlines()[:10]:
        print("   " + ln)


# ---- failures in the launcher's language, without torchrun --------------------------------------

def lone_rank(ctx, args, world=2, rank=1, extra_env=None, limit=60):
    """ONE rank of a WORLD_SIZE-rank job with nobody else started: any attempt to communicate
    would block until --timeout (60 s unless the case sets one); a refusal returns at once."""
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1")
    env.update(extra_env or {})
    if "--timeout" not in args:
        args = args + ["--timeout", "60"]
    t0 = time.monotonic()
    p = subprocess.run([ctx.exe] + args, env=env, capture_output=True, text=True, timeout=limit + 30)
    return p.returncode, p.stdout + p.stderr, time.monotonic() - t0


FLAG_CASES = [
    # (flags, what the refusal must say)
    (["--lr", "nan"], "--lr: 'nan' is not a learning rate: it must be a finite number >= 0"),
    (["--lr", "-0.5"], "--lr: '-0.5' is not a learning rate"),
    (["--timeout", "nan"], "--timeout: 'nan' is out of range: it must be a number of seconds in 0.001..86400"),
    (["--timeout", "1e300"], "--timeout: '1e300' is out of range: it must be a number of seconds in 0.001..86400"),
    (["--timeout", "0"], "--timeout: '0' is out of range: it must be a number of seconds in 0.001..86400"),
    (["--heartbeat-timeout", "-1"], "--heartbeat-timeout: '-1' is out of range: it must be a number of seconds in 0.5..86400"),
    (["--seed", "-1"], "--seed: wants an integer in 0..18446744073709551615, got '-1'"),
    (["--tower-layers", "-3"], "--tower-layers: '-3' is out of range: it must be an integer in 0..1048576"),
    (["--fail-at", "5:3"], "--fail-at 5:3: rank 5 is not one of the schedule's ranks 0..1"),
    (["--fail-at", "1:999"], "--fail-at 1:999: rank 1's program has steps 0.."),
    (["--fail-at", "1:2:throw:4"], "--fail-at 1:2: iteration 4 is not run (--iterations 1: iterations 0..0)"),
]


@case("flags_out_of_range_are_refused_before_any_communication")
def _(ctx):
    base = ["--generate", "1f1b", "--pp", "2", "--micro", "4"] + GPT
    for flags, needle in FLAG_CASES:
        args = base + flags if "--timeout" in flags else base + flags + ["--timeout", "60"]
        rc, text, dt = lone_rank(ctx, args)
        if rc != 2 or needle not in text or dt > 20:
            raise Failure(f"{' '.join(flags)}: expected exit 2 within seconds saying '{needle}', got {rc} after {dt:.1f} s:\n{text}")
        print(f"{' '.join(flags):24s} -> exit 2 in {dt:.1f} s: {text.strip().splitlines()[0]}")


@case("c10_out_of_memory_is_a_located_error_on_every_rank")
def _(ctx):
    # --hidden 1000000000: each MLP block's weight is 4e18 bytes; libtorch's allocator throws
    # c10::Error. Every rank says where (building its model), exits 1, prints no C++ backtrace
    # and is never ended by std::terminate.
    args = ["--generate", "1f1b", "--pp", "2", "--micro", "2", "--model", "mlp", "--layers", "2", "--hidden", "1000000000",
            "--timeout", "30", "--heartbeat-timeout", "3"]
    cmd = [sys.executable, ctx.launcher, "2", "--grace", "20", "--", ctx.exe] + args
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=dict(os.environ, OMP_NUM_THREADS="1"))
    dt = time.monotonic() - t0
    text = p.stdout + p.stderr
    if p.returncode not in (1, 2):
        raise Failure(f"exit {p.returncode}, expected 1 or 2:\n{text}")
    for bad in ("terminate called", "frame #", "Exception raised from", "Aborted"):
        if bad in text:
            raise Failure(f"the output contains '{bad}':\n{text}")
    for r in (0, 1):
        mine = [ln for ln in text.splitlines() if ln.startswith(f"[rank {r}] error:")]
        if not any("while building its model" in ln and "memory" in ln for ln in mine):
            raise Failure(f"rank {r} did not report the allocation failure with its place:\n{text}")
    print(f"exit {p.returncode} on both ranks in {dt:.1f} s:")
    for ln in text.splitlines():
        if "error:" in ln:
            print("   " + ln)
    # --verbose keeps libtorch's C++ backtrace (one process is enough).
    rc, verbose, _ = lone_rank(ctx, ["--generate", "1f1b", "--pp", "1", "--micro", "1", "--model", "mlp", "--layers", "1",
                                     "--hidden", "1000000000", "--verbose"], world=1, rank=0)
    if rc != 1 or "frame #0:" not in verbose:
        raise Failure(f"--verbose: expected exit 1 and libtorch's backtrace, got {rc}:\n{verbose}")
    print(f"--verbose: the backtrace is printed ({verbose.count('frame #')} frames)")


@case("store_port_taken_is_reported_at_once")
def _(ctx):
    # Rank 0 of a 2-rank job whose MASTER_PORT another process holds: the bind fails at once,
    # and the message says so instead of blaming a 60 s timeout.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        rc, text, dt = lone_rank(ctx, ["--generate", "1f1b", "--pp", "2", "--micro", "4"] + GPT, rank=0,
                                 extra_env={"MASTER_PORT": str(port)})
    needle = f"rank 0 cannot host the rendezvous store on 127.0.0.1:{port} (failed after"
    if rc != 1 or needle not in text or "within" in text or dt > 20:
        raise Failure(f"expected exit 1 at once saying '{needle}', got {rc} after {dt:.1f} s:\n{text}")
    print(f"port taken: exit 1 in {dt:.1f} s: {text.strip().splitlines()[-1]}")


@case("missing_launcher_variables_are_named")
def _(ctx):
    base = ["--generate", "1f1b", "--pp", "2", "--micro", "4"] + GPT
    env = dict(os.environ, RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", MASTER_ADDR="127.0.0.1")
    env.pop("MASTER_PORT", None)
    for drop, needle in (("MASTER_PORT", "MASTER_PORT is not set"), ("LOCAL_RANK", "LOCAL_RANK is not set")):
        e = dict(env, MASTER_PORT=str(free_port()))
        e.pop(drop)
        p = subprocess.run([ctx.exe] + base, env=e, capture_output=True, text=True, timeout=60)
        if p.returncode != 2 or needle not in p.stderr:
            raise Failure(f"without {drop}: expected exit 2 saying '{needle}', got {p.returncode}:\n{p.stderr}")
        print(f"without {drop}: {p.stderr.strip().splitlines()[0]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--exe")
    ap.add_argument("--launcher", help="tools/launch-local")
    ap.add_argument("--torchrun", default=None, help="torchrun (default: found on PATH)")
    ap.add_argument("case", nargs="?")
    ctx = ap.parse_args()
    if ctx.list:
        print("\n".join(CASES))
        return 0
    if ctx.case not in CASES:
        print(f"unknown case {ctx.case}", file=sys.stderr)
        return 2
    ctx.torchrun = ctx.torchrun or shutil.which("torchrun")
    try:
        CASES[ctx.case](ctx)
    except Skip as e:
        print(f"SKIPPED {ctx.case}: {e}")
        return SKIP
    except Failure as e:
        print(f"FAILED {ctx.case}: {e}", file=sys.stderr)
        return 1
    except subprocess.TimeoutExpired as e:
        print(f"FAILED {ctx.case}: timed out: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
