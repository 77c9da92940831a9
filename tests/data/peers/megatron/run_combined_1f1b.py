#!/usr/bin/env python3
"""Runs Megatron-LM's own combined-1F1B ("--overlap-moe-expert-parallel-comm", optionally
"--delay-wgrad-compute") schedule, unmodified, under stubs, and writes what it did.

    python3 run_combined_1f1b.py MEGATRON_REPOSITORY [OUTDIR]    (a clone, or a bare git directory)

writes OUTDIR/combined_1f1b_order.json and OUTDIR/combined_1f1b_layer_phases.json (OUTDIR
defaults to this script's folder). No torch needed: a pure-Python stand-in for the few torch
names the code touches is installed as `torch`.

Megatron files run unmodified (read with `git show HEAD:<path>`, compiled under their own module
names): megatron/core/pipeline_parallel/{schedules,combined_1f1b,utils}.py,
megatron/core/models/common/{model_chunk_schedule_plan,utils}.py. Acceptance checks are the
`if` statements of TransformerConfig.__post_init__ (overlap_moe_expert_parallel_comm /
delay_wgrad_compute blocks), ModelParallelConfig.__post_init__ (microbatch group default) and
megatron/training/arguments.py validate_args (V = 1 -> None, the interleaved P > 2 rule), each
statement compiled alone and unmodified. Everything else Megatron imports is a stub:
  * torch: tensors are placeholders that remember the tensors they were computed from; the
    autograd engine walks that graph and sets .grad on leaves; torch.cuda.Stream/Event/stream()/
    current_stream() are fakes that LOG every event record/wait with the stream it is issued on;
  * p2p: P2PCommunicator is a fake that completes at once and LOGS each call;
  * the model: a chunk has pre_process (embedding) on rank 0 chunk 0 and post_process (output
    layer + loss) on the last rank's last chunk, and K MoE layers; build_layer_callables (the
    layer's sub-module bodies) is a stub returning placeholder computations, so the nodes,
    streams, events and their order are Megatron's (TransformerLayerSchedulePlan,
    TransformerLayerNode, ScheduleNode, PreProcessNode, PostProcessNode are the real classes);
  * forward_step_func: takes the micro-batch id from the chunk's data iterator
    (iter(range(M))) and returns Megatron's real TransformerModelChunkSchedulePlan and a loss.
The script wraps (calls the originals) combined_1f1b_schedule_for_interleaved_pipelining and
combined_forward_backward_step to record each step's forward / backward (micro-batch, chunk).
"""
import ast
import contextlib
import json
import os
import subprocess
import sys
import types
import weakref
from typing import Callable

REPO = sys.argv[1]
OUTDIR = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.abspath(__file__))


def git(*a):
    return subprocess.run(["git", "-C", REPO] + list(a), capture_output=True, text=True, check=True).stdout


COMMIT = git("rev-parse", "HEAD").strip()


def source(path):
    return git("show", COMMIT + ":" + path)


# ----------------------------------------------------------------------------- the trace
LOG = []
STATE = {"phase": None}


def log(**e):
    LOG.append(e)


