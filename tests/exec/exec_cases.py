#!/usr/bin/env python3
"""The executor's multi-process tests: every case starts real ppsched-exec processes (through
tools/launch-local, or directly with launcher variables), so ranks talk over Gloo exactly as
they would in production. Nothing forks after torch ran: each rank is its own exec'd process.

    exec_cases.py --list                      the case names (meson registers one test each)
    exec_cases.py --exe E --launcher L --data D CASE
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import shutil
import sys
import tempfile
import time

from harness import GPT, Failure, free_port, registry, strict_json

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from schedules import move_reduce_grad_before_tower  # noqa: E402
from matrix import MATRIX_MODES, cell

MLP = ["--model", "mlp", "--layers", "8", "--hidden", "16", "--micro-batch-size", "2"]

CASES, case = registry()


def launch(ctx, ranks, args, expect_rc=0, grace=20, limit=120, cpus=None):
    """Runs `ranks` ranks of ppsched-exec ARGS (on the CPU set `cpus`, as taskset would, when
    given); returns (rc, stdout, stderr, seconds)."""
    cmd = [sys.executable, ctx.launcher, str(ranks), "--grace", str(grace), "--", ctx.exe] + args
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit,
                       preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus))
    dt = time.monotonic() - t0
    if expect_rc is not None and (p.returncode == 0) != (expect_rc == 0):
        raise Failure(f"exit status {p.returncode}, expected {'0' if expect_rc == 0 else 'non-zero'}\n"
                      f"command: {' '.join(cmd)}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
    return p.returncode, p.stdout, p.stderr, dt


def summary(stdout):
    for line in stdout.splitlines():
        m = re.match(r"\[rank 0\] (\{.*\})$", line)
        if m:
            return strict_json(m.group(1))
    raise Failure("rank 0 printed no JSON summary:\n" + stdout)


def expect_parity(s, err, what, dt):
    """Prints the run's parity line (`what` names the run) and fails unless the run and its
    parity check passed."""
    p = s["parity"]
    print(f"{what}: parity ok={p['ok']} max_rel_error={p['max_rel_error']:.3g} loss_rel_error={p['loss_rel_error']:.3g} "
          f"over {p['tensors']} gradients ({dt:.1f} s wall)")
    if not p["ok"] or not s["ok"]:
        raise Failure("parity failed: " + json.dumps(p, indent=1) + "\n" + err)


def parity_run(ctx, ranks, args, iterations):
    rc, out, err, dt = launch(ctx, ranks, args + ["--check-parity", "--json", "--iterations", str(iterations)])
    s = summary(out)
    expect_parity(s, err, f"{s['schedule']} P={s['ranks']} stages={s['stages']} M={s['micro_batches']} "
                          f"iterations={s['iterations']}, losses={s['losses']}", dt)
    if len(s["losses"]) != iterations:
        raise Failure(f"expected {iterations} losses, got {s['losses']}")


# ---- PyTorch's lowered schedules as ppsched restates PyTorch's lowering (issue 12) --------
# tests/data/schedules/pytorch_comms: the _comms CSV of each _PipelineScheduleRuntime class at
# PP 2..4, M = 2P (what `ppsched generate FAMILY --torch-comms` writes, byte for byte with
# PyTorch's "\r\n"; tests/test_torch_csv_loader.cpp pins them). They carry UNSHARD, RESHARD and
# REDUCE_GRAD (no-ops with one data-parallel rank) and run under --overlap-p2p by default.
PYTORCH_CLASSES = ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")


def pytorch_csv_run(ctx, cls, pp, extra=(), overlap=True, dp=1):
    path = os.path.join(ctx.data, "schedules", "pytorch_comms", f"{cls}_pp{pp}_m{2 * pp}.csv")
    if dp > 1:
        extra = list(extra) + ["--dp", str(dp)]
    rc, out, err, dt = launch(ctx, pp * dp, ["--schedule", path] + list(extra) + GPT + ["--check-parity", "--json"])
    s = summary(out)
    expect_parity(s, err, f"{cls} P={pp} DP={dp} M={2 * pp} overlap_p2p={s['overlap_p2p']}", dt)
    if s["overlap_p2p"] is not overlap:
        raise Failure(f"ran with overlap_p2p={s['overlap_p2p']}, expected {overlap}")
    if dp > 1 and s.get("dp") != dp:
        raise Failure(f"the summary says dp={s.get('dp')}, expected {dp}")


for _cls in PYTORCH_CLASSES:
    for _pp in (2, 3, 4):
        for _dp in (1, 2):
            def _torch(ctx, cls=_cls, pp=_pp, dp=_dp):
                pytorch_csv_run(ctx, cls, pp, dp=dp)
            case(f"pytorch_comms_{_cls}_pp{_pp}" + ("" if _dp == 1 else f"_dp{_dp}"))(_torch)


@case("pytorch_comms_no_overlap_p2p_override_pp2")
def _(ctx):
    # The same file, run blocking on request.
    pytorch_csv_run(ctx, "Interleaved1F1B", 2, extra=["--no-overlap-p2p"], overlap=False)


# ---- gradient parity: what the matrix below does not cover ----------------------------------

@case("parity_tied_embeddings_same_rank_zbv_pp2")
def _(ctx):
    # V placement puts stage 0 and the last stage on rank 0: one shared tensor, no ALL_REDUCE.
    parity_run(ctx, 2, ["--generate", "zbv", "--vpp", "2", "--pp", "2", "--micro", "4", "--tie-embeddings"] + GPT,
               iterations=2)


# ---- the mode x family x PP parity matrix ---------------------------------------------------
# Every runtime mode the executor takes (the flags of `ppsched check`), for every family, at
# PP=2 and PP=4 on Gloo (the cells: tests/exec/matrix.py): one meson test per (mode, PP),
# running each family in turn and printing one line per run and a table at the end. PP=2 runs
# two iterations (caches must be empty in between, gradients accumulate), PP=4 one.

def _family_args(ctx, name, pp):
    c = cell(name, pp, ctx.data)
    return c.exec_args() + GPT + c.model


def matrix_run(ctx, mode, pp):
    flags, families = MATRIX_MODES[mode]
    iterations = 2 if pp == 2 else 1
    rows, failures = [], []
    for fam in families:
        args = _family_args(ctx, fam, pp) + flags + ["--check-parity", "--json", "--iterations", str(iterations)]
        try:
            rc, out, err, dt = launch(ctx, pp, args)
            s = summary(out)
            p = s["parity"]
            ok = p["ok"] and s["ok"] and len(s["losses"]) == iterations
            rows.append((fam, ok, p["max_rel_error"], p["loss_rel_error"], p["tensors"], dt))
            if not ok:
                failures.append(f"{fam}: parity failed: {json.dumps(p)}\n{err}")
        except (Failure, subprocess.TimeoutExpired) as e:
            rows.append((fam, False, float("nan"), float("nan"), 0, 0.0))
            failures.append(f"{fam}: {e}")
    print(f"matrix mode={mode} PP={pp} (iterations {iterations}):")
    print(f"  {'family':28s} {'parity':6s} {'max_rel_error':>13s} {'loss_rel_error':>14s} {'gradients':>9s} {'wall s':>7s}")
    for fam, ok, mx, lo, n, dt in rows:
        print(f"  {fam:28s} {'ok' if ok else 'FAIL':6s} {mx:13.3g} {lo:14.3g} {n:9d} {dt:7.1f}")
    if failures:
        raise Failure(f"{len(failures)} of {len(rows)} runs failed:\n" + "\n".join(failures))


for _mode in MATRIX_MODES:
    for _pp in (2, 4):
        def _matrix(ctx, mode=_mode, pp=_pp):
            matrix_run(ctx, mode, pp)
        case(f"matrix_{_mode}_pp{_pp}")(_matrix)


def expect_parity_failure(ctx, ranks, args, min_error, worst, what):
    """A negative control: the run (with a --fail-at ...:corrupt) must fail the parity check
    (exit 1, parity.ok false) with a max relative error of at least `min_error`, its worst
    gradient naming `worst`."""
    rc, out, err, _ = launch(ctx, ranks, args + ["--check-parity", "--json"], expect_rc=1)
    p = summary(out)["parity"]
    if p["ok"] or p["max_rel_error"] < min_error or worst not in p["worst"]:
        raise Failure(f"the run with {what} passed the parity check: " + json.dumps(p))
    print(f"{what} detected: max_rel_error={p['max_rel_error']:.3g} ({p['worst']})")


@case("parity_check_detects_a_wrong_gradient")
def _(ctx):
    # Negative control: scale rank 1's gradients by 1.001 after one of its steps; the parity
    # check must fail (exit 1, parity.ok false).
    expect_parity_failure(ctx, 2, ["--generate", "1f1b", "--pp", "2", "--micro", "4", "--fail-at", "1:3:corrupt"] + GPT,
                          1e-4, "", "corrupted gradients")


# ---- hyper-parallel's body data steps (--data-steps; mpipe-transpose's default) ------------
# Each micro-batch's inputs and labels travel with its forward (DATA_SEND / DATA_RECV beside
# every cross-rank forward, a DATA_LOAD on stage 0): the last stage computes its loss from the
# labels it received. The matrix's MPipe cells run with them (their default); these cases run
# the other families, V placement's local hand-over (zbv, dualpipev) and Megatron's groups.
DATA_STEP_RUNS = {
    2: [["gpipe", "--micro", "4"], ["1f1b", "--micro", "4"], ["interleaved-1f1b", "--vpp", "2", "--micro", "4"],
        ["interleaved-1f1b", "--vpp", "2", "--micro", "4", "--overlap-b-f", "--dxdw-split"],
        ["interleaved-1f1b", "--vpp", "2", "--micro", "5", "--group-size", "5"],
        ["looped-bfs", "--vpp", "2", "--micro", "4"], ["zbv", "--vpp", "2", "--micro", "4"],
        ["dualpipev", "--vpp", "2", "--micro", "4"]],
    4: [["1f1b", "--micro", "8"], ["interleaved-1f1b", "--vpp", "2", "--micro", "8"],
        ["interleaved-1f1b", "--vpp", "2", "--micro", "10", "--group-size", "5"], ["zbv", "--vpp", "2", "--micro", "8"]],
}

for _pp in DATA_STEP_RUNS:
    def _data_steps(ctx, pp=_pp):
        for gen in DATA_STEP_RUNS[pp]:
            parity_run(ctx, pp, ["--generate"] + gen + ["--pp", str(pp), "--data-steps"] + GPT,
                       iterations=2 if pp == 2 else 1)
    case(f"parity_data_steps_pp{_pp}")(_data_steps)


@case("data_steps_loss_uses_the_labels_that_arrived_pp2")
def _(ctx):
    # Negative control: perturb the micro-batch rank 1 (the last stage) receives at its step 1
    # (1f1b --data-steps: DATA_LOAD0, DATA_RECV0, FWD_RECV0, FWD0, ...); its loss must see it.
    expect_parity_failure(ctx, 2, ["--generate", "1f1b", "--pp", "2", "--micro", "4", "--data-steps",
                                   "--fail-at", "1:1:corrupt"] + GPT, 1e-4, "", "perturbed received labels")


# ---- replicated stages (chimera, dualpipe) ---------------------------------------------------
# Two copies of the pipeline on the same ranks: rank r builds model stage r of one copy and
# P-1-r of the other (same units, same initial values), each copy runs its own micro-batches,
# and REPLICA_GRAD_SYNC adds up the copies' gradients (Gloo all-reduce over the two ranks), so
# every copy ends with the single-process gradient of the whole batch.
REPLICATED_RUNS = [["chimera", "--micro", "8"], ["chimera", "--micro", "8", "--data-steps"],
                   ["dualpipe", "--micro", "8"], ["dualpipe", "--micro", "8", "--data-steps"]]


@case("parity_replicated_stages_pp4")
def _(ctx):
    for gen in REPLICATED_RUNS:
        parity_run(ctx, 4, ["--generate"] + gen + ["--pp", "4"] + GPT, iterations=2)
    parity_run(ctx, 4, ["--generate", "chimera", "--pp", "4", "--micro", "4"] + MLP, iterations=1)


@case("parity_combined_1f1b_pp2_pp4")
def _(ctx):
    # Megatron-Core's combined 1F1B (issue 39): its merged steps are OVERLAP_F_B composites, run
    # sub-step after sub-step on this dense model (the expert all-to-alls they exist to hide are
    # not in it); the order Megatron's code runs (tests/test_peer_orders.cpp), with its one extra
    # warm-up forward, trains to the reference gradients.
    parity_run(ctx, 2, ["--generate", "combined-1f1b", "--pp", "2", "--vpp", "2", "--micro", "4"] + GPT, iterations=2)
    parity_run(ctx, 4, ["--generate", "combined-1f1b", "--pp", "4", "--vpp", "2", "--micro", "8"] + MLP, iterations=1)


@case("replicated_stages_without_sync_diverge_pp4")
def _(ctx):
    # Negative control: the same chimera schedule without its REPLICA_GRAD_SYNC steps (run with
    # --no-verify: ppsched check refuses it) leaves each copy with half the batch's gradients.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "chimera.json")
        run_ppsched(ctx, ["generate", "chimera", "--pp", "4", "--micro", "8", "-o", path])
        with open(path) as f:
            sched = json.load(f)
        for prog in sched["programs"]:
            prog[:] = [st for st in prog if not (isinstance(st, dict) and st.get("op") == "REPLICA_GRAD_SYNC")]
        with open(path, "w") as f:
            json.dump(sched, f)
        run_ppsched(ctx, ["check", path], expect_rc=1)
        expect_parity_failure(ctx, 4, ["--schedule", path, "--no-verify"] + GPT, 0.1, "", "copies never synced")


# ---- pipeline x data parallel (--dp, --mesh-order, --fsdp) ----------------------------------

def fsdp_schedule(ctx, generate, unshard_reshard=True):
    """A generated schedule with PyTorch's FSDP steps (`ppsched generate --fsdp-steps`), as a
    file; without UNSHARD/RESHARD when unshard_reshard is false (a refusal case)."""
    d = tempfile.mkdtemp(prefix="ppsched-dp-")
    ctx.cleanup.append(d)
    path = os.path.join(d, "sched.json")
    run_ppsched(ctx, ["generate"] + generate + ["--fsdp-steps", "-o", path])
    if not unshard_reshard:
        with open(path) as f:
            doc = json.load(f)
        doc["programs"] = [[st for st in prog if not (st and st.get("op") in ("FSDP_UNSHARD", "FSDP_RESHARD"))]
                           for prog in doc["programs"]]
        with open(path, "w") as f:
            json.dump(doc, f)
    return path


def dp_run(ctx, pp, dp, generate, flags, model=GPT, iterations=2):
    """PP x DP ranks with parity against one process running all DP x M micro-batches."""
    path = fsdp_schedule(ctx, generate + ["--pp", str(pp)])
    rc, out, err, dt = launch(ctx, pp * dp, ["--schedule", path, "--dp", str(dp), "--check-parity", "--json",
                                             "--iterations", str(iterations)] + flags + model)
    s = summary(out)
    expect_parity(s, err, f"{s['schedule']} PP={s['ranks']} x DP={s['dp']} ({s['world_size']} processes, mesh "
                          f"{s['mesh']['order']}, fsdp={s['fsdp']}), losses={s['losses']}", dt)
    if s["dp"] != dp or s["world_size"] != pp * dp or s["mesh"]["shape"] != [dp, pp]:
        raise Failure(f"the summary does not state the mesh: {json.dumps(s)}")
    order = s["mesh"]["order"]
    want = [{"dp": g // pp, "pp": g % pp} if order == "dp,pp" else {"dp": g % dp, "pp": g // dp} for g in range(pp * dp)]
    if s["mesh"]["coordinates"] != want:
        raise Failure(f"mesh coordinates {s['mesh']['coordinates']}, expected {want}")
    # What each rank holds after the run: with --fsdp (DP > 1) and the stages resharded, only
    # its shards (ceil(elements / DP) per stage); otherwise every parameter of its stages.
    full, held = s["parameter_elements"], s["held_parameter_elements"]
    for g in range(pp * dp):
        want = full[g] if "--fsdp" not in flags or dp == 1 else None
        if want is None:
            if not (full[g] / dp <= held[g] <= full[g] / dp + 2 * dp):
                raise Failure(f"rank {g} holds {held[g]} of its {full[g]} parameter elements with --fsdp over {dp} replicas")
        elif held[g] != want:
            raise Failure(f"rank {g} holds {held[g]} parameter elements, its stages have {want}")
    print(f"parameter elements per rank: {full}; held after the run: {held}")
    if len(s["losses"]) != iterations:
        raise Failure(f"expected {iterations} losses, got {s['losses']}")
    return s


DP_CASES = {
    # name: (pp, dp, generator args, flags)
    "1f1b_pp2_dp2": (2, 2, ["1f1b", "--micro", "4"], []),
    "interleaved_pp2_dp2_mesh_pp_dp": (2, 2, ["interleaved-1f1b", "--vpp", "2", "--micro", "4"], ["--mesh-order", "pp,dp"]),
    "zbv_pp2_dp2": (2, 2, ["zbv", "--vpp", "2", "--micro", "4"], []),
    "gpipe_pp2_dp2_overlap_p2p": (2, 2, ["gpipe", "--micro", "4"], ["--overlap-p2p"]),
    "gpipe_pp2_dp2_fsdp": (2, 2, ["gpipe", "--micro", "4"], ["--fsdp"]),
    "1f1b_pp2_dp2_fsdp": (2, 2, ["1f1b", "--micro", "4"], ["--fsdp"]),
    "interleaved_pp2_dp2_fsdp": (2, 2, ["interleaved-1f1b", "--vpp", "2", "--micro", "4"], ["--fsdp"]),
    "zbv_pp2_dp2_fsdp_mesh_pp_dp": (2, 2, ["zbv", "--vpp", "2", "--micro", "4"], ["--fsdp", "--mesh-order", "pp,dp"]),
    "1f1b_pp1_dp3_fsdp": (1, 3, ["1f1b", "--micro", "2"], ["--fsdp"]),
}
for _name, (_pp, _dp, _gen, _flags) in DP_CASES.items():
    def _dp_case(ctx, pp=_pp, dp=_dp, gen=_gen, flags=_flags):
        dp_run(ctx, pp, dp, gen, flags)
    case(f"parity_dp_{_name}")(_dp_case)


# ---- MoE with expert parallelism (--model moe --ep N, issue 39) ------------------------------
# The experts of each block are split over the pipeline rank's data-parallel group (EP = DP),
# the dispatch and combine all-to-alls run on each rank's comm thread over Gloo, in the order of
# the verified stream lowering (exec/expert_link.hpp); an overlapped step's two sub-steps run on
# two compute threads, one at a time, so one's all-to-all overlaps the other's compute. Parity:
# one process, every expert, every replica's micro-batches.
MOE = ["--model", "moe", "--layers", "6", "--hidden", "16", "--heads", "2", "--seq", "4", "--vocab", "32",
       "--micro-batch-size", "2", "--experts", "4", "--topk", "2"]
MOE_RUNS = {
    "1f1b": ["1f1b", "--micro", "4"],
    "dualpipev": ["dualpipev", "--vpp", "2", "--micro", "4"],
    "combined_1f1b": ["combined-1f1b", "--vpp", "2", "--micro", "4"],
}


def moe_run(ctx, generate, extra=(), iterations=2, pp=2, ep=2):
    path = fsdp_schedule(ctx, generate + ["--pp", str(pp)])
    rc, out, err, dt = launch(ctx, pp * ep, ["--schedule", path, "--ep", str(ep), "--check-parity", "--json",
                                             "--iterations", str(iterations)] + list(extra) + MOE)
    s = summary(out)
    expect_parity(s, err, f"{s['schedule']} PP={s['ranks']} x EP={s['ep']} moe experts={s['experts']} "
                          f"top-{s['topk']}, losses={s['losses']}", dt)
    if s["parity"]["max_rel_error"] > 1e-6:  # exec/README.md, "Experts": below 1e-6
        raise Failure(f"max relative gradient error {s['parity']['max_rel_error']}, more than 1e-6")
    if s["model"] != "moe" or s["ep"] != ep or s["dp"] != ep:
        raise Failure(f"the summary does not state the MoE run: {json.dumps(s)}")
    # Every rank's comm thread ran a dispatch and a combine per MoE block of each forward, and
    # their mirrors in each backward (BWD, or BWD_INPUT; BWD_WEIGHT reuses BWD_INPUT's), and
    # ran some of them while the rank's other compute thread computed where the schedule
    # overlaps two steps.
    want = [iterations * n for n in expected_all_to_alls(path, blocks_per_stage(6, pp_stages(path)))] * ep
    got = s["all_to_alls"]
    if got["calls"] != want:
        raise Failure(f"all-to-alls per rank {got['calls']}, expected {want} from the schedule")
    overlaps = any(st and st.get("op", "").startswith("OVERLAP") for prog in json.load(open(path))["programs"] for st in prog)
    if overlaps != any(n > 0 for n in got["overlapped"]):
        raise Failure(f"overlapped all-to-alls {got['overlapped']}, the schedule {'has' if overlaps else 'has no'} "
                      "overlapped steps")
    print(f"all-to-alls per rank {got['calls']}, of which overlapped with the other sub-step's compute {got['overlapped']}")
    return path, s


def pp_stages(path):
    with open(path) as f:
        return json.load(f)["stages"]


def blocks_per_stage(blocks, stages):
    """The even split (torchtitan's rule, exec/model_layout.cpp): embedding and head count one
    unit each, the first stages take the remainder; returns the MoE blocks of each stage."""
    units = blocks + 2
    sizes = [units // stages + (1 if s < units % stages else 0) for s in range(stages)]
    out, u = [], 0
    for n in sizes:
        out.append(sum(1 for k in range(u, u + n) if 0 < k < units - 1))
        u += n
    return out


def expected_all_to_alls(path, blocks):
    """Per pipeline rank, per iteration: 2 all-to-alls per MoE block of every FWD, BWD and
    BWD_INPUT leaf (composites counted by their leaves)."""
    with open(path) as f:
        doc = json.load(f)
    out = []
    for prog in doc["programs"]:
        n = 0
        for st in prog:
            if not st:
                continue
            for leaf in st.get("sub_steps", [st]):
                if leaf.get("op") in ("FWD", "BWD", "BWD_INPUT"):
                    n += 2 * blocks[leaf["stage"]]
        out.append(n)
    return out


for _name, _gen in MOE_RUNS.items():
    def _moe_case(ctx, gen=_gen):
        moe_run(ctx, gen)
    case(f"parity_moe_ep2_pp2_{_name}")(_moe_case)


def first_overlap(path, rank):
    """Index of the first overlapped step (OVERLAP_F_B / OVERLAP_B_F) of `rank`'s program in a
    schedule file (with MOE's 6 blocks on 4 stages every stage holds MoE blocks)."""
    with open(path) as f:
        doc = json.load(f)
    for i, st in enumerate(doc["programs"][rank]):
        if st and st.get("op", "").startswith("OVERLAP"):
            return i
    raise Failure(f"no overlapped step on rank {rank} of {path}")


@case("moe_ready_order_refused_then_hangs")
def _(ctx):
    # --moe-a2a-order ready: each chain of an overlapped step issues its all-to-alls as soon as
    # it reaches them (Megatron-LM#1810's shared event). The checker finds the race and the run
    # is refused before anything connects; with --no-verify and one rank's forward chain started
    # late (--fail-at R:S:delay), that rank issues combine_bwd first while its partner issues
    # dispatch_fwd: both wait, and every rank exits naming the all-to-all it was stuck in. The
    # same delay under the lowered order changes nothing: the comm thread keeps the order.
    gen = ["combined-1f1b", "--vpp", "2", "--micro", "4"]
    path = fsdp_schedule(ctx, gen + ["--pp", "2"])
    rc, out, err, dt = launch(ctx, 4, ["--schedule", path, "--ep", "2", "--moe-a2a-order", "ready"] + MOE, expect_rc=2)
    if rc != 2 or "collective_order_race" not in err or "refusing to run" not in err:
        raise Failure(f"the ready order was not refused as a collective_order_race (exit {rc}):\n{err}")
    print("refused: " + next(ln for ln in err.splitlines() if "collective_order_race" in ln))
    step = first_overlap(path, 0)
    delay = ["--fail-at", f"2:{step}:delay"]  # global rank 2 = pipeline rank 0 of replica 1
    moe_run(ctx, gen, extra=delay, iterations=1)
    flags, limit = fault_limits(ctx, "timeout")
    rc, out, err, dt = launch(ctx, 4, ["--schedule", path, "--ep", "2", "--moe-a2a-order", "ready", "--no-verify"] + MOE +
                              flags + delay, expect_rc=1, grace=limit, limit=limit + 30)
    lines = [ln for ln in (out + err).splitlines() if "error:" in ln]
    for ln in lines:
        print("   " + ln)
    if dt > limit:
        raise Failure(f"the ranks needed {dt:.1f} s to exit, limit {limit} s")
    # Some expert-parallel group hangs in two different all-to-alls: the delayed rank's group
    # {0,2} at its step, or, as the ready order races wherever two chains overlap, pipeline rank
    # 1's group {1,3} earlier (seen in CI). Every rank names an all-to-all: its own, or through
    # the heartbeats the one its wait chain ends in; and the lines name two different kinds (a
    # rank's line may name both: "all-to-all dispatch_fwd ... not run: an earlier one failed:
    # all-to-all dispatch_bwd ...", its compute thread's and its comm thread's, seen in CI).
    kinds = set()
    for r in range(4):
        mine = " ".join(ln for ln in lines if ln.startswith(f"[rank {r}] error:"))
        if not mine:
            raise Failure(f"rank {r} printed no error line\n{out}\n{err}")
        own = re.findall(r"all-to-all (\w+) of micro-batch \d+ \(step \d+ \S+ sub-step \d\) on expert-parallel group \{\d,\d\}", mine)
        via = re.findall(r"rank \d was last seen at .* in all-to-all (\w+) of micro-batch \d+ on its expert-parallel group", mine)
        if not (own or via):
            raise Failure(f"rank {r} names neither its all-to-all nor the one its wait chain ends in: {mine}")
        kinds.update(own + via)
    if len(kinds) < 2:
        raise Failure(f"the ranks should name the two all-to-alls a group issued in different orders, got {kinds}")
    print(f"all ranks exited non-zero in {dt:.1f} s")


@case("parity_dp_generated_adds_fsdp_steps_pp2_dp2")
def _(ctx):
    # --generate with --dp N inserts PyTorch's FSDP steps itself (and says so): the run is the
    # run of the file `ppsched generate --fsdp-steps` writes, loss for loss.
    gen = ["--generate", "interleaved-1f1b", "--vpp", "2", "--pp", "2", "--micro", "4"]
    common = ["--dp", "2", "--fsdp", "--check-parity", "--json", "--iterations", "2"] + GPT
    rc, out, err, dt = launch(ctx, 4, gen + common)
    s = summary(out)
    expect_parity(s, err, f"generated {s['schedule']} PP=2 x DP=2 --fsdp, losses={s['losses']}", dt)
    if "note: --dp 2: added PyTorch's FSDP steps to the generated interleaved-1f1b schedule" not in err:
        raise Failure("rank 0 did not say that it added the FSDP steps:\n" + err)
    path = fsdp_schedule(ctx, ["interleaved-1f1b", "--vpp", "2", "--pp", "2", "--micro", "4"])
    rc, out2, err2, dt2 = launch(ctx, 4, ["--schedule", path] + common)
    s2 = summary(out2)
    if s2["losses"] != s["losses"]:
        raise Failure(f"generated with --dp: losses {s['losses']}; the --fsdp-steps file: {s2['losses']}")
    print(f"the same losses as the --fsdp-steps file: {s2['losses']}")


@case("parity_dp_tied_embeddings_allreduce_stays_in_its_replica_pp2_dp2")
def _(ctx):
    # The tied-embedding ALL_REDUCE over pipeline ranks [0, 1] runs over global ranks [0, 1] in
    # replica 0 and [2, 3] in replica 1; FSDP_REDUCE_GRAD then averages over [0, 2] and [1, 3].
    d = tempfile.mkdtemp(prefix="ppsched-dp-")
    ctx.cleanup.append(d)
    path = os.path.join(d, "tied.json")
    run_ppsched(ctx, ["convert", os.path.join(ctx.data, "exec", "1f1b_p2_m4_tied.json"), "-o", path, "--fsdp-steps"])
    rc, out, err, dt = launch(ctx, 4, ["--schedule", path, "--dp", "2", "--tie-embeddings", "--check-parity", "--json",
                                       "--iterations", "2"] + GPT)
    p = summary(out)["parity"]
    if not p["ok"]:
        raise Failure("parity failed: " + json.dumps(p, indent=1) + "\n" + err)
    print(f"tied embeddings PP=2 x DP=2: parity ok, max_rel_error={p['max_rel_error']:.3g} over {p['tensors']} gradients")


MPIPE_DP = {
    # MPipe's prefix (DATA_LOAD / DATA_SEND / DATA_RECV, the tower's transposes, the parameter
    # broadcast) inside each replica, on the replica's own micro-batches; a trainable tower's
    # gradients (rank 0, stage-0 backward) averaged by stage 0's FSDP_REDUCE_GRAD.
    "none": (["--tower", "none"], ["--tower-layers", "0"]),
    "none_fsdp": (["--tower", "none"], ["--tower-layers", "0", "--fsdp"]),
    "trainable": (["--tower", "trainable"], ["--tower-layers", "2"]),
    "frozen_mesh_pp_dp": (["--tower", "frozen"], ["--tower-layers", "2", "--mesh-order", "pp,dp"]),
    # --fsdp shards the stages' own parameters; the tower (replicated on every pipeline rank)
    # stays whole and stage 0's REDUCE_GRAD all-reduces its gradients.
    "trainable_fsdp": (["--tower", "trainable"], ["--tower-layers", "2", "--fsdp"]),
    "frozen_fsdp": (["--tower", "frozen"], ["--tower-layers", "2", "--fsdp"]),
}
for _name, (_gen, _flags) in MPIPE_DP.items():
    def _mpipe_dp(ctx, gen=_gen, flags=_flags):
        dp_run(ctx, 2, 2, ["mpipe-transpose", "--vpp", "2", "--micro", "4", "--overflow", "full"] + gen, flags)
    case(f"parity_dp_mpipe_{_name}_pp2_dp2")(_mpipe_dp)


@case("parity_dp_stage_module_zbv_pp2_dp2_fsdp")
def _(ctx):
    d = stage_dir(ctx, 4, "--kind", "mlp")
    dp_run(ctx, 2, 2, ["zbv", "--vpp", "2", "--micro", "4"], ["--fsdp"], model=["--stage-module", d])


@case("fault_dp_step_throws_on_replica_1")
def _(ctx):
    # A step of replica 1 throws: every rank of both replicas exits non-zero naming it.
    path = fsdp_schedule(ctx, ["1f1b", "--pp", "2", "--micro", "4"])
    flags, limit = fault_limits(ctx, "peers")
    fault_run(ctx, 4, ["--schedule", path, "--dp", "2"] + flags + ["--fail-at", "3:4:throw"] + GPT, failing=3, killed=False,
              expect=["rank 3 (dp 1, pp 1) failed at iteration 0, step 4 (", "injected fault"], limit=limit)


@case("trace_dp_is_replica_0_pp2_dp2_fsdp")
def _(ctx):
    # --trace with --dp: replica 0's pipeline, in the simulator's format, FSDP steps on the
    # collective lane; otherData.mesh says which global ranks ran it; calibrate reads it.
    path = fsdp_schedule(ctx, ["1f1b", "--pp", "2", "--micro", "4"])
    with open(path) as f:
        sched = json.load(f)
    trace = os.path.join(os.path.dirname(path), "run.trace.json")
    rc, out, err, dt = launch(ctx, 4, ["--schedule", path, "--dp", "2", "--fsdp", "--mesh-order", "pp,dp",
                                       "--iterations", "2", "--check-parity", "--json", "--trace", trace] + GPT)
    s = summary(out)
    if not s["ok"] or s["trace"]["notes"] or s["trace"]["replica"] != 0:
        raise Failure("run failed or its trace did not pair with the comm model: " + json.dumps(s))
    t, nslices, nflows = check_measured_trace(trace, sched)
    mesh = t["otherData"]["mesh"]
    if mesh["shape"] != [2, 2] or mesh["order"] != "pp,dp" or mesh["global_ranks"] != [0, 2]:
        raise Failure(f"otherData.mesh: {mesh}")
    fsdp = [e for e in t["traceEvents"] if e["ph"] == "X" and e["args"].get("op", "").startswith("FSDP_")]
    if len(fsdp) != 6:
        raise Failure(f"{len(fsdp)} FSDP slices, expected 3 per rank")
    validate_trace(ctx, trace)
    run_ppsched(ctx, ["calibrate", trace, "-o", os.path.join(os.path.dirname(path), "costs.json"), "--schedule", path])
    print(f"replica 0's trace: {nslices} slices ({len(fsdp)} FSDP), {nflows} flows, mesh {mesh}")


@case("parity_dp_pytorch_comms_csv_1f1b_pp2")
def _(ctx):
    # PyTorch's lowered CSV as it writes it (UNSHARD, SEND/RECV, REDUCE_GRAD, RESHARD) runs as is:
    # one pipeline, then two replicas with and without sharding, also with posted receives.
    csv = os.path.join(ctx.data, "schedules", "1f1b_2rank_comms.csv")
    for dp, flags in ((1, []), (2, []), (2, ["--fsdp"]), (2, ["--fsdp", "--overlap-p2p"])):
        rc, out, err, dt = launch(ctx, 2 * dp, ["--schedule", csv, "--dp", str(dp), "--check-parity", "--json",
                                                "--iterations", "2"] + flags + GPT)
        s = summary(out)
        if not s["ok"] or not s["parity"]["ok"] or s["dp"] != dp:
            raise Failure(f"--dp {dp} {flags}: " + json.dumps(s) + "\n" + err)
        print(f"{os.path.basename(csv)} --dp {dp} {' '.join(flags)}: parity ok, max_rel_error "
              f"{s['parity']['max_rel_error']:.3g} over {s['parity']['tensors']} gradients")


@case("parity_dp_fsdp_regathers_and_reshards_before_reduce_grad_pp2_dp2")
def _(ctx):
    # PyTorch reshards a stage when too many are active and gathers it again before its next
    # action: here every stage is resharded and regathered between its forwards and its first
    # backward (the autograd graph then runs on the regathered copy), and resharded before its
    # REDUCE_GRAD (the gradients wait beside the shard until the reduction).
    path = fsdp_schedule(ctx, ["gpipe", "--pp", "2", "--micro", "4"])
    with open(path) as f:
        doc = json.load(f)
    for r, prog in enumerate(doc["programs"]):
        out, seen_bwd = [], False
        for st in prog:
            if st and st["op"] == "FSDP_RESHARD":
                continue
            if st and st["op"] == "BWD" and not seen_bwd:
                seen_bwd = True
                out += [{"op": "FSDP_RESHARD", "stage": r}, {"op": "FSDP_UNSHARD", "stage": r}]
            if st and st["op"] == "FSDP_REDUCE_GRAD":
                out.append({"op": "FSDP_RESHARD", "stage": r})
            out.append(st)
        doc["programs"][r] = out
    with open(path, "w") as f:
        json.dump(doc, f)
    rc, out, err, dt = launch(ctx, 4, ["--schedule", path, "--dp", "2", "--fsdp", "--check-parity", "--json",
                                       "--iterations", "2"] + GPT)
    s = summary(out)
    if not s["ok"] or not s["parity"]["ok"]:
        raise Failure("parity failed: " + json.dumps(s, indent=1) + "\n" + err)
    print(f"regathered between forward and backward, resharded before REDUCE_GRAD: parity ok, max_rel_error "
          f"{s['parity']['max_rel_error']:.3g} over {s['parity']['tensors']} gradients; held {s['held_parameter_elements']}")


@case("parity_dp_fsdp_steps_are_noops_at_dp1_pp2")
def _(ctx):
    # A PyTorch-style schedule (UNSHARD / REDUCE_GRAD / RESHARD) on one pipeline: the FSDP steps
    # do nothing, with or without --fsdp.
    for flags in ([], ["--fsdp"]):
        dp_run(ctx, 2, 1, ["interleaved-1f1b", "--vpp", "2", "--micro", "4"], flags)


@case("parity_dp_detects_a_wrong_gradient_on_one_replica")
def _(ctx):
    # Negative control: replica 1's pipeline rank 1 (global rank 3) scales its gradients by
    # 1.001 after its first backward; the averaged gradients then differ from the reference
    # on every replica, and the check must fail.
    path = fsdp_schedule(ctx, ["1f1b", "--pp", "2", "--micro", "4"])
    with open(path) as f:
        prog = json.load(f)["programs"][1]
    step = next(i for i, st in enumerate(prog) if st and st["op"] == "BWD")
    expect_parity_failure(ctx, 4, ["--schedule", path, "--dp", "2", "--fail-at", f"3:{step}:corrupt"] + GPT, 1e-5, "(dp ",
                          "a corrupted replica")


@case("refuses_dp_mistakes")
def _(ctx):
    one = ["--generate", "1f1b", "--pp", "2", "--micro", "4"] + GPT
    expect_refusal(ctx, one + ["--dp", "2"], "WORLD_SIZE is 3 but --dp 2 replicas of the 2-rank pipeline need 2 x 2 = 4 "
                   "processes", world=3)
    expect_refusal(ctx, one, "WORLD_SIZE is 4 but the schedule has 2 ranks", world=4)
    # A file without FSDP steps: nothing averages the gradients, the replicas would diverge;
    # refused with the fix, in one message (no second, generic line after the reason).
    d = tempfile.mkdtemp(prefix="ppsched-dp-")
    ctx.cleanup.append(d)
    bare = os.path.join(d, "1f1b_p2_m4_no_fsdp.json")
    run_ppsched(ctx, ["generate", "1f1b", "--pp", "2", "--micro", "4", "-o", bare])
    rc, text, dt = lone_rank(ctx, ["--schedule", bare, "--dp", "2"] + GPT, world=4)
    errors = [ln for ln in text.splitlines() if "error:" in ln]
    if rc != 2 or len(errors) != 1 or "--dp 2: the schedule has no FSDP_* steps" not in errors[0] \
            or not errors[0].endswith("nothing was run"):
        raise Failure(f"expected one error line naming the missing FSDP steps, exit 2; got {rc}:\n{text}")
    print("refused in one line: " + errors[0][:120] + "...")
    # A stage without its REDUCE_GRAD: the verifier's data-parallel pass names it.
    no_rg = fsdp_schedule(ctx, ["1f1b", "--pp", "2", "--micro", "4"])
    with open(no_rg) as f:
        doc = json.load(f)
    doc["programs"][0] = [st for st in doc["programs"][0] if not (st and st["op"] == "FSDP_REDUCE_GRAD")]
    with open(no_rg, "w") as f:
        json.dump(doc, f)
    expect_refusal(ctx, ["--schedule", no_rg, "--dp", "2"] + GPT, "the weight gradients of stage 0 are never reduced "
                   "over its DP group", world=4)
    # --fsdp needs an FSDP_UNSHARD before a stage computes.
    rg_only = fsdp_schedule(ctx, ["1f1b", "--pp", "2", "--micro", "4"], unshard_reshard=False)
    expect_refusal(ctx, ["--schedule", rg_only, "--dp", "2", "--fsdp"] + GPT,
                   "F0s0 computes stage 0 on sharded parameters", world=4)
    # ... which runs without --fsdp (replicated parameters).
    expect_refusal(ctx, ["--schedule", rg_only, "--dp", "2", "--fail-at", "4:0"] + GPT,
                   "--fail-at 4:0: rank 4 is not one of the job's ranks 0..3", world=4)
    expect_refusal(ctx, ["--generate", "mpipe-transpose", "--pp", "2", "--micro", "4", "--owner-backward", "--dp", "2"] +
                   GPT, "--dp 2 with an owner-backward MPipe tower", world=4)
    # A trainable tower's gradients are stage 0's: its REDUCE_GRAD must follow the tower's backward
    # too (tests/data_parallel_cli.py has the checker's case).
    mp = fsdp_schedule(ctx, ["mpipe-transpose", "--pp", "2", "--micro", "4"])
    with open(mp) as f:
        doc = json.load(f)
    move_reduce_grad_before_tower(doc)
    with open(mp, "w") as f:
        json.dump(doc, f)
    expect_refusal(ctx, ["--schedule", mp, "--dp", "2"] + GPT + ["--tower-layers", "2"],
                   "adds the tower's gradients to stage 0's after its FSDP_REDUCE_GRAD", world=4)
    expect_refusal(ctx, one + ["--dp", "0"], "--dp", world=4)


# ---- traces of real runs: --trace, ppsched calibrate, prediction ----------------------------

COMPUTE_OPS = {"FWD", "BWD", "BWD_INPUT", "BWD_WEIGHT", "MPIPE_TRANSPOSE_FWD", "MPIPE_TRANSPOSE_BWD", "DATA_LOAD"}

# The prediction bounds, set from what calibration achieves on these cases (ratio predicted /
# measured makespan, measured on this project's 2-core VM while other builds ran, load
# average 5-16):
# - PP=4 (mpipe-transpose, the tiny GPT): the simulator gives every rank its own device; here
#   four ranks share two cores, so ranks that the model runs in parallel take turns, and a
#   rank waiting for a core is time no slice explains. 15 runs: -47% .. +29% (ratios 0.53 ..
#   1.29; median |error| 18%). Bound: a factor 2.5 either way (a third over the worst run).
# - PP=2 (1f1b, GPT --hidden 128 --seq 32, M=8): two ranks on two cores, no oversubscription.
#   5 runs: +1.9%, +1.8%, -9.8%, -0.5%, +3.3% (and 6 at --hidden 256 --seq 64: -2.8% .. +4.0%).
#   Bound: a factor 1.25 either way (2.5x the worst run), so a factor 2 is caught. Since the
#   CPU host (compute_blocks_host) and the mean fit, the same cell of bench/exec_prediction.py
#   (--vocab 64) on the quiet machine: -0.3 .. +1.1 % in 5 runs; the bound stays for loaded CI.
# Both still fail on a broken fit: a unit error is 1000x, and a wrong protocol or a lost kind
# of step shows up as a factor 2-3, which the tighter PP=2 bound catches.
PREDICTION_FACTOR = 2.5
PREDICTION_FACTOR_PP2 = 1.25


def check_measured_trace(path, sched):
    """The trace is one file for every rank, in the simulator's format; returns it."""
    with open(path) as f:
        t = json.load(f)
    other = t["otherData"]
    if other["label"] != "measured (gloo)" or other["ranks"] != sched["ranks"]:
        raise Failure(f"trace metadata: {other}")
    ev = t["traceEvents"]
    named = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    if named != set(range(sched["ranks"])):
        raise Failure(f"process_name metadata for ranks {sorted(named)}, expected 0..{sched['ranks'] - 1}")
    lanes = {(e["pid"], e["tid"]): e["args"]["name"].split(" ")[0] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    slices = [e for e in ev if e["ph"] == "X"]
    by_step = {}
    for e in slices:
        by_step.setdefault((e["pid"], e["args"]["step_index"]), []).append(e)
    for r, prog in enumerate(sched["programs"]):
        for i, step in enumerate(prog):
            if step is None:
                continue
            got = by_step.get((r, i), [])
            if not got:
                raise Failure(f"rank {r} step {i} ({step}) ran but has no slice")
            op = step["op"] if isinstance(step, dict) else None
            compute = [e for e in got if lanes[(e["pid"], e["tid"])] == "compute"]
            if op in COMPUTE_OPS and (len(compute) != 1 or compute[0]["args"]["op"] != op):
                raise Failure(f"rank {r} step {i} ({op}): {len(compute)} compute slices, expected one")
    executed = sum(1 for prog in sched["programs"] for st in prog if st is not None)
    if len(by_step) != executed:
        raise Failure(f"slices name {len(by_step)} (rank, step) pairs, the schedule has {executed} executed steps")
    # Every flow has both ends, each strictly inside one slice of its thread.
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    if not starts or set(starts) != set(ends):
        raise Failure(f"flows: {len(starts)} starts, {len(ends)} ends, unmatched ids {set(starts) ^ set(ends)}")
    for fe in list(starts.values()) + list(ends.values()):
        inside = [e for e in slices if e["pid"] == fe["pid"] and e["tid"] == fe["tid"] and e["ts"] <= fe["ts"] <= e["ts"] + e["dur"]]
        if len(inside) != 1:
            raise Failure(f"flow end {fe} lies in {len(inside)} slices")
    if other.get("flows_left_out"):
        raise Failure(f"{other['flows_left_out']} flows left out: their receive ended before their send began")
    return t, len(slices), len(starts)


def validate_trace(ctx, path):
    """The strict validator (exact times, nesting, flow binding and order, cat and metadata)."""
    p = subprocess.run([ctx.validate_trace, path], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise Failure(f"the trace validator rejects {path}:\n{p.stdout}{p.stderr}")
    print(p.stdout.strip())


def run_ppsched(ctx, args, expect_rc=0):
    p = subprocess.run([ctx.ppsched] + args, capture_output=True, text=True, timeout=120)
    if p.returncode != expect_rc:
        raise Failure(f"ppsched {' '.join(args)}: exit {p.returncode}, expected {expect_rc}\n{p.stdout}\n{p.stderr}")
    return p.stdout


# ---- a schedule found by `ppsched tune` is an ordinary schedule (issue 14) --------------------
for _pp in (2, 4):
    def _tuned(ctx, pp=_pp):
        # --no-families: the written schedule is the search's own (families only seed it).
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "tuned.json")
            run_ppsched(ctx, ["tune", "--pp", str(pp), "--micro", str(2 * pp), "--vpp-max", "2", "--no-families",
                              "--iterations", "2000", "--threads", "1", "-q", "-o", path])
            parity_run(ctx, pp, ["--schedule", path] + GPT, iterations=1)
    case(f"parity_tuned_pp{_pp}")(_tuned)


@case("parity_tuned_dp2_fsdp_pp2")
def _(ctx):
    # tune --dp 2 --fsdp writes its best with the FSDP steps PyTorch's lowering adds (issue 40):
    # ppsched-exec runs the file under --dp 2 --fsdp as it is (it refuses a DP run without them).
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tuned.json")
        run_ppsched(ctx, ["tune", "--pp", "2", "--micro", "4", "--dp", "2", "--fsdp", "--no-families",
                          "--iterations", "2000", "--threads", "1", "-q", "-o", path])
        with open(path) as f:
            ops = [st["op"] for prog in json.load(f)["programs"] for st in prog if isinstance(st, dict)]
        if ops.count("FSDP_REDUCE_GRAD") != 2 or "FSDP_UNSHARD" not in ops:
            raise Failure("the tuned schedule lacks the FSDP steps: " + ", ".join(sorted(set(ops))))
        rc, out, err, dt = launch(ctx, 4, ["--schedule", path, "--dp", "2", "--fsdp", "--check-parity", "--json",
                                           "--iterations", "2"] + GPT)
        s = summary(out)
        if not s["ok"] or not s["parity"]["ok"]:
            raise Failure("parity failed: " + json.dumps(s, indent=1) + "\n" + err)
        print(f"tuned under DP 2 FSDP: parity ok, max_rel_error {s['parity']['max_rel_error']:.3g}")


def predict_run(ctx, ranks, generate, model, factor):
    """Runs a generated schedule from a file under Gloo (two iterations, so the traced last one
    is warm), calibrates the trace, predicts the run and holds the prediction to `factor`."""
    with tempfile.TemporaryDirectory() as tmp:
        sched_path = os.path.join(tmp, "sched.json")
        trace = os.path.join(tmp, "run.trace.json")
        costs = os.path.join(tmp, "costs.json")
        run_ppsched(ctx, ["generate"] + generate + ["-o", sched_path])
        with open(sched_path) as f:
            sched = json.load(f)
        rc, out, err, dt = launch(ctx, ranks, ["--schedule", sched_path] + model +
                                  ["--iterations", "2", "--check-parity", "--json", "--trace", trace])
        s = summary(out)
        if not s["ok"] or not s["parity"]["ok"] or "trace" not in s:
            raise Failure("run failed or wrote no trace: " + json.dumps(s))
        if s["trace"]["notes"]:
            raise Failure("the executor's records did not pair with the comm model: " + json.dumps(s["trace"]))
        _, nslices, nflows = check_measured_trace(trace, sched)
        validate_trace(ctx, trace)
        cal = json.loads(run_ppsched(ctx, ["calibrate", trace, "-o", costs, "--schedule", sched_path, "--json"]))
        sim = json.loads(run_ppsched(ctx, ["simulate", "--costs", costs, sched_path, "--json"]))
        p = cal["prediction"]
        if abs(sim["makespan_ms"] - p["predicted_ms"]) > 1e-6 * max(1.0, p["predicted_ms"]):
            raise Failure(f"ppsched simulate --costs predicts {sim['makespan_ms']} ms, calibrate said {p['predicted_ms']}")
        link = cal["link"]
        fwd = [c for c in cal["compute"] if c["key"] == "FWD"]
        print(f"loss {s['loss']:.6g}, parity ok (max_rel_error {s['parity']['max_rel_error']:.3g}); traced iteration "
              f"{s['trace']['iteration']}: {nslices} slices, {nflows} flows, makespan {p['measured_ms']:.3f} ms "
              f"(iteration wall {1e3 * s['iteration_times_s'][-1]:.3f} ms)")
        print("fit: FWD per stage " + ", ".join(f"s{c['stage']} {c['value_ms']:.4f}" for c in fwd) +
              f" ms; link latency {1e3 * link['latency_ms']:.1f} us, bandwidth "
              f"{link['bandwidth_GBps'] if link['bandwidth_GBps'] is None else round(link['bandwidth_GBps'], 4)} GB/s over "
              f"{link['transfers']} transfers (residual rms {link['rms_residual_ms']:.4f} ms)")
        print(f"PREDICTION measured {p['measured_ms']:.3f} ms, predicted {p['predicted_ms']:.3f} ms, "
              f"relative error {100 * p['relative_error']:+.1f}% (bound: within a factor {factor:g})")
        ratio = p["predicted_ms"] / p["measured_ms"]
        if not (1 / factor <= ratio <= factor) or not p["completed"]:
            raise Failure(f"prediction off by a factor {ratio:.3g}: " + json.dumps(cal, indent=1))


@case("trace_calibrate_predict_pytorch_comms_interleaved_pp2")
def _(ctx):
    # PyTorch's lowered CSV runs, is traced and predicted under --overlap-p2p, all by default: the
    # executor's records pair with the comm model of that mode, the trace says the mode
    # (otherData.mode), and calibrate --schedule and simulate price the same mode. A posted message's
    # slice runs until its wait returned, as the simulator draws it, so no flow is left out.
    csv = os.path.join(ctx.data, "schedules", "pytorch_comms", "Interleaved1F1B_pp2_m4.csv")
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "run.trace.json")
        costs = os.path.join(tmp, "costs.json")
        rc, out, err, dt = launch(ctx, 2, ["--schedule", csv] + GPT + ["--iterations", "2", "--check-parity", "--json",
                                                                       "--trace", trace])
        s = summary(out)
        if not s["ok"] or not s["parity"]["ok"] or not s["overlap_p2p"] or s["trace"]["notes"]:
            raise Failure("run failed, ran blocking or its records did not pair with the comm model: " + json.dumps(s))
        as_json = os.path.join(tmp, "sched.json")  # the same IR, step for step, in ppsched's JSON
        run_ppsched(ctx, ["convert", csv, "-o", as_json])
        with open(as_json) as f:
            check_measured_trace(trace, json.load(f))
        validate_trace(ctx, trace)
        with open(trace) as f:
            mode = json.load(f)["otherData"].get("mode", {})
        if not mode.get("overlap_p2p") or mode.get("comm") != "rendezvous":
            raise Failure(f"the trace does not say the run's mode (--overlap-p2p, rendezvous): otherData.mode = {mode}")
        nslices, nflows = s["trace"]["slices"], s["trace"]["flows"]
        cal = json.loads(run_ppsched(ctx, ["calibrate", trace, "-o", costs, "--schedule", csv, "--json"]))
        sim = json.loads(run_ppsched(ctx, ["simulate", "--costs", costs, csv, "--json"]))
        blocking = json.loads(run_ppsched(ctx, ["simulate", "--costs", costs, csv, "--json", "--no-overlap-p2p"]))
        p = cal["prediction"]
        print(f"{nslices} slices, {nflows} flows; measured {p['measured_ms']:.3f} ms, predicted {p['predicted_ms']:.3f} ms "
              f"(--overlap-p2p), {blocking['makespan_ms']:.3f} ms blocking")
        if p.get("mode") != "--overlap-p2p --p2p-backend gloo":
            raise Failure(f"calibrate predicted in mode '{p.get('mode')}', not the trace's --overlap-p2p on Gloo")
        if mode.get("p2p_backend") != "gloo":
            raise Failure(f"the trace does not say its posted operations ran on Gloo: otherData.mode = {mode}")
        if not sim["overlap_p2p"] or abs(sim["makespan_ms"] - p["predicted_ms"]) > 1e-6 * max(1.0, p["predicted_ms"]):
            raise Failure(f"simulate ({sim['makespan_ms']} ms, overlap_p2p={sim['overlap_p2p']}) and calibrate "
                          f"({p['predicted_ms']} ms) do not price the same mode")
        if not p["completed"]:
            raise Failure("the prediction did not complete: " + json.dumps(cal))


@case("trace_calibrate_predict_mpipe_pp4")
def _(ctx):
    # The acceptance run: mpipe-transpose P=4 M=8 from a file, the tiny GPT, under Gloo.
    predict_run(ctx, 4, ["mpipe-transpose", "--pp", "4", "--micro", "8"], GPT + ["--tower-layers", "2"], PREDICTION_FACTOR)


PP2_MODEL = ["--model", "gpt", "--layers", "8", "--hidden", "128", "--heads", "2", "--seq", "32", "--vocab", "32",
             "--micro-batch-size", "2"]


@case("trace_calibrate_predict_1f1b_pp2")
def _(ctx):
    # Two ranks on two cores: compute large enough to dominate the latency (hidden 128, seq 32).
    predict_run(ctx, 2, ["1f1b", "--pp", "2", "--micro", "8"], PP2_MODEL, PREDICTION_FACTOR_PP2)


def measured_makespan(ctx, sched_path, model, tmp, name, extra=()):
    """One traced run of the schedule (two iterations, the last traced; `extra` flags added); its
    makespan in ms as calibrate measures it, and the trace."""
    trace = os.path.join(tmp, name + ".trace.json")
    rc, out, err, dt = launch(ctx, 2, ["--schedule", sched_path] + model + ["--iterations", "2", "--json", "--trace", trace] +
                              list(extra))
    if not summary(out)["ok"]:
        raise Failure("run failed: " + out)
    cal = json.loads(run_ppsched(ctx, ["calibrate", trace, "--schedule", sched_path, "--json"]))
    return cal["prediction"]["measured_ms"], trace


# Out of sample (issue 25 item 3): the fit of one run predicts ANOTHER run of the same schedule.
# Three pairs, each a fit run, its prediction and the run judged right after it; the case holds
# the median of the three errors to the bound. This VM's cores change speed for seconds at a
# time (a run of the same schedule takes 530 or 800 ms): a pair's two runs fall in the same
# phase but for the pair a change falls between, and the median leaves that one out. The
# spread, PP=2 1F1B M=8, one fit run then three judged runs (2026-12-02):
# - alone, as the suite runs it (is_parallel false): +2.1, +2.9, -1.4, -0.3, +0.4, -0.9 % in 6
#   repetitions (in sample -0.1 .. -1.1 %);
# - beside the rest of a full suite while a helper's build ran: -14.1 %;
# - while two builds shared the cores (runs of the same schedule took 530 or 750 ms, one
#   1105 ms): -12.5, -10.2, +24.7, -1.7, -32.1, -10.9 %.
# - in CI (2026-12-03), alone: the one fit run took 720 ms, the three runs after it 528-534 ms
#   (+36.4 %), which is why the case now pairs its runs.
# Bound: a factor 1.25 either way: 8x the quiet spread and above the one-build run, so a fit
# 25 % off fails; a 10 % error is within what a loaded machine does to a single run (the
# simulated round trip of tests/model_cli.py holds the per-layer fit to 0.1 %).
OUT_OF_SAMPLE_FACTOR = 1.25


def paired_out_of_sample(what, fit_run, predict, judged_run, factor, n=3, same_schedule=True):
    """n pairs: fit_run(k) -> (makespan_ms, trace), predict(trace) -> predicted ms, judged_run(k)
    -> the judged run's makespan, in that order. Prints every pair (with the in-sample error when
    the judged run is of the fitted schedule); fails when the median of the pairs'
    predicted/measured ratios is outside `factor` either way."""
    rows = []
    for k in range(n):
        fit_ms, trace = fit_run(k)
        predicted = predict(trace)
        rows.append((fit_ms, predicted, judged_run(k)))
    ratios = [p / m for _, p, m in rows]
    median = statistics.median(ratios)
    print(f"{what}: " + "; ".join(f"fit {f:.3f} ms, predicted {p:.3f}" +
                                  (f" (in sample {100 * (p / f - 1):+.1f} %)" if same_schedule else "") +
                                  f", judged run {m:.3f}: {100 * (p / m - 1):+.1f} %" for f, p, m in rows))
    print(f"OUT OF SAMPLE median {100 * (median - 1):+.1f} % over {n} pairs (bound: within a factor {factor:g})")
    if not 1 / factor <= median <= factor:
        raise Failure(f"{what}: the pairs' errors {', '.join(f'{100 * (r - 1):+.1f} %' for r in ratios)}, median "
                      f"{100 * (median - 1):+.1f} %, are over the bound")


@case("trace_calibrate_predict_1f1b_pp2_out_of_sample")
def _(ctx):
    with tempfile.TemporaryDirectory() as tmp:
        sched = os.path.join(tmp, "sched.json")
        costs = os.path.join(tmp, "costs.json")
        run_ppsched(ctx, ["generate", "1f1b", "--pp", "2", "--micro", "8", "-o", sched])

        def predict(trace):
            cal = json.loads(run_ppsched(ctx, ["calibrate", trace, "-o", costs, "--schedule", sched, "--json"]))
            return cal["prediction"]["predicted_ms"]

        paired_out_of_sample("1F1B M=8 PP=2, fitted on one run, judged on the next",
                             lambda k: measured_makespan(ctx, sched, PP2_MODEL, tmp, f"fit{k}"), predict,
                             lambda k: measured_makespan(ctx, sched, PP2_MODEL, tmp, f"other{k}")[0],
                             OUT_OF_SAMPLE_FACTOR)


# Per layer, out of sample, another family (issue 22 item 5): a 1F1B M=8 run at PP=2 is fitted
# (calibrate --model with the executor's own model file and the trace's split-backward probes)
# and predicts ZB-H1 M=8 (split backward, another schedule), run right after it; three such
# pairs, the median of their errors held to a factor 1.10 either way, so a 10 % error fails.
# Measured spread, this prediction in bench/exec_prediction.py --out-of-sample (one fit run, 5
# repetitions, quiet 2-core VM, 2026-12-03): -3.2, -5.8, -2.0, -1.1, -2.8 % (and +0.6..+6.0,
# -8.0 % in another 5); the noise floor (another run of the fitted 1F1B) -0.4..-3.5 %. With
# three fits and then three ZB-H1 runs the case once failed at -9.5 % (fits 742, 719, 576 ms), and
# with them alternating and the median fit against the median run at +67 % (fits 797, 810,
# 526 ms; ZB-H1 runs 1034, 613, 612 ms: the cores' slow phase covered three runs), while the
# fitted run's prediction (1023 ms) was -1.0 % off the ZB-H1 run made right after it: hence pairs.
PER_LAYER_FACTOR = 1.10


@case("trace_calibrate_predict_per_layer_zbh1_from_1f1b_pp2")
def _(ctx):
    with tempfile.TemporaryDirectory() as tmp:
        fit_sched, target = os.path.join(tmp, "1f1b.json"), os.path.join(tmp, "zbh1.json")
        run_ppsched(ctx, ["generate", "1f1b", "--pp", "2", "--micro", "8", "-o", fit_sched])
        run_ppsched(ctx, ["generate", "zb-h1", "--pp", "2", "--micro", "8", "-o", target])
        model_file = os.path.join(tmp, "model.json")

        def fit_run(k):
            return measured_makespan(ctx, fit_sched, PP2_MODEL, tmp, f"fit{k}", ["--model-out", model_file])

        def predict(trace):
            cal = json.loads(run_ppsched(ctx, ["calibrate", trace, "--model", model_file, "--schedule", target, "--json"]))
            if not any("a split backward is priced as the executor's probe measured it" in n for n in cal["notes"]):
                raise Failure("the fit did not take the trace's split-backward probes: " + json.dumps(cal["notes"]))
            return cal["prediction"]["predicted_ms"]

        paired_out_of_sample("ZB-H1 M=8 PP=2 from a 1F1B fit, judged on the run after it", fit_run, predict,
                             lambda k: measured_makespan(ctx, target, PP2_MODEL, tmp, f"zbh1_{k}")[0],
                             PER_LAYER_FACTOR, same_schedule=False)


# MoE, out of sample, another family (issue 39 item 4): a traced combined-1F1B run (PP 1 x EP 2,
# M=8: its merged steps overlap one micro-batch's all-to-alls with another's compute) is
# calibrated from its comm stream (the all-to-all as a link of its own, the phase shares, the
# contention) and predicts 1F1B M=8 (no merged steps), run right after it; three pairs, the
# median of their errors held to a factor 1.5 either way. Two ranks, one core each (--cpu-bind
# auto binds them): with PP 2 x EP 2 four ranks share the two cores and the same schedule's runs
# took 170 to 250 ms. Measured (2026-12-07, 2-core VM, two sets of three pairs): -23.1, -9.7,
# +7.8 % and -34.4, -24.4, +11.5 % (in sample, the fitted run itself: -13.0, -10.6, -11.6 % and
# -3.0, -0.5, -0.1 %); the reverse, 1F1B fitted (no overlapped step: the default contention)
# predicting combined 1F1B: +16.9, +0.1, -18.6 %. The all-to-all dominates these runs (1.7 to
# 3.2 ms each, 192 per iteration, latency only: its time does not grow with these few hundred
# bytes), so a model without it is off by a factor 5; the model prices every all-to-all alike,
# while this VM's runs of one schedule differ by up to 40 % (combined 1F1B: 406 to 708 ms), so
# the bound is loose: it catches a missing or mispriced all-to-all, not a 20 % error.
MOE_PREDICTION_FACTOR = 1.5


@case("moe_calibrate_predicts_1f1b_from_combined_1f1b_ep2")
def _(ctx):
    with tempfile.TemporaryDirectory() as tmp:
        fit_sched, target = os.path.join(tmp, "combined.json"), os.path.join(tmp, "1f1b.json")
        run_ppsched(ctx, ["generate", "combined-1f1b", "--pp", "1", "--micro", "8", "--fsdp-steps", "-o", fit_sched])
        run_ppsched(ctx, ["generate", "1f1b", "--pp", "1", "--micro", "8", "--fsdp-steps", "-o", target])
        model = MOE + ["--ep", "2"]

        def predict(trace):
            cal = json.loads(run_ppsched(ctx, ["calibrate", trace, "--schedule", target, "--json"]))
            m = cal.get("moe")
            if not m or m["ep"] != 2 or m["all_to_alls"] != 2 * 8 * 2 * 6 or m["layers"] != [6]:
                raise Failure("the fit did not read the comm stream's all-to-alls (2 per block, 6 blocks, 8 forwards "
                              "and 8 backwards): " + json.dumps(m))
            if m["overlapped_steps"] != 7:
                raise Failure(f"contention fitted on {m['overlapped_steps']} overlapped steps, combined 1F1B M=8 has 7")
            print(f"  fit: all-to-all {m['mean_ms']:.3f} ms mean (latency {m['latency_ms']:.3f} ms, bandwidth "
                  f"{m['bandwidth_GBps']}), contention {m['contention']:.2f}")
            return cal["prediction"]["predicted_ms"]

        paired_out_of_sample("1F1B M=8 PP=1 x EP=2 from a combined-1F1B fit, judged on the run after it",
                             lambda k: measured_makespan(ctx, fit_sched, model, tmp, f"fit{k}"), predict,
                             lambda k: measured_makespan(ctx, target, model, tmp, f"1f1b_{k}")[0],
                             MOE_PREDICTION_FACTOR, same_schedule=False)


@case("model_out_trace_layers_per_layer_calibration_pp2")
def _(ctx):
    # The executor's model as a ppsched-model file (--model-out) and the layers each stage held in
    # its trace (otherData.layers): calibrate --model reads the traced layout from the trace and
    # fits per-layer rates. The file's parameter counts are checked against libtorch's own.
    with tempfile.TemporaryDirectory() as tmp:
        sched = os.path.join(tmp, "sched.json")
        trace = os.path.join(tmp, "run.trace.json")
        model_file = os.path.join(tmp, "gpt.json")
        run_ppsched(ctx, ["generate", "interleaved-1f1b", "--pp", "2", "--vpp", "2", "--micro", "4", "-o", sched])
        rc, out, err, dt = launch(ctx, 2, ["--schedule", sched] + GPT + ["--iterations", "2", "--json", "--trace", trace,
                                                                        "--model-out", model_file])
        s = summary(out)
        if not s["ok"] or "trace" not in s:
            raise Failure("run failed or wrote no trace: " + json.dumps(s))
        with open(model_file) as f:
            m = json.load(f)
        names = [layer["name"] for layer in m["layers"]]
        want = ["embedding"] + [f"block{k}" for k in range(8)] + ["head"]
        if names != want:
            raise Failure(f"--model-out names the layers {names}, the executor's units are {want}")
        file_params = sum(layer["params"] for layer in m["layers"])
        if file_params != sum(s["parameter_elements"]):
            raise Failure(f"--model-out counts {file_params} parameters, libtorch's modules hold "
                          f"{sum(s['parameter_elements'])} ({s['parameter_elements']} per rank)")
        with open(trace) as f:
            other = json.load(f)["otherData"]
        held = [layer for st in sorted(other["layers"], key=lambda e: e["stage"]) for layer in st["layers"]]
        if held != want or len(other["layers"]) != 4:
            raise Failure(f"otherData.layers lists {other['layers']}, not the model's layers over 4 stages")
        cal = json.loads(run_ppsched(ctx, ["calibrate", trace, "--model", model_file, "--schedule", sched, "--json"]))
        notes = " ".join(cal["notes"])
        # 8 blocks on 4 stages by torchtitan's rule (10 effective layers: 3,3,2,2, the embedding
        # and the head one each): 2,3,2,1.
        if "the traced layout 2,3,2,1 is the trace's (otherData.layers)" not in notes:
            raise Failure("calibrate --model did not take the traced layout from the trace: " + json.dumps(cal["notes"]))
        p = cal["prediction"]
        if p["measured_ms"] is None or not p["completed"]:
            raise Failure("the traced schedule on its own layout is not the run that was traced: " + json.dumps(p))
        # Each rank ran two stages: a time factor per traced rank, fitted with the rate (mean 1).
        rt = cal["per_layer"].get("rank_time_factors", [])
        if len(rt) != 2 or any(abs((rt[0][k] + rt[1][k]) / 2 - 1) > 0.01 for k in ("FWD", "BWD_INPUT", "BWD_WEIGHT")):
            raise Failure("calibrate --model fitted no time factor per traced rank (mean 1): " + json.dumps(rt))
        print(f"--model-out: {len(names)} layers, {file_params} parameters (libtorch: {s['parameter_elements']}); "
              f"otherData.layers {[len(e['layers']) for e in other['layers']]}; per-layer fit predicts "
              f"{p['predicted_ms']:.3f} ms for the traced {p['measured_ms']:.3f} ms")
        # A model that is not the run's is refused, naming the first layer that differs.
        m["layers"][3]["name"] = "attention2"
        other_model = os.path.join(tmp, "other.json")
        with open(other_model, "w") as f:
            json.dump(m, f)
        refused = subprocess.run([ctx.ppsched, "calibrate", trace, "--model", other_model], capture_output=True,
                                 text=True, timeout=120)
        if refused.returncode != 2 or "holds 'block2' where the model's layer 3 is 'attention2'" not in refused.stderr:
            raise Failure(f"a model with other layers was not refused by name (exit {refused.returncode}): "
                          + refused.stderr)


@case("uneven_layout_parity_trace_and_calibrate_pp2")
def _(ctx):
    # --layout 3,5: the blocks per virtual stage as given (not the even split), gradients equal to
    # the single-process reference, the trace naming each stage's layers, and calibrate --model
    # reading that layout back from the trace. A layout that does not fit is refused by name.
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "run.trace.json")
        model_file = os.path.join(tmp, "gpt.json")
        one = ["--generate", "1f1b", "--pp", "2", "--micro", "4"]
        rc, out, err, dt = launch(ctx, 2, one + GPT + ["--layout", "3,5", "--iterations", "2", "--json", "--check-parity",
                                                      "--trace", trace, "--model-out", model_file])
        s = summary(out)
        expect_parity(s, err, "1f1b P=2 --layout 3,5", dt)
        with open(trace) as f:
            other = json.load(f)["otherData"]
        held = [st["layers"] for st in sorted(other["layers"], key=lambda e: e["stage"])]
        want = [["embedding", "block0", "block1", "block2"], ["block3", "block4", "block5", "block6", "block7", "head"]]
        if held != want:
            raise Failure(f"otherData.layers lists {held}, --layout 3,5 gives {want}")
        # The split backward probed once per stage after the run: stage 0's BWD_INPUT differentiates
        # no input (a no-op), a later stage's does; the weight half re-traverses the graph.
        probes = sorted(other.get("split_backward", []), key=lambda e: e["stage"])
        if [p["stage"] for p in probes] != [0, 1] or not all(p["bwd_ms"] > 0 and p["bwd_weight_ms"] > 0 for p in probes) \
                or probes[0]["bwd_input_ms"] > 0.5 * probes[0]["bwd_ms"] or not probes[1]["bwd_input_ms"] > 0:
            raise Failure(f"otherData.split_backward is not one probe per stage as the executor splits: {probes}")
        cal = json.loads(run_ppsched(ctx, ["calibrate", trace, "--model", model_file, "--json"]))
        if not any("the traced layout 3,5 is the trace's" in n for n in cal["notes"]):
            raise Failure("calibrate --model did not read the layout 3,5 from the trace: " + json.dumps(cal["notes"]))
        if not any("a split backward is priced as the executor's probe measured it" in n for n in cal["notes"]):
            raise Failure("calibrate --model did not take the split-backward probes: " + json.dumps(cal["notes"]))
        print(f"--layout 3,5: parameters per rank {s['parameter_elements']}, traced layers {[len(h) for h in held]}, "
              f"split-backward probes {probes}")
    expect_refusal(ctx, one + GPT + ["--layout", "3,4"], "--layout puts 7 blocks on the stages, but --layers is 8")
    expect_refusal(ctx, one + GPT + ["--layout", "8"], "the layout has 1 stage but the schedule has 2 stages")
    expect_refusal(ctx, one + GPT + ["--layout", "3;5"], "entry 0 of \"3;5\" is not a whole number of layers")
    expect_refusal(ctx, one + GPT + ["--layout", "Et*4|t*4"], "the last layer must be the loss, L")


@case("default_split_is_the_planners_pp2_vpp2")
def _(ctx):
    # Without --layout the executor splits the blocks as the planner does (issue 36 item 8: it
    # ran 2,2,1,1 where simulate and calibrate priced 1,2,2,1). 6 blocks on 4 virtual stages, by
    # torchtitan's rule (generate_llm_fqn_per_model_part(4, 6), input and output weight 1: 8
    # effective layers, 2 a stage, the embedding and the head one each): 1,2,2,1, which must
    # also be what `ppsched model` gives the model file the run writes.
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "run.trace.json")
        model_file = os.path.join(tmp, "gpt.json")
        launch(ctx, 2, ["--generate", "interleaved-1f1b", "--pp", "2", "--vpp", "2", "--micro", "4", "--model", "gpt",
                        "--layers", "6", "--trace", trace, "--model-out", model_file])
        with open(trace) as f:
            other = json.load(f)["otherData"]
        held = [st["layers"] for st in sorted(other["layers"], key=lambda e: e["stage"])]
        blocks = [sum(1 for n in h if n.startswith("block")) for h in held]
        if blocks != [1, 2, 2, 1] or held[0][0] != "embedding" or held[-1][-1] != "head":
            raise Failure(f"the run held {held}; torchtitan's even split of 6 blocks on 4 stages is 1,2,2,1")
        planned = json.loads(run_ppsched(ctx, ["model", model_file, "--pp", "2", "--vpp", "2", "--json"]))
        if planned["layout"]["counts"] != blocks:
            raise Failure(f"ppsched model splits the run's model {planned['layout']['counts']}, the run held {blocks}")
        print(f"6 blocks on 4 virtual stages: the run held {blocks}, ppsched model plans {planned['layout']['counts']}")


