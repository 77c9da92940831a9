# Checks ppsched's tt_*.toml files with torchtitan v0.2.2's own code:
#  - torchtitan/config (ConfigManager._maybe_load_toml + _dict_to_dataclass into JobConfig), real files;
#  - torchtitan/distributed/pipeline_parallel.py (pipeline_llm -> pipeline_module_split -> build_pipeline_schedule),
#    real file, run once per pp rank with fake torch / fake PipelineStage / fake schedule classes.
# The fake schedule classes reproduce, in this checker's own code, the constructor checks and the
# _load_csv(filename, format="compute_only") rules of torch/distributed/pipelining/schedules.py
# (pytorch/pytorch file version 00722e648b74, read, not run: torch is not installable here).
# Usage: check_plan_exports_tt.py TT_TREE PLAN_DIR OUT.json
import sys, os, re, glob, csv, json, types, dataclasses, importlib.util, logging, traceback, copy
TT, PLAN, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
def mod(name, pkg=False, **attrs):
    m = types.ModuleType(name)
    if pkg: m.__path__ = []
    m.__dict__.update(attrs); sys.modules[name] = m; return m
class _Any:
    def __init__(self, *a, **k): pass
    def __call__(self, *a, **k): return _Any()
    def __getattr__(self, k): return _Any()
torch = mod("torch", True, float16="float16", float32="float32", bfloat16="bfloat16", device=lambda *a: "cpu",
            Tensor=object)
torch.distributed = mod("torch.distributed", True, is_initialized=lambda: False)
# --- fake nn (enough for pipeline_module_split) ---
class Module:
    def named_children(self): return list(self._children.items())
class ModuleList(Module, list): pass
class ModuleDict(Module, dict): pass
nn = mod("torch.nn", True, Module=Module, ModuleList=ModuleList, ModuleDict=ModuleDict); torch.nn = nn
mod("torch.distributed.device_mesh", DeviceMesh=object)
# --- fake PipelineStage ---
class PipelineStage:
    def __init__(self, submod, stage_index, num_stages, device, group=None):
        self.submod, self.stage_index, self.num_stages = submod, stage_index, num_stages
        self.group_size, self.group_rank = group.size, group.rank
        self.is_first, self.is_last = stage_index == 0, stage_index == num_stages - 1
        BUILT.append(stage_index)
BUILT = []
mod("torch.distributed.pipelining", True, PipelineStage=PipelineStage)
# --- fake schedule classes: hierarchy and constructor checks as in torch schedules.py ---
ACTION = re.compile(r"(\d+)(F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)")
COMPUTE = {"F", "I", "W", "B"}  # _Action.is_compute_op (plus OVERLAP_F_B, which the regex path never yields)
class _PipelineSchedule:
    def __init__(self, n_microbatches, loss_fn=None, scale_grads=True, **k):
        self._n_microbatches = n_microbatches
class PipelineScheduleSingle(_PipelineSchedule):
    def __init__(self, stage, n_microbatches, **k):
        super().__init__(n_microbatches, **k); self._stage = stage; self._num_stages = stage.num_stages; self.kind = "single"