# ----------------------------------------------------------------------------- fake torch
def new_module(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    parent, _, child = name.rpartition(".")
    if parent:
        if parent not in sys.modules:
            new_module(parent)
        setattr(sys.modules[parent], child, m)
    return m


class Tensor:
    """A placeholder: remembers the tensors it was computed from (_srcs)."""

    def __init__(self, srcs=(), requires_grad=False, tag=None):
        self._srcs = [s for s in srcs if isinstance(s, Tensor)]
        self.requires_grad = requires_grad
        self.grad = None
        self.tag = tag
        self.is_cuda = False
        self._base = None

    def detach(self):
        return Tensor((), False, self.tag)

    def retain_grad(self):
        pass

    def record_stream(self, stream):
        pass

    def untyped_storage(self):
        return types.SimpleNamespace(resize_=lambda n: None)

    def __iadd__(self, o):
        return self

    __imul__ = __itruediv__ = __iadd__

    def numel(self):
        return 1

    def size(self):
        return (1,)

    def float(self):
        return self


def _backprop(t):
    for s in t._srcs:
        if s._srcs:
            _backprop(s)
        elif s.requires_grad:
            s.grad = Tensor((), False, "grad")


class Stream:
    def __init__(self, device=None, priority=0, label=None):
        self.label = label or "comm"

    @staticmethod
    def priority_range():
        return (0, -1)


DEFAULT_STREAM = Stream(label="comp")
_CURRENT = [DEFAULT_STREAM]


def current_stream(device=None):
    return _CURRENT[-1]


@contextlib.contextmanager
def cuda_stream(s):
    if s is None:
        yield
        return
    _CURRENT.append(s)
    try:
        yield
    finally:
        _CURRENT.pop()


class Event:
    def __init__(self, *a, **k):
        self.label = "event"

    def record(self, stream=None):
        log(t="record", event=self.label, stream=(stream or current_stream()).label)

    def wait(self, stream=None):
        log(t="wait", event=self.label, stream=(stream or current_stream()).label)


def run_backward(tensors, grad_tensors=None, **k):
    log(t="autograd", stream=current_stream().label, of=[x.tag for x in tensors if isinstance(x, Tensor)])
    for x in tensors:
        if isinstance(x, Tensor):
            _backprop(x)


def autograd_backward(tensors, grad_tensors=None, **k):
    run_backward(tensors if isinstance(tensors, (list, tuple)) else [tensors], grad_tensors)


class Variable:
    _execution_engine = types.SimpleNamespace(run_backward=run_backward)


class Function:
    @classmethod
    def apply(cls, *a):
        return cls.forward(None, *a)


class Module:
    def parameters(self):
        return iter(())


class ProcessGroup:
    def __init__(self, rank, size):
        self._rank, self._size = rank, size

    def rank(self):
        return self._rank

    def size(self):
        return self._size


torch = new_module(
    "torch", Tensor=Tensor, Size=tuple, int="int", int64="int64", float32="float32", bfloat16="bf16",
    device=lambda *a, **k: "cuda", zeros=lambda *a, **k: Tensor(), tensor=lambda *a, **k: Tensor(),
    empty=lambda *a, **k: Tensor(), clamp=lambda x, **k: x, autocast=lambda *a, **k: contextlib.nullcontext(),
    is_tensor=lambda x: isinstance(x, Tensor), chunk=None, cat=None)
new_module("torch.cuda", Event=Event, Stream=Stream, stream=cuda_stream, current_stream=current_stream,
           synchronize=lambda: None, current_device=lambda: 0, is_available=lambda: False)
new_module("torch.autograd", Variable=Variable, Function=Function, backward=autograd_backward)
new_module("torch.autograd.variable", Variable=Variable)
new_module("torch.nn", Module=Module)
new_module("torch.distributed", ProcessGroup=ProcessGroup, get_process_group_ranks=lambda g: list(range(g.size())))
torch.cuda, torch.autograd, torch.nn, torch.distributed = (sys.modules["torch." + n] for n in ("cuda", "autograd", "nn", "distributed"))

# ----------------------------------------------------------------------------- megatron stubs
PP = {"rank": 0, "size": 1, "vp": None}  # the rank being run


def nvtx_range_push(msg=None, suffix=None):
    if suffix is not None:
        STATE["phase"] = suffix
    # ScheduleNode.stream_acquire_context waits on the node's stream, pushes the range, then
    # enters the node's stream: the range belongs to the stream of that wait.
    on = LOG[-1]["stream"] if LOG and LOG[-1]["t"] == "wait" else current_stream().label
    log(t="push", name=msg if msg is not None else suffix, stream=on)


def nvtx_range_pop(msg=None, suffix=None):
    pass


def identity_decorator(*a, **k):
    return lambda f: f


class ProcessGroupCollection:
    pass


class MultiModuleProcessGroupCollection:
    pass


class MultiModulePipelineCommunicator:
    pass


class FakeHandle:
    def __init__(self, key, call):
        self.key, self.call = key, call

    def wait(self):
        log(t="p2p_wait", handle=self.key, of_call=self.call, stream=current_stream().label)


class P2PCommunicator:
    """Completes at once; logs each call. Returns what Megatron's P2PCommunicator returns:
    the received tensor (None when nothing is received) and, when overlap_p2p_comm, the dict of
    handles _p2p_ops would return (keys only for the transfers that happen)."""

    def __init__(self, rank, size, vp, config):
        self.config = config
        self.pp_group = ProcessGroup(rank, size)
        self.virtual_pipeline_model_parallel_size = vp
        self.calls = 0

    @property
    def is_pp_last_stage(self):
        return self.pp_group.rank() == self.pp_group.size() - 1

    def _call(self, name, send_next=None, send_prev=None, recv_prev=False, recv_next=False, overlap=False):
        self.calls += 1
        cid = self.calls
        log(t="p2p", call=cid, op=name, send_next=send_next is not None, send_prev=send_prev is not None,
            recv_prev=bool(recv_prev), recv_next=bool(recv_next), stream=current_stream().label,
            overlap=bool(overlap))
        rp = Tensor((), True, "recv_prev") if recv_prev else None
        rn = Tensor((), True, "recv_next") if recv_next else None
        handles = {}
        if send_next is not None:
            handles["send_next"] = FakeHandle("send_next", cid)
        if recv_prev:
            handles["recv_prev"] = FakeHandle("recv_prev", cid)
        if send_prev is not None:
            handles["send_prev"] = FakeHandle("send_prev", cid)
        if recv_next:
            handles["recv_next"] = FakeHandle("recv_next", cid)
        return rp, rn, handles

    def recv_forward(self, tensor_shapes, is_first_stage):
        if is_first_stage:
            return None
        return self._call("recv_forward", recv_prev=True)[0]

    def recv_backward(self, tensor_shapes, is_last_stage):
        if is_last_stage:
            return None
        return self._call("recv_backward", recv_next=True)[1]

    def send_forward_recv_forward(self, output_tensor, recv_prev, tensor_shape, overlap_p2p_comm=False):
        rp, _, h = self._call("send_forward_recv_forward", send_next=output_tensor, recv_prev=recv_prev,
                              overlap=overlap_p2p_comm)
        return (rp, h) if overlap_p2p_comm else rp

    def send_backward_recv_backward(self, input_tensor_grad, recv_next, tensor_shape, overlap_p2p_comm=False):
        _, rn, h = self._call("send_backward_recv_backward", send_prev=input_tensor_grad, recv_next=recv_next,
                              overlap=overlap_p2p_comm)
        return (rn, h) if overlap_p2p_comm else rn

    def send_forward_backward_recv_forward_backward(self, output_tensor, input_tensor_grad, recv_prev, recv_next,
                                                    tensor_shape):
        rp, rn, _ = self._call("send_forward_backward_recv_forward_backward", send_next=output_tensor,
                               send_prev=input_tensor_grad, recv_prev=recv_prev, recv_next=recv_next)
        return rp, rn


def is_pipeline_last_stage(ignore_virtual=True, vp_stage=None):
    last = PP["rank"] == PP["size"] - 1
    if not ignore_virtual and PP["vp"] is not None and vp_stage is not None:
        last = last and vp_stage == PP["vp"] - 1
    return last


class CudaGraphModule:
    attn, mlp, moe, moe_router, moe_preprocess = "attn", "mlp", "moe", "moe_router", "moe_preprocess"


class MultiTokenPredictionLayer:
    pass


class TransformerLayer:
    pass


class ScaleStub:
    @staticmethod
    def set_loss_scale(x):
        pass


new_module("megatron.core.parallel_state",
           get_pipeline_model_parallel_world_size=lambda: PP["size"],
           get_pipeline_model_parallel_rank=lambda: PP["rank"],
           get_virtual_pipeline_model_parallel_world_size=lambda: PP["vp"],
           is_pipeline_last_stage=is_pipeline_last_stage, get_context_parallel_world_size=lambda: 1)
new_module("megatron.core.utils", get_pg_rank=lambda g: g.rank(), get_pg_size=lambda g: g.size(),
           log_single_rank=lambda *a, **k: None, make_viewless_tensor=lambda inp, requires_grad, keep_graph: inp,
           nvtx_range_push=nvtx_range_push, nvtx_range_pop=nvtx_range_pop, internal_api=lambda f: f,
           drain_embedding_wgrad_compute=lambda *a, **k: None,
           get_attr_wrapped_model=lambda m, attr, allow_none=True, return_model_obj=False: m if return_model_obj else getattr(m, attr),
           get_model_config=lambda m: m.config, get_model_type=lambda m: "encoder_or_decoder")
new_module("megatron.core.pipeline_parallel.fine_grained_activation_offload",
           FineGrainedActivationOffloadingInterface=None)
new_module("megatron.core.pipeline_parallel.multimodule_communicator",
           MultiModulePipelineCommunicator=MultiModulePipelineCommunicator)
new_module("megatron.core.pipeline_parallel.p2p_communication", P2PCommunicator=P2PCommunicator)
new_module("megatron.core.pipeline_parallel.hybrid_cp_schedule", hybrid_context_parallel_forward_backward=None)
new_module("megatron.core.process_groups_config", ProcessGroupCollection=ProcessGroupCollection,
           MultiModuleProcessGroupCollection=MultiModuleProcessGroupCollection)
new_module("megatron.core.transformer.cuda_graphs", create_cudagraphs=lambda: None,
           set_current_microbatch=lambda model, mb: log(t="set_current_microbatch", micro=mb, chunk=model.vp_stage))
new_module("megatron.core.transformer.moe.paged_stash", paged_stash_reset=lambda **k: None)
new_module("megatron.core.transformer.moe.router", MoEAuxLossAutoScaler=ScaleStub)
new_module("megatron.core.transformer.multi_token_prediction", MTPLossAutoScaler=ScaleStub,
           MultiTokenPredictionLayer=MultiTokenPredictionLayer)
new_module("megatron.core.transformer.enums", CudaGraphModule=CudaGraphModule)
new_module("megatron.core.transformer.module", GraphableMegatronModule=Module, float16_to_fp32=lambda x: x)
new_module("megatron.core.transformer.transformer_layer", TransformerLayer=TransformerLayer,
           make_viewless_tensor=lambda inp, requires_grad, keep_graph: inp)
new_module("megatron.core.telemetry.fallbacks", trace_fn=identity_decorator)
new_module("megatron.core.distributed.fsdp.src.megatron_fsdp.utils", find_megatron_fsdp=lambda m: None)
new_module("megatron.core.enums", Fp8Recipe=types.SimpleNamespace(delayed="delayed"))
new_module("megatron.core.fp8_utils", get_fp8_context=lambda *a, **k: contextlib.nullcontext())


class DW:
    """A weight-gradient callable of build_layer_callables' backward_dw map."""

    def __init__(self, what):
        self.what = what

    def backward_dw(self):
        log(t="wgrad_callable", what=self.what, stream=current_stream().label)

    def parameters(self):
        return iter(())


def build_layer_callables(layer):
    """Stub of megatron/core/models/common/fine_grained_callables.py:build_layer_callables: the
    five slot bodies (pre_dispatch_computation, moe_dispatch, mlp, moe_combine, mtp_post_process)
    as placeholder computations with the real slots' input/output arity."""

    def body(slot, n_out):
        def f(node, *inputs):
            outs = tuple(Tensor(inputs, True, "L%d.%s" % (layer.layer_number, slot)) for _ in range(n_out))
            return outs[0] if n_out == 1 else outs
        return f

    moe = layer.is_moe
    fwd = [body("pre_dispatch_computation", 2 if moe else 1), body("moe_dispatch", 1), body("mlp", 1),
           body("moe_combine", 1), None]
    return fwd, {"pre_dispatch_computation": DW("attention (+shared experts) wgrad"), "mlp": DW("experts wgrad")}


new_module("megatron.core.models.common.fine_grained_callables", build_layer_callables=build_layer_callables,
           get_layer_moe_metadata=lambda layer: (layer.is_moe, 4 if layer.is_moe else None))


def load(modname, path):
    """Compile one Megatron file, unmodified, as module `modname`."""
    m = new_module(modname)
    m.__file__ = path
    m.__package__ = modname.rpartition(".")[0]
    exec(compile(source(path), path, "exec"), m.__dict__)
    return m


pp_utils = load("megatron.core.pipeline_parallel.utils", "megatron/core/pipeline_parallel/utils.py")
common_utils = load("megatron.core.models.common.utils", "megatron/core/models/common/utils.py")
plan_mod = load("megatron.core.models.common.model_chunk_schedule_plan",
                "megatron/core/models/common/model_chunk_schedule_plan.py")
c1f1b = load("megatron.core.pipeline_parallel.combined_1f1b", "megatron/core/pipeline_parallel/combined_1f1b.py")
sched = load("megatron.core.pipeline_parallel.schedules", "megatron/core/pipeline_parallel/schedules.py")
FILES = ["megatron/core/pipeline_parallel/schedules.py", "megatron/core/pipeline_parallel/combined_1f1b.py",
         "megatron/core/pipeline_parallel/utils.py", "megatron/core/models/common/model_chunk_schedule_plan.py",
         "megatron/core/models/common/utils.py"]


def statements(path, cls, func, tests):
    """The top-level `if` statements of cls.func (or module function func) whose test's source
    is in `tests`, compiled alone and unmodified into check(self_or_args, **globals)."""
    tree = ast.parse(source(path))
    body = tree.body
    if cls:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls).body
    fn = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == func)
    picked = [n for n in fn.body if isinstance(n, ast.If) and ast.unparse(n.test) in tests]
    assert len(picked) == len(tests), (path, func, tests)
    wrapper = ast.FunctionDef(name="check", args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=fn.args.args[0].arg)],
                              kwonlyargs=[], kw_defaults=[], defaults=[]), body=picked, decorator_list=[], returns=None)
    mod = ast.fix_missing_locations(ast.Module(body=[wrapper], type_ignores=[]))
    return mod, path


