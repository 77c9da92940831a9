"""Runs hyper-parallel's own P2P transport passes on ScheduleInterleaved1F1B and prints the orders.

Usage: python3 run_transports.py SCHEDULER_PY [OUT] [--utils UTILS_PY] [--plain]

SCHEDULER_PY is hyper-parallel's hyper_parallel/core/pipeline_parallel/scheduler.py (this script
holds none of its code; it loads the given file unmodified). Its sibling utils.py (MetaStep,
MetaStepType) is loaded from the same folder unless --utils names another. The imports the
ordering path does not use (torch, torch.distributed, the hyper_parallel package, fully_shard,
pipeline_swap, _microbatch, _p2p) are empty stand-in modules, only so the module loads.

Each schedule is built as hyper-parallel's own order tests build it: object.__new__, the ordering
attributes (real_stage_num, n_local_stages, micro_batch_num, _less_memory, _overlap_b_f,
_enable_dxdw_split, _init_round_layout()); then, with _p2p_transport set, no swap and no FSDP
(one stand-in stage per local chunk: no HSDP module, pp_group None), build_exec_order(), which runs
construct_exec_order() and then coalesce_p2p ("batch") or attach_fwd_boundary_p2p ("boundary").
The same orders are rebuilt by calling construct_exec_order() and the pass directly, and must be
equal. --plain prints construct_exec_order() alone (no transport), in the format of
interleaved_1f1b.txt.gz, to check the loaded file against that data.

Format: a case line (the ppsched command line), then one line per rank, `rK: tok tok ...`, tokens in
PyTorch action notation <stage><ACTION><micro> (F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B;
hyper-parallel's step names otherwise; the stage left out where it is None or -1, the micro where
it is None), composites as (<a>;<b>)OVERLAP_B_F and (<a>;<b>;...)BATCH_SEND_RECV, '.' = a None
bubble. An OVERLAP_B_F carrying boundary_p2p is followed by its boundary steps, each prefixed '^',
in the order boundary_p2p holds them.
"""
import importlib.util
import os
import sys
import types

SOURCE = ("1372298/hyper-parallel scheduler.py @ f88b742db3337cbac7cf47406a6ad7994908fef4, "
          "utils.py of mindspore-ai/hyper-parallel @ 0e81ad83f3b8fa59c9c5f31920405cebdf1fb5ae")

PKG = "hyper_parallel.core.pipeline_parallel"


def _module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    mod.__path__ = []  # a package, so its submodules import
    sys.modules[name] = mod
    return mod


def _stub(*_args, **_kwargs):
    raise RuntimeError("stand-in called: the ordering path does not use it")


class _Stub:
    """Stand-in class (never instantiated on the ordering path)."""


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load(scheduler_py, utils_py):
    torch = _module("torch")
    dist = _module("torch.distributed")
    torch.distributed = dist
    _module("hyper_parallel", PipelineStage=_Stub)
    _module("hyper_parallel.core")
    _module("hyper_parallel.core.fully_shard")
    _module("hyper_parallel.core.fully_shard.api", HSDPModule=_Stub)
    _module(PKG)
    _module(PKG + ".pipeline_swap", PipelineSwapSession=_Stub, inject_pipeline_swap_steps=_stub,
            swap_launch_load=_stub, swap_launch_offload=_stub, swap_wait_load=_stub,
            swap_wait_offload=_stub, unregister_layer_swap_hooks=_stub)
    _module(PKG + "._microbatch", _MicroBatch=_Stub)
    _module(PKG + "._p2p", create_p2p_multi_stream_groups=_stub, prepare_batch_p2p_group=_stub)
    utils = _load(utils_py, PKG + ".utils")
    sched = _load(scheduler_py, PKG + ".scheduler")
    return sched, utils


NAMES = {"FWD": "F", "BWD": "B", "BWD_INPUT": "I", "BWD_WEIGHT": "W", "FWD_SEND": "SEND_F",
         "FWD_RECV": "RECV_F", "BWD_SEND": "SEND_B", "BWD_RECV": "RECV_B"}


def token(step):
    if step is None:
        return "."
    name = step.type.name
    if step.sub_steps:
        tok = "(%s)%s" % (";".join(token(s) for s in step.sub_steps), name)
    else:
        stage = "" if step.stage_index is None or step.stage_index < 0 else str(step.stage_index)
        micro = "" if step.micro_index is None else str(step.micro_index)
        tok = stage + NAMES.get(name, name) + micro
    boundary = getattr(step, "boundary_p2p", None)
    if boundary:
        tok += "".join(" ^" + token(s) for s in boundary)
    return tok


