# Checks ppsched's mg_*.sh launch files with Megatron-LM's own code (core_v0.15.3):
# megatron/training/arguments.py (add_megatron_arguments, parse, validate_args),
# megatron/core/transformer/pipeline_parallel_layer_layout.py (parse + validate_layer_layout),
# megatron/core/num_microbatches_calculator.py (ConstantNumMicroBatchesCalculator).
# Same stub approach as mg_run_argparse.py. Usage: check_plan_exports_mg.py MG_TREE PLAN_DIR OUT.json
import sys, os, re, glob, types, json, subprocess, importlib.util, importlib.abc, importlib.machinery, argparse, io, contextlib, traceback
MG, PLAN, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
REAL = {"megatron.core.transformer.enums": "megatron/core/transformer/enums.py",
        "megatron.core.transformer.pipeline_parallel_layer_layout": "megatron/core/transformer/pipeline_parallel_layer_layout.py",
        "megatron.training.arguments": "megatron/training/arguments.py"}
class Stub(types.ModuleType):
    def __init__(self, name="stub"): super().__init__(name); self.__path__ = []
    def __getattr__(self, k):
        if k.startswith("__") and k.endswith("__"): raise AttributeError(k)
        v = Stub(f"{self.__name__}.{k}"); setattr(self, k, v); return v
    def __call__(self, *a, **k): return Stub(self.__name__ + "()")
    def __iter__(self): return iter(())
    def __mro_entries__(self, bases): return (object,)
class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    PREFIXES = ("torch", "packaging", "megatron", "numpy", "transformer_engine", "nvidia_resiliency_ext")
    def find_spec(self, name, path, target=None):
        if name in REAL: return importlib.util.spec_from_file_location(name, os.path.join(MG, REAL[name]))
        if name.split(".")[0] in self.PREFIXES: return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None
    def create_module(self, spec): return Stub(spec.name)
    def exec_module(self, m): pass
sys.meta_path.insert(0, Finder())
import megatron.core.utils as cu
cu.log_single_rank = lambda *a, **k: None
cu.is_torch_min_version = lambda v: True; cu.is_te_min_version = lambda v, **k: True
cu.get_torch_version = lambda: "2.9.0"
import megatron.core.parallel_state as ps
ps.get_pipeline_model_parallel_rank = lambda: 0
ps.get_virtual_pipeline_model_parallel_world_size = lambda: None
import megatron.training.utils as tu
tu.print_rank_0 = lambda *a, **k: None; tu.warn_rank_0 = lambda *a, **k: None
tu.update_use_dist_ckpt = lambda args: setattr(args, "use_dist_ckpt", args.ckpt_format != "torch")
tu.get_device_arch_version = lambda: 9  # Hopper
import torch as _t
_t.dtype = type("dtype", (), {})
for _n in ["float32", "bfloat16", "float16", "uint8"]: setattr(_t, _n, _n)
A = importlib.import_module("megatron.training.arguments")
PPL = sys.modules["megatron.core.transformer.pipeline_parallel_layer_layout"]
ENUMS = sys.modules["megatron.core.transformer.enums"]
spec = importlib.util.spec_from_file_location("nmc", os.path.join(MG, "megatron/core/num_microbatches_calculator.py"))
NMC = importlib.util.module_from_spec(spec); spec.loader.exec_module(NMC)

WORLD = {"llama8b": 32, "llama70b": 256, "dsv3": 2048}
MODEL = {  # model-size flags added by the checker (not in the plan files)
 "llama8b": ["--hidden-size", "4096", "--ffn-hidden-size", "14336", "--num-attention-heads", "32",
             "--group-query-attention", "--num-query-groups", "8", "--max-position-embeddings", "8192", "--position-embedding-type", "rope"],
 "llama70b": ["--hidden-size", "8192", "--ffn-hidden-size", "28672", "--num-attention-heads", "64",
              "--group-query-attention", "--num-query-groups", "8", "--max-position-embeddings", "8192", "--position-embedding-type", "rope"],
 "dsv3": ["--hidden-size", "7168", "--ffn-hidden-size", "18432", "--num-attention-heads", "128",
          "--multi-latent-attention", "--q-lora-rank", "1536", "--kv-lora-rank", "512", "--qk-head-dim", "128",
          "--qk-pos-emb-head-dim", "64", "--v-head-dim", "128", "--num-experts", "256", "--moe-router-topk", "8",
          "--moe-ffn-hidden-size", "2048", "--max-position-embeddings", "4096", "--position-embedding-type", "rope"],
}
def source_array(path):
    out = subprocess.run(["bash", "-c", 'source "$1" >/dev/null; printf "%s\\0" "${MEGATRON_PLAN_ARGS[@]}"; printf "ENV=%s" "${CUDA_DEVICE_MAX_CONNECTIONS-<unset>}"', "x", path],
                         capture_output=True, text=True, check=True).stdout
    *arr, env = out.split("\0")
    return arr, env[4:]