def compiled(mod_path, glb):
    mod, path = mod_path
    ns = dict(glb)
    exec(compile(mod, path, "exec"), ns)
    return ns["check"]


ARGS_CHECK = compiled(statements("megatron/training/arguments.py", None, "validate_args",
                                 ["args.virtual_pipeline_model_parallel_size is not None"]), {})
MPC_CHECK = compiled(statements("megatron/core/model_parallel_config.py", "ModelParallelConfig", "__post_init__",
                                ["self.microbatch_group_size_per_vp_stage is None"]), {})
TC_CHECK = compiled(statements("megatron/core/transformer/transformer_config.py", "TransformerConfig", "__post_init__",
                               ["self.overlap_moe_expert_parallel_comm", "self.delay_wgrad_compute"]),
                    {"is_torch_min_version": lambda v: True, "is_te_min_version": lambda v: True,
                     "CudaGraphModule": CudaGraphModule})
ACCEPT_SOURCES = ["megatron/training/arguments.py validate_args: `if args.virtual_pipeline_model_parallel_size is not None:`",
                  "megatron/core/model_parallel_config.py ModelParallelConfig.__post_init__: `if self.microbatch_group_size_per_vp_stage is None:`",
                  "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__: `if self.overlap_moe_expert_parallel_comm:` and `if self.delay_wgrad_compute:`"]