def build(sched, P, V, M, less, obf, dxdw):
    """The schedule object as hyper-parallel's order tests build it."""
    s = object.__new__(sched.ScheduleInterleaved1F1B)
    s.real_stage_num = P
    s.n_local_stages = V
    s.micro_batch_num = M
    s._stage_num = P * V
    s.exec_order = {}
    s._less_memory = less
    s._overlap_b_f = obf
    s._enable_dxdw_split = dxdw
    s._init_round_layout()
    return s


def with_transport(sched, P, V, M, less, obf, dxdw, transport):
    """build_exec_order() on the object, p2p_transport set, no swap, no FSDP."""
    s = build(sched, P, V, M, less, obf, dxdw)
    no_modules = types.SimpleNamespace(named_modules=lambda: [])
    # Rank 0's local chunks (stage k*P); no HSDP module -> _inject_local_fsdp_actions is a no-op.
    s.stages = [types.SimpleNamespace(stage_index=k * P, pp_group=None, mesh=None,
                                      submodule=no_modules) for k in range(V)]
    s._stage_to_rank_index = {k: k % P for k in range(P * V)}
    s._p2p_transport = transport
    s._pp_swap_enabled = False
    s.build_exec_order()
    assert s._p2p_mode == transport, (s._p2p_mode, transport)
    return s.exec_order


def direct(sched, P, V, M, less, obf, dxdw, transport):
    """construct_exec_order() then the pass, called as build_exec_order calls it."""
    s = build(sched, P, V, M, less, obf, dxdw)
    s.construct_exec_order()
    order = s.exec_order
    if transport == "boundary":
        order = sched.attach_fwd_boundary_p2p(order)
    elif transport == "batch":
        order = sched.coalesce_p2p(order)
    return order


def lines(order, P):
    return ["r%d: %s" % (r, " ".join(token(x) for x in order[r])) for r in range(P)]


VARIANTS = [  # (less_memory, overlap_b_f, dxdw_split)
    (False, False, False), (True, False, False), (False, True, False), (False, True, True)]


def case_line(P, V, M, less, obf, dxdw):
    line = "case interleaved-1f1b --pp %d --vpp %d --micro %d --data-steps" % (P, V, M)
    if less:
        line += " --less-memory"
    if obf:
        line += " --overlap-b-f"
    if dxdw:
        line += " --dxdw-split"
    return line


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    plain = "--plain" in argv
    utils_py = None
    if "--utils" in argv:
        utils_py = argv[argv.index("--utils") + 1]
        args.remove(utils_py)
    scheduler_py = args[0]
    if utils_py is None:
        utils_py = os.path.join(os.path.dirname(os.path.abspath(scheduler_py)), "utils.py")
    out = open(args[1], "w") if len(args) > 1 else sys.stdout
    sched, _ = load(scheduler_py, utils_py)

    w = lambda s: out.write(s + "\n")
    if plain:
        w("# hyper-parallel's ScheduleInterleaved1F1B construct_exec_order() orders (no transport pass):")
        w("# " + SOURCE + ".")
    else:
        w("# hyper-parallel's own P2P transport passes on ScheduleInterleaved1F1B, run unmodified under a stub:")
        w("# " + SOURCE + ".")
        w("# object.__new__ + ordering attributes + _init_round_layout(), then build_exec_order() with")
        w("# _p2p_transport 'batch' (coalesce_p2p) or 'boundary' (attach_fwd_boundary_p2p, overlap_b_f only),")
        w("# no swap, no FSDP. Tokens as interleaved_1f1b.txt.gz, plus (<a>;<b>;...)BATCH_SEND_RECV and an")
        w("# OVERLAP_B_F's boundary_p2p steps right after it, each prefixed '^'. '.' = None bubble.")
    counts = {}
    for P in range(2, 6):
        for V in (1, 2):
            for M in range(P - 1, 3 * P + 1):
                for less, obf, dxdw in VARIANTS:
                    base = case_line(P, V, M, less, obf, dxdw)
                    if plain:
                        s = build(sched, P, V, M, less, obf, dxdw)
                        s.construct_exec_order()
                        w(base)
                        for l in lines(s.exec_order, P):
                            w(l)
                        continue
                    for transport in ("batch", "boundary"):
                        if transport == "boundary" and not obf:
                            continue
                        order = with_transport(sched, P, V, M, less, obf, dxdw, transport)
                        got = lines(order, P)
                        again = lines(direct(sched, P, V, M, less, obf, dxdw, transport), P)
                        assert got == again, (base, transport)
                        w(base + " --p2p-transport " + transport)
                        for l in got:
                            w(l)
                        counts[transport] = counts.get(transport, 0) + 1
    if out is not sys.stdout:
        out.close()
    if counts:
        sys.stderr.write("cases: %s\n" % counts)


if __name__ == "__main__":
    import logging
    logging.disable(logging.CRITICAL)
    main(sys.argv[1:])