class PipelineScheduleMulti(_PipelineSchedule):
    def __init__(self, stages, n_microbatches, **k):
        super().__init__(n_microbatches, **k); self._stages = stages; self._num_stages = stages[0].num_stages
        self.pp_group_size = stages[0].group_size; self.pipeline_order = {}; self.kind = "multi"
    def _parse(self, filename):
        order = {}
        with open(filename, newline="") as f:
            for rank, row in enumerate(csv.reader(f)):
                acts = []
                for s in row:
                    s = s.strip()
                    if s == "": acts.append(None); continue
                    m = ACTION.match(s)
                    if not m: raise RuntimeError(f"Invalid action string: {s}, should be formatted as [stage][action type][(microbatch)] e.g. 2F0")
                    acts.append((int(m.group(1)), m.group(2), int(m.group(3)) if m.group(3) else None))
                order[rank] = acts
        return order
    def _validate(self, order):  # rules of schedules.py:_validate_schedule
        if len(order) != self.pp_group_size:
            raise AssertionError(f"Schedule has incorrect number of ranks - expected {self.pp_group_size}, actual {len(order)}")
        seen = {s: {"F": set(), "B": set(), "I": set(), "W": set()} for s in range(self._num_stages)}
        s2r = {}
        for rank, acts in order.items():
            for step, a in enumerate(acts):
                if a is None: continue
                s, t, mb = a
                if t == "F": seen[s]["F"].add(mb)
                elif t in ("B", "I"):
                    if mb not in seen[s]["F"]: raise AssertionError(f"Rank {rank}, step {step}: Running {t} for stage {s}, microbatch {mb} without first running Forward")
                    seen[s][t].add(mb)
                elif t == "W":
                    if mb not in seen[s]["I"]: raise AssertionError(f"Rank {rank}, step {step}: Running Backward Weight for stage {s}, microbatch {mb} without first running Backward Input")
                    seen[s]["W"].add(mb)
                if s not in s2r: s2r[s] = rank
                elif s2r[s] != rank: raise AssertionError(f"Rank {rank}, step {step}: Stage {s} is assigned to both rank {rank} and rank {s2r[s]}")
        for s, d in seen.items():
            f, b, i, w = (len(d[x]) for x in "FBIW")
            if f != self._n_microbatches: raise AssertionError(f"Got {f} F microbatches for stage {s}, expected {self._n_microbatches}")
            if i != w: raise AssertionError(f"Invalid backward microbatches for stage {s}: I and W must have equal counts, but got I={i}, W={w}")
            if b + (i + w) // 2 != self._n_microbatches: raise AssertionError(f"Invalid backward microbatches for stage {s}: expected {self._n_microbatches} total backwards, but got B={b}, I={i}, W={w}")
        return s2r
    def _load_csv(self, filename, format="compute_only"):
        self.pipeline_order = self._parse(filename); self.csv_stage_to_rank = self._validate(self.pipeline_order)
class _PipelineScheduleRuntime(PipelineScheduleMulti):
    def _load_csv(self, filename, format="compute_only"):
        self.csv_format_used = format
        if format == "compute_only":
            super()._load_csv(filename)
            for rank, acts in self.pipeline_order.items():
                for i, a in enumerate(acts):
                    if a is not None and a[1] not in COMPUTE:
                        raise ValueError(f"Expected compute-only schedule but found communication action '{a[0]}{a[1]}{'' if a[2] is None else a[2]}' at rank {rank}, position {i}. Communication actions (e.g. SEND_F, RECV_F, etc.) should not be present when format='compute_only'.")
        elif format == "compute_comms":
            order = self._parse(filename); self.csv_stage_to_rank = self._validate(order)
            for rank, acts in order.items():
                if any(a is None for a in acts): raise AssertionError("Expected action to be not None")
        else: raise NotImplementedError(f"{format=} is not implemented")
class Schedule1F1B(PipelineScheduleSingle):
    def __init__(self, stage, n_microbatches, **k):
        super().__init__(stage, n_microbatches, **k)
        if n_microbatches < self._num_stages: raise ValueError(f"Number of microbatches ({n_microbatches}) must be greater than or equal to the number of stages ({self._num_stages}).")
class ScheduleGPipe(PipelineScheduleSingle): pass
class ScheduleInterleaved1F1B(_PipelineScheduleRuntime): pass
class ScheduleLoopedBFS(_PipelineScheduleRuntime): pass
class ScheduleInterleavedZeroBubble(_PipelineScheduleRuntime): pass
class ScheduleZBVZeroBubble(_PipelineScheduleRuntime):
    def __init__(self, stages, n_microbatches, **k):
        super().__init__(stages, n_microbatches, **k)
        if len(stages) != 2: raise ValueError(f"ZBV requires exactly 2 stages per rank, but got {len(stages)}.")