# ---- --cpu-bind: where each rank runs (exec/cpu_binding.hpp) --------------------------------

def expected_blocks(ranks, allowed):
    """Local rank r of L over the n CPUs `allowed` (ascending): block [r n / L, (r+1) n / L), or
    the single CPU r n / L when L > n; restated here, not imported."""
    n = len(allowed)
    out = []
    for r in range(ranks):
        lo, hi = r * n // ranks, (r + 1) * n // ranks
        out.append(allowed[lo:max(hi, lo + 1)])
    return out


def binding_run(ctx, ranks, extra, cpus=None):
    """A traced run with `extra` flags: (summary's cpu_binding, trace's otherData.cpu_binding,
    calibrate's notes)."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "run.trace.json")
        rc, out, err, dt = launch(ctx, ranks, ["--generate", "1f1b", "--pp", str(ranks), "--micro", str(ranks)] + GPT +
                                  extra + ["--iterations", "2", "--json", "--trace", trace], cpus=cpus)
        s = summary(out)
        with open(trace) as f:
            other = json.load(f)["otherData"]
        cal = json.loads(run_ppsched(ctx, ["calibrate", trace, "--json"]))
        print(f"{ranks} ranks {' '.join(extra) or '(default)'}{'' if cpus is None else f' on CPUs {sorted(cpus)}'}: " +
              "; ".join(f"rank {b['rank']} {b['cpus']} bound={b['bound']} ({b['reason']})" for b in s["cpu_binding"]["ranks"]))
        return s["cpu_binding"], other.get("cpu_binding"), cal["notes"]


def cpus_of(text):
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


@case("cpu_binding_pp2")
def _(ctx):
    allowed = sorted(os.sched_getaffinity(0))
    free = len(allowed) == os.cpu_count()
    # auto: two CPU ranks, one block each, when nobody restricted this process and it has 2+ CPUs.
    summ, traced, notes = binding_run(ctx, 2, [])
    got = [cpus_of(b["cpus"]) for b in summ["ranks"]]
    if summ["mode"] != "auto" or [r["cpus"] for r in traced["ranks"]] != got:
        raise Failure(f"the summary ({summ}) and the trace ({traced}) disagree")
    if free and len(allowed) >= 2:
        if got != expected_blocks(2, allowed) or not all(b["bound"] for b in summ["ranks"]):
            raise Failure(f"auto bound the ranks to {got}, expected {expected_blocks(2, allowed)}: {summ}")
        if any("took turns" in n or "could run on the same CPUs" in n for n in notes):
            raise Failure(f"calibrate notes shared cores of ranks bound apart: {notes}")
    else:
        # The weaker branch: this machine cannot show auto binding ranks apart. Said, not silent.
        print(f"cpu_binding_pp2: this process may use {len(allowed)} of {os.cpu_count()} CPUs "
              f"({'restricted by its launcher' if not free else 'a single CPU'}): auto binding two ranks apart "
              f"is not checked here, only that auto leaves them unbound")
        if any(b["bound"] for b in summ["ranks"]):
            raise Failure(f"auto bound ranks of a restricted process or a single CPU: {summ}")
    # none: where the launcher put them; calibrate says what that may cost.
    summ, traced, notes = binding_run(ctx, 2, ["--cpu-bind", "none"])
    if any(b["bound"] or cpus_of(b["cpus"]) != allowed for b in summ["ranks"]) or traced["mode"] != "none":
        raise Failure(f"--cpu-bind none moved a rank: {summ}")
    if not any("could run on the same CPUs" in n for n in notes):
        raise Failure(f"calibrate did not note unbound ranks on shared CPUs: {notes}")
    # A launcher's restriction (taskset, Slurm) is left alone by auto: both ranks on one CPU.
    one = {allowed[0]}
    summ, traced, notes = binding_run(ctx, 2, [], cpus=one)
    if any(b["bound"] or cpus_of(b["cpus"]) != [allowed[0]] for b in summ["ranks"]):
        raise Failure(f"auto moved a rank the launcher had placed: {summ}")
    if "already restricted" not in summ["ranks"][0]["reason"] and "share cores" not in summ["ranks"][0]["reason"]:
        raise Failure(f"the reason does not say why the ranks were left alone: {summ}")
    if not any("2 ranks ran on 1 CPU(s)" in n for n in notes):
        raise Failure(f"calibrate did not note two ranks on one CPU: {notes}")
    # blocks: four ranks over whatever CPUs there are, shared when fewer.
    summ, traced, notes = binding_run(ctx, 4, ["--cpu-bind", "blocks"])
    got = [cpus_of(b["cpus"]) for b in summ["ranks"]]
    if got != expected_blocks(4, allowed) or not all(b["bound"] for b in summ["ranks"]):
        raise Failure(f"--cpu-bind blocks bound the ranks to {got}, expected {expected_blocks(4, allowed)}")
    if len(allowed) < 4 and not any("4 ranks ran on" in n for n in notes):
        raise Failure(f"calibrate did not note four ranks on {len(allowed)} CPUs: {notes}")


# ---- faults: every other rank exits non-zero, naming the failing rank and step -------------

def fault_run(ctx, ranks, args, failing, killed, expect, limit, log=print):
    """Every rank but a killed one must print an error naming the failing rank and its step,
    and the whole job must be over within `limit` seconds. `log` takes what it prints."""
    rc, out, err, dt = launch(ctx, ranks, args, expect_rc=1, grace=limit, limit=limit + 30)
    lines = (out + err).splitlines()
    for r in range(ranks):
        if killed and r == failing:
            continue  # a SIGKILLed rank says nothing
        mine = " ".join(ln for ln in lines if ln.startswith(f"[rank {r}] error:"))
        if not mine:
            raise Failure(f"rank {r} printed no error line\n{out}\n{err}")
        for needle in expect:
            if needle not in mine:
                raise Failure(f"rank {r}'s error does not mention '{needle}': {mine}\n--- all output\n{out}\n{err}")
    if dt > limit:
        raise Failure(f"the ranks needed {dt:.1f} s to exit, limit {limit} s")
    log(f"all ranks exited non-zero in {dt:.1f} s:")
    for ln in lines:
        if "error:" in ln:
            log("   " + ln)


# ---- the machine's pace: what the fault cases' timeouts and limits are derived from ---------
# No fault case assumes a speed (issue 25 item 4). A healthy run of the fault cases' own job
# (1F1B, PP=4, M=8, the small GPT, 2 iterations) is timed once per suite: its wall time, start-up
# included, and its slowest iteration. Quiet, this 2-core VM gives about 3 s and 0.1 s (a loaded
# suite 4-6 s); every timeout and limit below is a multiple of those, with the fixed floors the
# cases had before (so a fast machine tests what it did, a slow one waits in proportion).

PACE_ARGS = ["--generate", "1f1b", "--pp", "4", "--micro", "8"] + GPT


def machine_pace(ctx):
    """(wall_s, iteration_s) of the healthy run above. Kept for 10 minutes in a file named by
    this ppsched-exec (path and mtime) under the temporary directory, under a lock, so that the
    suite's concurrent fault cases measure once and the others wait for that measurement."""
    import fcntl
    import hashlib
    st = os.stat(ctx.exe)
    key = hashlib.sha1(f"{os.path.abspath(ctx.exe)}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"ppsched-exec-pace-{os.getuid()}-{key}.json")
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path) as f:
                kept = json.load(f)
            age = time.time() - kept["measured_at"]
            if age < 600:
                print(f"machine pace (measured {age:.0f} s ago by another case): the healthy job took "
                      f"{kept['wall_s']:.1f} s wall, its slowest iteration {kept['iteration_s']:.2f} s")
                return kept["wall_s"], kept["iteration_s"]
        except (OSError, ValueError, KeyError):
            pass
        rc, out, err, dt = launch(ctx, 4, PACE_ARGS + ["--json", "--iterations", "2"], limit=300)
        s = summary(out)
        pace = {"wall_s": dt, "iteration_s": max(s["iteration_times_s"]), "measured_at": time.time()}
        with open(path + ".tmp", "w") as f:
            json.dump(pace, f)
        os.replace(path + ".tmp", path)
    print(f"machine pace: the healthy job took {pace['wall_s']:.1f} s wall, its slowest iteration "
          f"{pace['iteration_s']:.2f} s")
    return pace["wall_s"], pace["iteration_s"]