# ----------------------------------------------------------------------------- config and model
def make_config(P, V, G, delay, overlap_p2p, early_release=False):
    return types.SimpleNamespace(
        # pipeline schedule
        pipeline_model_parallel_size=P, virtual_pipeline_model_parallel_size=V,
        microbatch_group_size_per_vp_stage=G, overlap_p2p_comm=overlap_p2p, batch_p2p_comm=not overlap_p2p,
        overlap_p2p_comm_warmup_flush=False, overlap_moe_expert_parallel_comm=True, delay_wgrad_compute=delay,
        ep_overlap_early_attn_memory_release=early_release, high_priority_a2a_comm_stream=False,
        finalize_model_grads_func=None, timers=None, no_sync_func=None, grad_sync_func=None, param_sync_func=None,
        hidden_size=8, sequence_parallel=False, num_microbatches_with_partial_activation_checkpoints=None,
        deallocate_pipeline_outputs=False, enable_autocast=False, autocast_dtype=None, grad_scale_func=None,
        calculate_per_token_loss=False, cuda_graph_impl="none", fine_grained_activation_offloading=False,
        # precision / MoE (what TransformerConfig's checks and TransformerLayerNode read)
        fp8=None, fp4=None, fp8_recipe=None, bf16=True, fp16=False, expert_model_parallel_size=2,
        moe_token_dispatcher_type="alltoall", moe_flex_dispatcher_backend=None, moe_ncclep_zero_copy=False,
        moe_shared_expert_overlap=False, recompute_granularity=None, recompute_method=None,
        recompute_num_layers=None, recompute_modules=[], mtp_num_layers=None, cuda_graph_modules=[],
        fine_grained_activation_offloading_modules=None, offload_modules=None)