class ScheduleDualPipeV(_PipelineScheduleRuntime):
    def __init__(self, stages, n_microbatches, **k):
        super().__init__(stages, n_microbatches, **k)
        if len(stages) != 2: raise ValueError(f"ZBV requires exactly 2 stages per rank, but got {len(stages)}.")
        if n_microbatches < self._num_stages: raise ValueError(f"DualPipeV requires at least as many microbatches as stages, but got {n_microbatches} microbatches and {self._num_stages} stages.")
    def register_custom_function(self, *a): self.custom = True
MAP = {"1F1B": Schedule1F1B, "Interleaved1F1B": ScheduleInterleaved1F1B, "GPipe": ScheduleGPipe, "LoopedBFS": ScheduleLoopedBFS,
       "InterleavedZeroBubble": ScheduleInterleavedZeroBubble, "PipelineScheduleSingle": PipelineScheduleSingle,
       "PipelineScheduleMulti": PipelineScheduleMulti, "ZBVZeroBubble": ScheduleZBVZeroBubble, "DualPipeV": ScheduleDualPipeV}
def get_schedule_class(name):
    low = {k.lower(): k for k in MAP}
    if name.lower() not in low: raise ValueError(f"Unknown schedule name '{name}'. The valid options are {list(MAP)}")
    return MAP[low[name.lower()]]
mod("torch.distributed.pipelining.schedules", _PipelineSchedule=_PipelineSchedule, _PipelineScheduleRuntime=_PipelineScheduleRuntime,
    get_schedule_class=get_schedule_class, OVERLAP_F_B="OVERLAP_F_B", PipelineScheduleMulti=PipelineScheduleMulti,
    PipelineScheduleSingle=PipelineScheduleSingle, ScheduleDualPipeV=ScheduleDualPipeV, ScheduleZBVZeroBubble=ScheduleZBVZeroBubble)
# --- torchtitan package shells + fake tyro/logging; real config package ---
for n in ["torchtitan", "torchtitan.tools", "torchtitan.components", "torchtitan.protocols"]: mod(n, True)
mod("torchtitan.tools.logging", logger=logging.getLogger("tt"))
tyro = mod("tyro")
class _Reg:
    def primitive_rule(self, f): return f
tyro.constructors = types.SimpleNamespace(ConstructorRegistry=_Reg, PrimitiveTypeInfo=object, PrimitiveConstructorSpec=dict)
def load(name, rel, pkgdir=None):
    spec = importlib.util.spec_from_file_location(name, os.path.join(TT, rel), submodule_search_locations=pkgdir)
    m = importlib.util.module_from_spec(spec); sys.modules[name] = m; spec.loader.exec_module(m); return m
cfg = load("torchtitan.config", "torchtitan/config/__init__.py", [os.path.join(TT, "torchtitan/config")])
jc = sys.modules["torchtitan.config.job_config"]; mgr = sys.modules["torchtitan.config.manager"]
mod("torchtitan.components.loss", LossFunction=object)
mod("torchtitan.distributed", True, ParallelDims=object)
mod("torchtitan.distributed.dual_pipe_v", overlap_callback=lambda *a: None)
mod("torchtitan.protocols.train_spec", BaseModelArgs=object, ParallelizeFunction=object)
PPm = load("torchtitan.distributed.pipeline_parallel", "torchtitan/distributed/pipeline_parallel.py")

WORLD_FROM_HEADER = re.compile(r"TP (\d+) PP (\d+) DP (\d+)")
def fake_model(n_layers):
    m = Module(); layers = ModuleList(object() for _ in range(n_layers))
    m._children = {"tok_embeddings": object(), "layers": layers, "norm": object(), "output": object()}
    def deep(memo=None):
        c = Module(); c._children = dict(m._children); c._children["layers"] = ModuleList(layers); return c
    m.__deepcopy__ = lambda memo: deep()
    # setattr used by pipeline_module_split must land in _children
    return m