def fault_limits(ctx, detected_by):
    """The flags and the exit limit of a fault run, from the machine's pace.
    detected_by="peers": a throw or a kill, which the others learn of through the store or the
    heartbeat (3 s, or twice the slowest iteration): --timeout is long (30 s, or ten times the
    healthy job) and the limit (twice the job + three heartbeats + 10 s) stays under it, so a
    report that came from a timeout instead would fail the case.
    detected_by="timeout": a hang, which only the peers' waits can notice: --timeout is 6 s or
    ten times the slowest healthy iteration (no healthy wait is longer than an iteration; the
    ranks meet at the rendezvous before their first step), the limit twice the job + three
    timeouts + two heartbeats + 10 s. Returns (flags, limit_s)."""
    wall, it = machine_pace(ctx)
    heartbeat = max(3, math.ceil(2 * it))
    if detected_by == "peers":
        timeout = max(30, math.ceil(10 * wall))
        limit = math.ceil(2 * wall + 3 * heartbeat + 10)
    else:
        timeout = max(6, math.ceil(10 * it))
        limit = math.ceil(2 * wall + 3 * timeout + 2 * heartbeat + 10)
    print(f"fault limits ({detected_by}): --timeout {timeout} --heartbeat-timeout {heartbeat}, "
          f"every rank out within {limit} s")
    return ["--timeout", str(timeout), "--heartbeat-timeout", str(heartbeat)], limit