class FakeLayer:
    def __init__(self, config, number, is_moe=True):
        self.config, self.layer_number, self.is_moe = config, number, is_moe


class Chunk(Module):
    def __init__(self, config, vp_stage, n_layers, pre_process, post_process, dense_layers=()):
        self.config, self.vp_stage = config, vp_stage
        self.pre_process, self.post_process = pre_process, post_process
        self.decoder = types.SimpleNamespace(
            layers=[FakeLayer(config, i, i not in dense_layers) for i in range(n_layers)], input_tensor=None,
            final_layernorm=None)
        self.mtp = None

    def set_input_tensor(self, t):
        self.decoder.input_tensor = t[0]

    def build_schedule_plan(self, *a, **k):  # only looked up by get_attr_wrapped_model
        raise AssertionError

    def _preprocess(self, input_ids, position_ids, decoder_input, packed_seq_params, padding_mask):
        src = [decoder_input] if decoder_input is not None else []
        return Tensor(src, True, "embedding" if self.pre_process else "received"), None, None, None, None, None

    def _postprocess(self, hidden_states, **k):
        return Tensor([hidden_states], True, "output_layer")


def forward_step_func(data_iterator, model, return_schedule_plan=False):
    assert return_schedule_plan
    micro = next(data_iterator)
    plan = plan_mod.TransformerModelChunkSchedulePlan(model, Tensor(), Tensor(), None)
    plan.tag = (micro, model.vp_stage)
    plan.event.label = "E(m%d,c%s)" % (micro, model.vp_stage)
    log(t="build_plan", micro=micro, chunk=model.vp_stage)

    def loss_func(output_tensor):
        return Tensor([output_tensor], True, "loss"), {"lm loss": 0}

    return plan, loss_func


# ----------------------------------------------------------------------------- step recorder
STEPS = []
ORIG_STEP = c1f1b.combined_forward_backward_step
ORIG_INTERLEAVED = sched.combined_1f1b_schedule_for_interleaved_pipelining


def _plan_tag(b_output_tensor):
    t = b_output_tensor[0] if isinstance(b_output_tensor, list) else b_output_tensor
    return t.schedule_plan.tag


def recording_step(forward_step_func, data_iterator, f_model, num_microbatches, input_tensor, forward_data_store,
                   b_model, b_input_tensor, b_output_tensor, b_output_tensor_grad, config, **kw):
    b = _plan_tag(b_output_tensor) if b_model is not None else None
    start = len(LOG)
    log(t="step_begin")
    out = ORIG_STEP(forward_step_func, data_iterator, f_model, num_microbatches, input_tensor, forward_data_store,
                    b_model, b_input_tensor, b_output_tensor, b_output_tensor_grad, config, **kw)
    f = None
    if f_model is not None:
        built = [e for e in LOG[start:] if e["t"] == "build_plan"]
        assert len(built) == 1 and built[0]["chunk"] == f_model.vp_stage
        f = (built[0]["micro"], built[0]["chunk"])
        assert kw.get("current_microbatch") in (None, f[0]) or f_model.vp_stage is None, (kw, f)
    log(t="step_end")
    STEPS.append({"f": f, "b": b, "phase": STATE["phase"], "log": (start, len(LOG)),
                  "vid": STATE.pop("vid", None)})
    return out


def recording_interleaved(*a, f_virtual_microbatch_id=None, b_virtual_microbatch_id=None, **kw):
    STATE["vid"] = (f_virtual_microbatch_id, b_virtual_microbatch_id)
    return ORIG_INTERLEAVED(*a, f_virtual_microbatch_id=f_virtual_microbatch_id,
                            b_virtual_microbatch_id=b_virtual_microbatch_id, **kw)