Module.__setattr__ = lambda self, k, v: (self.__dict__.setdefault("_children", {}).__setitem__(k, v) if k in self.__dict__.get("_children", {}) else object.__setattr__(self, k, v))

files, fields_of = {}, lambda o, names: {n: getattr(o, n) for n in names}
for path in sorted(glob.glob(os.path.join(PLAN, "tt_*.toml"))):
    name = os.path.basename(path); r = {}
    cm = mgr.ConfigManager()
    try:
        toml = cm._maybe_load_toml(["--job.config_file", path])
        J = cm._dict_to_dataclass(jc.JobConfig, toml)
        r["accepted"] = True; r["error"] = None
    except BaseException as e:
        r["accepted"] = False; r["error"] = f"{type(e).__name__}: {e}"; files[name] = r; continue
    P = J.parallelism
    r["fields"] = {"parallelism": fields_of(P, ["data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
        "context_parallel_degree", "expert_parallel_degree", "expert_tensor_parallel_degree", "pipeline_parallel_degree",
        "pipeline_parallel_schedule", "pipeline_parallel_schedule_csv", "pipeline_parallel_microbatch_size",
        "pipeline_parallel_layers_per_stage", "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers",
        "pipeline_parallel_expert_parallel_overlap"]),
        "module_fqns_per_model_part_len": None if P.module_fqns_per_model_part is None else len(P.module_fqns_per_model_part),
        "training": fields_of(J.training, ["local_batch_size", "global_batch_size", "seq_len"]),
        "activation_checkpoint.mode": J.activation_checkpoint.mode}
    hdr = open(path).read().splitlines()[0]
    tp_, pp_, dp_ = map(int, WORLD_FROM_HEADER.search(hdr).groups())
    world = tp_ * pp_ * dp_
    dp_shard = P.data_parallel_shard_degree if P.data_parallel_shard_degree != -1 else world // (P.data_parallel_replicate_degree * P.context_parallel_degree * P.tensor_parallel_degree * P.pipeline_parallel_degree)
    batch_degree = P.data_parallel_replicate_degree * dp_shard
    checks = {"world_size_from_header": world,
              "parallel_dims_product_ok (parallel_dims.py:ParallelDims._validate)": P.data_parallel_replicate_degree * dp_shard * P.context_parallel_degree * P.tensor_parallel_degree * P.pipeline_parallel_degree == world,
              "ep_etp_ok (ETP must be TP or 1)": P.expert_parallel_degree == 1 or P.expert_tensor_parallel_degree in (1, P.tensor_parallel_degree)}
    gbs = J.training.global_batch_size if J.training.global_batch_size > 0 else J.training.local_batch_size * batch_degree
    checks["train.py gbs % (local*dp) == 0"] = gbs % (J.training.local_batch_size * batch_degree) == 0
    checks["gradient_accumulation_steps (train.py)"] = gbs // (J.training.local_batch_size * batch_degree)
    r["checks"] = checks
    fq = P.module_fqns_per_model_part
    n_layers = 1 + max(int(x.split(".")[1]) for part in fq for x in part if x.startswith("layers.")) if fq else 32
    per_rank = {}
    for rank in range(P.pipeline_parallel_degree):
        mesh = types.SimpleNamespace(get_local_rank=lambda rank=rank: rank, size=lambda: P.pipeline_parallel_degree,
                                     get_group=lambda n, rank=rank: types.SimpleNamespace(size=P.pipeline_parallel_degree, rank=rank))
        pdims = types.SimpleNamespace(pp=P.pipeline_parallel_degree, get_mesh=lambda n, mesh=mesh: mesh)
        BUILT.clear()
        try:
            sched, parts, first, last = PPm.pipeline_llm(fake_model(n_layers), pdims, J, "cpu", types.SimpleNamespace(n_layers=n_layers),
                                                         lambda m, pd, jc_: m, None)
            stages = sched._stages if hasattr(sched, "_stages") else [sched._stage]
            per_rank[rank] = {"schedule_class": type(sched).__name__, "n_microbatches": sched._n_microbatches,
                              "stage_indices_built": [s.stage_index for s in (parts and [st for st in stages])],
                              "num_stages": stages[0].num_stages, "has_first_stage": first, "has_last_stage": last,
                              "csv_loaded": getattr(sched, "csv_format_used", None), "result": "ok"}
        except BaseException as e:
            tb = traceback.extract_tb(e.__traceback__)
            where = [f"{os.path.basename(t.filename)}:{t.name}:{t.lineno}" for t in tb if "pipeline_parallel" in t.filename]
            per_rank[rank] = {"result": f"{type(e).__name__}: {e}", "where": where[-1] if where else None,
                              "stage_indices_built_before_error": list(BUILT)}
    r["pipeline_llm_per_pp_rank"] = per_rank
    # what the CSV would be under the other format (not reachable from torchtitan config)
    if P.pipeline_parallel_schedule_csv:
        csvp = P.pipeline_parallel_schedule_csv
        if not os.path.isfile(csvp): csvp = os.path.join(PLAN, os.path.basename(csvp))
        stages = [PipelineStage(None, i, len(fq), None, types.SimpleNamespace(size=P.pipeline_parallel_degree, rank=0)) for i in range(2)]
        s = _PipelineScheduleRuntime(stages, J.training.local_batch_size // P.pipeline_parallel_microbatch_size)
        try: s._load_csv(csvp, format="compute_comms"); r["csv_if_compute_comms_format"] = {"result": "ok", "stage_to_rank": s.csv_stage_to_rank}
        except BaseException as e: r["csv_if_compute_comms_format"] = {"result": f"{type(e).__name__}: {e}"}
        r["csv_path_in_toml_exists"] = os.path.isfile(P.pipeline_parallel_schedule_csv)
        # the same CSV with every non-compute action removed (compute_only), through the same path
        import tempfile
        rows = [[a for a in row if ACTION.match(a.strip()) and ACTION.match(a.strip()).group(2) in COMPUTE] for row in csv.reader(open(csvp, newline=""))]
        tmp = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False, newline=""); csv.writer(tmp).writerows(rows); tmp.close()
        J2 = copy.deepcopy(J); J2.parallelism.pipeline_parallel_schedule_csv = tmp.name
        res2 = {}
        for rank in range(P.pipeline_parallel_degree):
            mesh = types.SimpleNamespace(get_local_rank=lambda rank=rank: rank, size=lambda: P.pipeline_parallel_degree,
                                         get_group=lambda n, rank=rank: types.SimpleNamespace(size=P.pipeline_parallel_degree, rank=rank))
            pdims = types.SimpleNamespace(pp=P.pipeline_parallel_degree, get_mesh=lambda n, mesh=mesh: mesh)
            BUILT.clear()
            try:
                sched, *_ = PPm.pipeline_llm(fake_model(n_layers), pdims, J2, "cpu", types.SimpleNamespace(n_layers=n_layers), lambda m, pd, jc_: m, None)
                ok = all(sched.csv_stage_to_rank[i] == rank for i in BUILT)
                res2[rank] = {"result": "ok" if ok else f"CSV places stages {[(i, sched.csv_stage_to_rank[i]) for i in BUILT]} but rank {rank} built {BUILT}",
                              "schedule_class": type(sched).__name__, "stage_indices_built": list(BUILT), "n_microbatches": sched._n_microbatches}
            except BaseException as e:
                res2[rank] = {"result": f"{type(e).__name__}: {e}", "stage_indices_built_before_error": list(BUILT)}
        os.unlink(tmp.name)
        r["csv_with_comm_actions_stripped"] = res2
    files[name] = r
    print(name, r["accepted"], checks, {k: v["result"][:170] for k, v in per_rank.items()})
json.dump(files, open(OUT, "w"), indent=1, default=repr)