@case("fault_step_throws")
def _(ctx):
    flags, limit = fault_limits(ctx, "peers")
    fault_run(ctx, 4, PACE_ARGS + flags + ["--fail-at", "2:6:throw"], failing=2, killed=False,
              expect=["rank 2 failed at iteration 0, step 6 (", "injected fault"], limit=limit)


@case("fault_rank_killed")
def _(ctx):
    flags, limit = fault_limits(ctx, "peers")
    fault_run(ctx, 4, PACE_ARGS + flags + ["--fail-at", "1:6:kill"], failing=1, killed=True,
              expect=["rank 1 died or froze", "step 6 ("], limit=limit)


@case("fault_store_host_killed")
def _(ctx):
    flags, limit = fault_limits(ctx, "peers")
    fault_run(ctx, 4, PACE_ARGS + flags + ["--fail-at", "0:5:kill"], failing=0, killed=True,
              expect=["rank 0 (host of the rendezvous store) is gone", "step 5 ("], limit=limit)


@case("fault_rank_hangs_timeout")
def _(ctx):
    # Rank 1 freezes inside a step but keeps beating: its peers' waits time out and the report
    # names it and the step it is stuck in.
    flags, limit = fault_limits(ctx, "timeout")
    fault_run(ctx, 4, PACE_ARGS + flags + ["--fail-at", "1:4:hang"], failing=1, killed=False,
              expect=["rank 1 was last seen at iteration 0, step 4 ("], limit=limit)