c1f1b.combined_forward_backward_step = recording_step
sched.combined_1f1b_schedule_for_interleaved_pipelining = recording_interleaved


def reset_streams():
    pp_utils._COMM_STREAM = None
    _CURRENT[:] = [DEFAULT_STREAM]


# ----------------------------------------------------------------------------- one rank
def run_rank(P, V, M, G, rank, delay, overlap_p2p, layers=2):
    """Run Megatron's schedule for one pipeline rank; (steps, trace)."""
    LOG.clear()
    STEPS.clear()
    STATE.clear()
    STATE["phase"] = None
    reset_streams()
    PP.update(rank=rank, size=P, vp=V)
    config = make_config(P, V, G, delay, overlap_p2p)
    pg = ProcessGroupCollection()
    pg.tp = pg.cp = ProcessGroup(0, 1)
    if P == 1:
        model = Chunk(config, None, layers, True, True)
        sched.forward_backward_no_pipelining(
            forward_step_func=forward_step_func, data_iterator=iter(range(M)), model=[model], num_microbatches=M,
            seq_length=16, micro_batch_size=1, pg_collection=pg)
    else:
        chunks = [Chunk(config, c, layers, rank == 0 and c == 0, rank == P - 1 and c == V - 1) for c in range(V)]
        sched.forward_backward_pipelining_with_interleaving(
            forward_step_func=forward_step_func, data_iterator=[iter(range(M)) for _ in range(V)], model=chunks,
            num_microbatches=M, seq_length=16, micro_batch_size=1,
            p2p_communicator=P2PCommunicator(rank, P, V, config), pg_collection=pg)
    return list(STEPS), list(LOG)


def acceptance(P, V, M, G, delay, overlap_p2p):
    """Megatron's own checks, in the order training meets them; None or (kind, message)."""
    args = types.SimpleNamespace(virtual_pipeline_model_parallel_size=V, pipeline_model_parallel_size=P,
                                 overlap_p2p_comm=overlap_p2p, align_param_gather=False, rank=1)
    try:
        if V is not None and V == 1:  # arguments.py: "if ... == 1: ... = None"
            args.virtual_pipeline_model_parallel_size = None
        ARGS_CHECK(args)
        config = make_config(P, args.virtual_pipeline_model_parallel_size, G, delay, args.overlap_p2p_comm)
        MPC_CHECK(config)
        TC_CHECK(config)
    except AssertionError as e:
        return ("AssertionError", str(e)), None
    return None, config


def step_entry(s, trace):
    f, b = s["f"], s["b"]
    lo, hi = s["log"]
    n_wgrad = sum(1 for e in trace[lo:hi] if e["t"] == "wgrad_callable")
    if f and b:
        e = ["FB", f[0], f[1], b[0], b[1]]
    elif f:
        e = ["F", f[0], f[1]]
    else:
        e = ["B", b[0], b[1]]
    return e, n_wgrad


def order_case(P, V, M, G, delay, overlap_p2p):
    case = {"P": P, "V": V if V is not None else 1, "M": M,
            "microbatch_group_size_per_vp_stage": G, "delay_wgrad_compute": delay, "overlap_p2p_comm": overlap_p2p}
    refusal, config = acceptance(P, V, M, G, delay, overlap_p2p)
    if refusal:
        case["refused"] = {"by": "config/argument checks", "error": refusal[0], "message": refusal[1]}
        return case
    G = config.microbatch_group_size_per_vp_stage if P > 1 else None
    Vr = config.virtual_pipeline_model_parallel_size
    case["microbatch_group_size_per_vp_stage"] = G
    ranks = []
    for r in range(P):
        try:
            steps, trace = run_rank(P, Vr, M, G, r, delay, overlap_p2p)
        except (ValueError, RuntimeError) as e:
            case["refused"] = {"by": "forward_backward_pipelining_with_interleaving", "error": type(e).__name__,
                               "message": str(e)}
            return case
        entries, wgrad, phases, vids, calls = [], [], [], [], []
        wgrad_outside = sum(1 for e in trace if e["t"] == "wgrad_callable")
        step_at = {s["log"][0]: i for i, s in enumerate(steps)}
        inside = -1
        for i, e in enumerate(trace):
            if i in step_at:
                s = steps[step_at[i]]
                ent, nw = step_entry(s, trace)
                entries.append(ent)
                wgrad.append(nw)
                wgrad_outside -= nw
                phases.append(s["phase"])
                vids.append(list(s["vid"]) if s["vid"] else None)
                calls.append(" ".join(str(x) for x in ent))
                inside = s["log"][1]
            elif e["t"] == "p2p":
                calls.append("%s%s(%s)" % ("  " if i < inside else "", e["op"], ",".join(
                    k for k in ("send_next", "recv_prev", "send_prev", "recv_next") if e[k])))
        assert wgrad_outside == 0
        ranks.append({"rank": r, "steps": entries, "phase": phases, "virtual_microbatch_ids": vids,
                      "wgrad_calls_in_step": wgrad, "calls": calls})
    case["ranks"] = ranks
    return case