files = {}
for path in sorted(glob.glob(os.path.join(PLAN, "mg_*.sh"))):
    name = os.path.basename(path); key = name[3:].split("_")[0].split(".")[0]
    argv, cdmc = source_array(path)
    head = open(path).read()
    m = re.search(r"=\s*(\d+)\s+micro-batches", head)
    r = {"world_size": WORLD[key], "model_flags_added": MODEL[key], "plan_args": argv,
         "CUDA_DEVICE_MAX_CONNECTIONS": cdmc, "header_M": int(m.group(1)) if m else None}
    if cdmc == "<unset>": os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    else: os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = cdmc
    p = A.add_megatron_arguments(argparse.ArgumentParser(description='Megatron-LM Arguments', allow_abbrev=False))
    try:
        with contextlib.redirect_stderr(io.StringIO()) as err:
            ns = p.parse_args(argv + MODEL[key])
        r["argparse"] = "ok"
    except SystemExit:
        r["argparse"] = err.getvalue().strip().splitlines()[-1]; files[name] = r; continue
    ns.rank = 0; ns.world_size = WORLD[key]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            A.validate_args(ns, {})
        r["validate_args"] = "ok"
    except BaseException as e:
        tb = traceback.extract_tb(e.__traceback__)[-1]
        r["validate_args"] = f"{type(e).__name__}: {e}"; r["validate_args_where"] = f"{os.path.basename(tb.filename)}:{tb.lineno}"
    r["after_validate"] = {k: getattr(ns, k, None) for k in ["tensor_model_parallel_size", "pipeline_model_parallel_size",
        "data_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size", "virtual_pipeline_model_parallel_size",
        "microbatch_group_size_per_vp_stage", "micro_batch_size", "global_batch_size", "sequence_parallel",
        "recompute_granularity", "recompute_method", "recompute_num_layers", "num_layers", "mtp_num_layers", "seq_length"]}
    lay_s = ns.pipeline_model_parallel_layout
    if lay_s is not None:
        if not isinstance(lay_s, str): lay_s = getattr(lay_s, "input_data", lay_s)
        try:
            lay = PPL.PipelineParallelLayerLayout(lay_s if isinstance(lay_s, str) else str(lay_s), ns.pipeline_model_parallel_size)
            r["layout_vpp"] = lay.virtual_pipeline_model_parallel_size
            # stages in global order: stage k = pp rank k % pp, vpp k // pp
            pp = ns.pipeline_model_parallel_size
            stages = []
            for k in range(pp * lay.virtual_pipeline_model_parallel_size):
                stages.append([t.name for t in lay.layout[k % pp][k // pp]])
            r["layout_stages"] = stages
            r["layout_decoder_counts"] = [s.count("decoder") for s in stages]
            try:
                lay.validate_layer_layout(ns.num_layers, ns.mtp_num_layers); r["validate_layer_layout"] = "ok"
            except BaseException as e:
                r["validate_layer_layout"] = f"{type(e).__name__}: {e}"
        except BaseException as e:
            r["layout_error"] = f"{type(e).__name__}: {e}"
    dp = getattr(ns, "data_parallel_size", None) or WORLD[key] // (ns.tensor_model_parallel_size * ns.pipeline_model_parallel_size * ns.context_parallel_size)
    try:
        r["num_microbatches"] = NMC.ConstantNumMicroBatchesCalculator(ns.global_batch_size, ns.micro_batch_size, dp, False, 1).get()
    except BaseException as e:
        r["num_microbatches"] = f"{type(e).__name__}: {e}"
    r["num_microbatches_matches_header"] = r["num_microbatches"] == r["header_M"]
    # runtime condition quoted from megatron/core/pipeline_parallel/schedules.py:
    # forward_backward_pipelining_with_interleaving (checked here, not executed): group size G must lie in
    # [PP, M], and M % G must be 0 or >= PP.
    G = getattr(ns, "microbatch_group_size_per_vp_stage", None); M = r["num_microbatches"]
    if getattr(ns, "virtual_pipeline_model_parallel_size", None) and isinstance(M, int) and G:
        pp = ns.pipeline_model_parallel_size
        r["interleaved_runtime_group_check"] = "ok" if (pp <= G <= M and (M % G == 0 or M % G >= pp)) else f"fails: G={G} pp={pp} M={M}"
    files[name] = r
    print(name, r["argparse"], "|", str(r.get("validate_args"))[:200], "|", r.get("validate_layer_layout"), r.get("num_microbatches"), r["header_M"])
json.dump(files, open(OUT, "w"), indent=1, default=repr)