# ---- faults in every mode: one fault per (mode, family), the kind and PP rotating ---------
# For mode i and family j the fault is throw / kill / hang by (i + j) mod 3, at PP=2 for even
# j and PP=4 for odd j (the MPipe families of mpipe_batched_recv alike), so every mode meets
# every kind and every family meets every kind across the modes. The failing rank is never
# rank 0 (the store host's death has its own case above).

FAULT_KINDS = ("throw", "kill", "hang")


def fault_matrix_run(ctx, mode):
    flags, families = MATRIX_MODES[mode]
    i = list(MATRIX_MODES).index(mode)
    # Every kind under the hang's limits: a hang needs the short timeout, and a throw or a kill
    # is still reported by its peers, within the same limit.
    limit_flags, limit = fault_limits(ctx, "timeout")

    def one(j, fam):
        """(description, error or None, what the run printed)"""
        kind = FAULT_KINDS[(i + j) % 3]
        pp = 2 if j % 2 == 0 else 4
        rank, step = (1, 4) if pp == 2 else (1 + (i + j) % 3, 5)
        args = _family_args(ctx, fam, pp) + flags + limit_flags + ["--fail-at", f"{rank}:{step}:{kind}"]
        expect = {
            "throw": [f"rank {rank} failed at iteration 0, step {step} (", "injected fault"],
            "kill": [f"rank {rank} died or froze", f"step {step} ("],
            "hang": [f"rank {rank} was last seen at iteration 0, step {step} ("],
        }[kind]
        what, lines = f"{fam} PP={pp} {kind} rank {rank} step {step}", []
        try:
            fault_run(ctx, pp, args, failing=rank, killed=kind == "kill", expect=expect, limit=limit, log=lines.append)
            return what, None, lines
        except (Failure, subprocess.TimeoutExpired) as e:
            return what, e, lines

    # A fault run mostly waits (a heartbeat, a timeout): two at a time, each within the same
    # limit (a hang's, which is derived from the machine's pace), halve the matrix's wall time.
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda jf: one(*jf), enumerate(families)))
    done, failures = [], []
    for what, error, lines in results:
        print(what + ":")
        for ln in lines:
            print("  " + ln)
        if error is None:
            done.append(what)
        else:
            failures.append(f"{what}: {error}")
    print(f"faults in mode {mode}: {len(done)} of {len(families)} named by every rank:")
    for d in done:
        print("  " + d)
    if failures:
        raise Failure(f"{len(failures)} of {len(families)} fault runs failed:\n" + "\n".join(failures))