# ----------------------------------------------------------------------------- layer phases
def compact(trace, lo=0, hi=None):
    """The trace between two indices: per entry a short string."""
    out = []
    for e in trace[lo:hi]:
        t = e["t"]
        if t == "push":
            out.append("[%s] begin %s" % (e["stream"], e["name"]))
        elif t in ("wait", "record"):
            out.append("[%s] %s %s" % (e["stream"], t, e["event"]))
        elif t == "autograd":
            out.append("[%s] autograd.backward of %s" % (e["stream"], ",".join(map(str, e["of"]))))
        elif t == "wgrad_callable":
            out.append("[%s] wgrad callable: %s" % (e["stream"], e["what"]))
        elif t == "p2p":
            out.append("[%s] p2p %s(%s)" % (e["stream"], e["op"], ",".join(
                k for k in ("send_next", "recv_prev", "send_prev", "recv_next") if e[k])))
        elif t == "p2p_wait":
            out.append("[%s] wait p2p handle %s of call %d" % (e["stream"], e["handle"], e["of_call"]))
        elif t == "build_plan":
            out.append("forward_step_func builds plan m%d c%s" % (e["micro"], e["chunk"]))
        elif t == "set_current_microbatch":
            out.append("set_current_microbatch m%d" % e["micro"])
    return out


def per_stream(trace):
    """Per stream, the phases in issue order; layer-pair markers (nvtx ranges of
    TransformerModelChunkSchedulePlan.run) go to both streams. Then, for every phase preceded by
    an event wait, what that wait orders it after: the last phase (on whichever stream) after
    which the same event was recorded."""
    res = {"comp": [], "comm": []}
    deps = []
    last_record = {}
    last_phase = {"comp": "start of run()", "comm": "start of run()"}
    pending_wait = None
    for e in trace:
        t = e["t"]
        if t == "push" and e["name"].startswith("layer_"):
            for k in res:
                res[k].append("-- " + e["name"] + " --")
        elif t == "push":
            res[e["stream"]].append(e["name"])
            last_phase[e["stream"]] = e["name"]
            if pending_wait and pending_wait["stream"] == e["stream"]:
                ev = pending_wait["event"]
                deps.append({"phase": e["name"], "stream": e["stream"], "waits_event": ev,
                             "ordered_after": last_record.get(ev, ("nothing recorded yet", None))[0],
                             "ordered_after_stream": last_record.get(ev, (None, None))[1]})
            pending_wait = None
        elif t == "wgrad_callable":
            res[e["stream"]].append("  (wgrad callable: %s)" % e["what"])
        elif t == "record":
            last_record[e["event"]] = (last_phase[e["stream"]], e["stream"])
        elif t == "wait":
            pending_wait = e
    return res, deps


def direct_run(f_layers, b_layers, delay, early_release=False, f_pre=False, f_post=False, b_pre=False,
               b_post=False, dense=()):
    """TransformerModelChunkSchedulePlan.run on a forward plan of f_layers layers (micro 1) and a
    backward plan of b_layers layers (micro 0, its forward run first), both of one chunk."""
    reset_streams()
    PP.update(rank=0, size=1, vp=None)
    config = make_config(2, 2, 2, delay, True, early_release)
    pp_utils.set_streams()
    plans = {}
    for micro, n, pre, post in ((0, b_layers, b_pre, b_post), (1, f_layers, f_pre, f_post)):
        if n is None:
            continue
        model = Chunk(config, 0, n, pre, post, dense)
        if not pre:
            model.decoder.input_tensor = Tensor((), True, "received")
        plan, _ = forward_step_func(iter([micro]), model, return_schedule_plan=True)
        plans[micro] = plan
    b_grad = None
    if 0 in plans:  # the backward plan's own forward, alone (as the warm-up does)
        out = type(plans[0]).run(plans[0], None)
        b_grad = Tensor((), False, "output_grad")
    LOG.clear()
    out = type(plans.get(1, plans.get(0))).run(
        plans.get(1), plans.get(0), b_grad=b_grad,
        pre_forward=lambda vp: log(t="push", name="pre_forward hook (pp_pre_forward: wait recv_prev)", stream=current_stream().label),
        pre_backward=lambda vp: log(t="push", name="pre_backward hook (pp_pre_backward: wait recv_next)", stream=current_stream().label),
        post_forward=lambda x, vp: log(t="push", name="post_forward hook (pp_post_forward: send_forward_recv_forward)", stream=current_stream().label),
        post_backward=lambda g, vp: log(t="push", name="post_backward hook (pp_post_backward: send_backward_recv_backward)", stream=current_stream().label))
    streams, deps = per_stream(LOG)
    return {"per_stream": streams, "waits": deps, "trace": compact(LOG)}