for _mode in MATRIX_MODES:
    def _fault_matrix(ctx, mode=_mode):
        fault_matrix_run(ctx, mode)
    case(f"fault_matrix_{_mode}")(_fault_matrix)


# ---- refusals before any communication ----------------------------------------------------

def lone_rank(ctx, args, world=2, rank=1):
    """Runs ONE rank of a WORLD_SIZE-rank job with nobody else started: any attempt to
    communicate would block until --timeout (60 s); a refusal returns at once."""
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()))
    t0 = time.monotonic()
    p = subprocess.run([ctx.exe] + args + ["--timeout", "60"], env=env, capture_output=True, text=True, timeout=90)
    return p.returncode, p.stdout + p.stderr, time.monotonic() - t0


def expect_refusal(ctx, args, needle, world=2):
    rc, text, dt = lone_rank(ctx, args, world)
    if rc != 2 or needle not in text or dt > 20:
        raise Failure(f"expected exit 2 within seconds mentioning '{needle}', got {rc} after {dt:.1f} s:\n{text}")
    print(f"refused in {dt:.1f} s: {text.strip().splitlines()[0]}")


@case("refuses_schedule_with_violation")
def _(ctx):
    bad = os.path.join(ctx.data, "bad", "both_send_first.json")
    expect_refusal(ctx, ["--schedule", bad] + GPT, "refusing to run")
    # Every rank refuses: both print the refusal and exit 2, and nothing ran.
    rc, out, err, dt = launch(ctx, 2, ["--schedule", bad] + GPT, expect_rc=2)
    for r in (0, 1):
        if f"[rank {r}] error: rank {r}: refusing to run" not in err:
            raise Failure(f"rank {r} did not refuse:\n{err}")
    # --no-verify overrides with a warning (the schedule then deadlocks under rendezvous
    # semantics; not run here).