def layer_phases():
    scenarios = []
    for delay in (False, True):
        for early in (False, True):
            scenarios.append({"name": "one MoE layer forward (micro 1) + one MoE layer backward (micro 0), middle stage",
                              "delay_wgrad_compute": delay, "ep_overlap_early_attn_memory_release": early,
                              **direct_run(1, 1, delay, early)})
    for delay in (False, True):
        for fl, bl in ((3, 2), (2, 3), (2, 0), (0, 2)):
            scenarios.append({"name": "forward chunk %d layers, backward chunk %d layers" % (fl, bl),
                              "f_layers": fl, "b_layers": bl, "delay_wgrad_compute": delay,
                              **direct_run(fl if fl else None, bl if bl else None, delay)})
        r = direct_run(2, 2, delay, f_pre=True, b_pre=True)
        scenarios.append({"name": "first stage (pre_process = embedding in both plans), 2+2 layers",
                          "delay_wgrad_compute": delay, **r})
        r = direct_run(2, 2, delay, f_post=True, b_post=True)
        scenarios.append({"name": "last stage (post_process = output layer in both plans), 2+2 layers; loss is outside run()",
                          "delay_wgrad_compute": delay, **r})
        r = direct_run(2, 2, delay, dense=(0,))
        scenarios.append({"name": "layer 0 dense (no dispatch/combine: NoopScheduleNode), layer 1 MoE, 2+2 layers",
                          "delay_wgrad_compute": delay, **r})
    # whole steps from the pipeline run, with p2p hooks and the loss node
    full = []
    for delay in (False, True):
        for rank in (0, 1):
            steps, trace = run_rank(2, 2, 4, 2, rank, delay, True, layers=1)
            picked = [s for s in steps if s["f"] and s["b"]][:1] + [s for s in steps if s["f"] and s["b"] and
                                                                     s["b"][1] == 1 and s["f"][1] == 1][:1]
            for s in [x for i, x in enumerate(picked) if x not in picked[:i]]:
                lo, hi = s["log"]
                full.append({"P": 2, "V": 2, "M": 4, "rank": rank, "layers_per_chunk": 1, "delay_wgrad_compute": delay,
                             "step": step_entry(s, trace)[0], "phase": s["phase"],
                             "per_stream": per_stream(trace[lo:hi])[0], "waits": per_stream(trace[lo:hi])[1],
                             "trace": compact(trace, lo, hi)})
    return {"source": "NVIDIA/Megatron-LM megatron/core/models/common/model_chunk_schedule_plan.py "
                      "(TransformerModelChunkSchedulePlan.run, TransformerLayerSchedulePlan.run), "
                      "megatron/core/models/common/utils.py (TransformerLayerNode), "
                      "megatron/core/pipeline_parallel/utils.py (ScheduleNode)",
            "commit": COMMIT, "scenarios": scenarios, "pipeline_steps": full}


# ----------------------------------------------------------------------------- main
def main():
    cases = []
    for P in (2, 3, 4):
        for V in (None, 2, 3):
            Ms = [P - 1, P, P + 1, 2 * P, 3 * P] if V else [P, 2 * P]
            for M in Ms:
                for delay in (False, True):
                    for ov in ((True, False) if V else (False,)):
                        cases.append(order_case(P, V, M, None, delay, ov))
            if V:
                for M, G in ((2 * P, 2 * P), (3 * P, 2 * P), (2 * P + 1, P + 1)):
                    cases.append(order_case(P, V, M, G, False, True))
    for M in (1, 2, 4):  # no pipelining: combined_1f1b_schedule_for_no_pipelining
        for delay in (False, True):
            cases.append(order_case(1, None, M, None, delay, False))
    order = {"source": "NVIDIA/Megatron-LM " + ", ".join(FILES), "acceptance_checks": ACCEPT_SOURCES,
             "legend": {
                 "steps": "one entry per combined_forward_backward_step call, in program order: "
                          "[F, micro, chunk] forward only; [B, micro, chunk] backward only; "
                          "[FB, f_micro, f_chunk, b_micro, b_chunk] forward and backward merged layer by layer",
                 "phase": "the nvtx suffix the schedule was in (warmup / steady / cooldown; null without pipelining)",
                 "virtual_microbatch_ids": "[f_virtual_microbatch_id, b_virtual_microbatch_id] Megatron passed",
                 "wgrad_calls_in_step": "delayed weight-gradient callables run inside the step (0 unless delay_wgrad_compute)",
                 "calls": "steps and P2P calls in program order; P2P issued inside a step (overlap_p2p_comm hooks) indented"},
             "commit": COMMIT, "cases": cases}
    with open(os.path.join(OUTDIR, "combined_1f1b_order.json"), "w") as fh:
        json.dump(order, fh, indent=None, separators=(",", ":"))
        fh.write("\n")
    with open(os.path.join(OUTDIR, "combined_1f1b_layer_phases.json"), "w") as fh:
        json.dump(layer_phases(), fh, indent=1)
        fh.write("\n")
    acc = [c for c in cases if "refused" not in c]
    print("%d cases, %d accepted, %d refused" % (len(cases), len(acc), len(cases) - len(acc)), file=sys.stderr)


if __name__ == "__main__":
    main()