@case("refuses_modes_the_transport_cannot_honour")
def _(ctx):
    one = ["--generate", "1f1b", "--pp", "2", "--micro", "4"] + MLP
    # both_send_first completes with buffered sends only: verified under eager, refused to run
    # (the transports block a send until its receive is posted).
    bad = ["--schedule", os.path.join(ctx.data, "bad", "both_send_first.json")] + GPT
    expect_refusal(ctx, bad + ["--comm", "eager"], "--comm eager: the schedule completes only with buffered sends")
    # Every rank refuses, naming the mode, before any communication.
    rc, out, err, dt = launch(ctx, 2, bad + ["--comm", "eager"], expect_rc=2)
    for r in (0, 1):
        if f"[rank {r}] error: rank {r}: --comm eager" not in err:
            raise Failure(f"rank {r} did not refuse the mode:\n{err}")
    # --comm eager on a schedule that also completes under rendezvous runs.
    parity_run(ctx, 2, one + ["--comm", "eager"], iterations=1)


@case("no_verify_runs_it_and_the_deadlock_is_named_as_a_wait_cycle")
def _(ctx):
    # --no-verify overrides the refusal with a warning; both ranks then send first, block
    # until --timeout, and each names the cycle.
    bad = os.path.join(ctx.data, "bad", "both_send_first.json")
    flags, limit = fault_limits(ctx, "timeout")
    rc, out, err, dt = launch(ctx, 2, ["--schedule", bad, "--no-verify"] + flags + MLP, expect_rc=1, limit=limit)
    if "--no-verify: running 'both-send-first' unverified" not in err:
        raise Failure("no warning:\n" + err)
    for r, other in ((0, 1), (1, 0)):
        if f"[rank {r}] error:" not in err or f"the waits form a cycle: rank {r} -> rank {other} -> rank {r}" not in err:
            raise Failure(f"rank {r} did not report the wait cycle:\n{err}")
    print(f"deadlock reported as a wait cycle on both ranks in {dt:.1f} s")


@case("refuses_model_schedule_mismatch")
def _(ctx):
    one = ["--generate", "1f1b", "--pp", "2", "--micro", "4"]
    expect_refusal(ctx, one + GPT, "WORLD_SIZE is 3 but the schedule has 2 ranks", world=3)
    expect_refusal(ctx, one + GPT + ["--model-stages", "3"], "cut into 3 virtual stages")
    expect_refusal(ctx, one + GPT + ["--global-batch-size", "10"], "is not the schedule's 4 micro-batches")
    expect_refusal(ctx, ["--generate", "mpipe-transpose", "--pp", "2", "--micro", "4", "--tower-layers", "0"] + GPT,
                   "runs a trainable MPipe tower")
    expect_refusal(ctx, one + GPT + ["--tower-layers", "2"], "no step would run it")
    expect_refusal(ctx, ["--schedule", os.path.join(ctx.data, "exec", "1f1b_p2_m4_tied.json")] + GPT,
                   "ties none: add --tie-embeddings")
    expect_refusal(ctx, ["--generate", "1f1b", "--pp", "2", "--micro", "4", "--tie-embeddings"] + GPT,
                   "has no ALL_REDUCE")
    expect_refusal(ctx, ["--generate", "interleaved-1f1b", "--pp", "2", "--vpp", "4", "--micro", "4", "--model", "gpt",
                         "--layers", "4"], "cannot be split over 8 virtual stages")


@case("default_layers_one_block_per_stage_json_escaped_pp2")
def _(ctx):
    # Eight virtual stages without --layers: one block per stage (the default 4 would not
    # split), gradient parity against the reference of the same model. The schedule's name
    # has quotes, a backslash and control characters: the --json line must escape them.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "odd.json")
        run_ppsched(ctx, ["generate", "interleaved-1f1b", "--pp", "2", "--vpp", "4", "--micro", "4", "-o", path])
        with open(path) as f:
            doc = json.load(f)
        doc["name"] = 'odd "name" \\ with\ttab and \u0001'
        with open(path, "w") as f:
            json.dump(doc, f)
        rc, out, err, dt = launch(ctx, 2, ["--schedule", path, "--model", "mlp", "--hidden", "16", "--micro-batch-size", "2",
                                           "--check-parity", "--json"])
        s = summary(out)
        if s["schedule"] != doc["name"]:
            raise Failure(f"schedule name {s['schedule']!r}, expected {doc['name']!r}")
        if s["stages"] != 8 or not s["ok"] or not s["parity"]["ok"]:
            raise Failure("run failed: " + json.dumps(s))
        print(f"8 stages without --layers: parity ok over {s['parity']['tensors']} gradients; name {s['schedule']!r}")


# ---- --stage-module: the user's TorchScript stages ------------------------------------------

def stage_dir(ctx, stages, *flags):
    """A fresh directory of stage modules written by make_stage_modules (C++, no Python torch)."""
    d = tempfile.mkdtemp(prefix="ppsched-stages-")
    ctx.cleanup.append(d)
    p = subprocess.run([ctx.make_stage_modules, d, "--stages", str(stages)] + list(flags),
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise Failure(f"make_stage_modules failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return d


STAGE_CASES = {
    # name: (ranks, generator flags, stages, module kind); two iterations each: gradients
    # accumulate across runs of the schedule like for the built-in models.
    "1f1b_pp4": (4, ["--generate", "1f1b", "--pp", "4", "--micro", "8"], 4, "mlp"),
    "interleaved_v2_pp2": (2, ["--generate", "interleaved-1f1b", "--pp", "2", "--vpp", "2", "--micro", "4"], 4, "lm"),
    "interleaved_v2_pp4": (4, ["--generate", "interleaved-1f1b", "--pp", "4", "--vpp", "2", "--micro", "8"], 8, "mlp"),
    "zb_h1_pp4": (4, ["--generate", "zb-h1", "--pp", "4", "--micro", "8"], 4, "lm"),
    "zbv_pp2": (2, ["--generate", "zbv", "--pp", "2", "--vpp", "2", "--micro", "4"], 4, "mlp"),
    "mpipe_none_pp4": (4, ["--generate", "mpipe-transpose", "--pp", "4", "--micro", "8", "--overflow", "full",
                           "--tower", "none", "--tower-layers", "0"], 4, "mlp"),
}
for _name, (_ranks, _gen, _stages, _kind) in STAGE_CASES.items():
    def _stage(ctx, ranks=_ranks, gen=_gen, stages=_stages, kind=_kind):
        d = stage_dir(ctx, stages, "--kind", kind)
        parity_run(ctx, ranks, gen + ["--stage-module", d], iterations=2)
    case(f"parity_stage_module_{_name}")(_stage)


@case("stage_module_parity_detects_a_wrong_gradient")
def _(ctx):
    # The negative control with stage modules: a corrupted gradient must fail the check.
    d = stage_dir(ctx, 2)
    expect_parity_failure(ctx, 2, ["--generate", "1f1b", "--pp", "2", "--micro", "4", "--stage-module", d, "--fail-at",
                                   "1:3:corrupt"], 1e-4, "stage1.", "corrupted stage-module gradients")


@case("refuses_stage_module_mistakes")
def _(ctx):
    one = ["--generate", "1f1b", "--pp", "2", "--micro", "4"]
    four = ["--generate", "1f1b", "--pp", "4", "--micro", "4"]
    # Missing module file, wrong stage counts (manifest vs schedule, a leftover stage file).
    expect_refusal(ctx, four + ["--stage-module", stage_dir(ctx, 4, "--omit", "2")],
                   "stage2.pt: missing: stages.json declares 4 stages", world=4)
    expect_refusal(ctx, four + ["--stage-module", stage_dir(ctx, 3)],
                   "stages.json declares 3 stage modules but the schedule has 4 virtual stages", world=4)
    expect_refusal(ctx, one + ["--stage-module", stage_dir(ctx, 3, "--manifest-stages", "2")],
                   "stage2.pt: is there, but stages.json declares 2 stages")
    # A module whose input does not fit the previous stage's output; a last stage without a loss.
    expect_refusal(ctx, four + ["--stage-module", stage_dir(ctx, 4, "--bad-width", "2")],
                   "stage2.pt cannot take stage 1's output [2, 16] Float: ", world=4)
    expect_refusal(ctx, one + ["--stage-module", stage_dir(ctx, 2, "--last-returns-output")],
                   "stage1.pt: forward takes 1 argument(s) but the last stage's forward must take (x, target)")
    # No manifest; built-in model options; an MPipe tower.
    empty = tempfile.mkdtemp(prefix="ppsched-stages-")
    ctx.cleanup.append(empty)
    expect_refusal(ctx, one + ["--stage-module", empty], "stages.json: missing: a --stage-module directory needs")
    d2 = stage_dir(ctx, 2)
    expect_refusal(ctx, one + ["--stage-module", d2, "--layers", "4"], "--layers describes a built-in model")
    expect_refusal(ctx, ["--generate", "mpipe-transpose", "--pp", "2", "--micro", "4", "--stage-module", d2],
                   "runs a trainable MPipe tower, which cannot be cut out of TorchScript stages")
    # Every rank refuses a module that does not fit, and nothing ran.
    bad = stage_dir(ctx, 2, "--bad-width", "1")
    rc, out, err, dt = launch(ctx, 2, one + ["--stage-module", bad], expect_rc=2)
    for r in (0, 1):
        if f"[rank {r}] error: rank {r}: {bad}/stage1.pt cannot take stage 0's output" not in err:
            raise Failure(f"rank {r} did not refuse the misfit module:\n{err}")
    print(f"every rank refused the misfit module in {dt:.1f} s")


@case("launch_local_prefixes_output_and_propagates_failure")
def _(ctx):
    p = subprocess.run([sys.executable, ctx.launcher, "3", "--grace", "5", "--", "sh", "-c",
                        'echo "hello from $RANK of $WORLD_SIZE"; [ "$RANK" != 1 ] || exit 3'],
                       capture_output=True, text=True, timeout=60)
    for r in range(3):
        if f"[rank {r}] hello from {r} of 3" not in p.stdout:
            raise Failure("missing prefixed line for rank %d:\n%s" % (r, p.stdout))
    if p.returncode != 3 or "rank 1 exited with status 3" not in p.stderr:
        raise Failure(f"expected status 3 from rank 1, got {p.returncode}:\n{p.stderr}")
    print("launch-local: prefixes and failure status ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--exe")
    ap.add_argument("--ppsched", help="the ppsched CLI (generate, calibrate, simulate)")
    ap.add_argument("--launcher")
    ap.add_argument("--data")
    ap.add_argument("--make-stage-modules", help="tests/exec/make_stage_modules (the --stage-module cases)")
    ap.add_argument("--validate-trace", help="tests/validate_trace, the strict trace validator (traced cases)")
    ap.add_argument("case", nargs="?")
    ctx = ap.parse_args()
    if ctx.list:
        print("\n".join(CASES))
        return 0
    if ctx.case not in CASES:
        print(f"unknown case {ctx.case}", file=sys.stderr)
        return 2
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ctx.cleanup = []
    try:
        CASES[ctx.case](ctx)
    except Failure as e:
        print(f"FAILED {ctx.case}: {e}", file=sys.stderr)
        return 1
    except subprocess.TimeoutExpired as e:
        print(f"FAILED {ctx.case}: timed out: {e}", file=sys.stderr)
        return 1
    finally:
        for d in ctx.cleanup:
            shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
