#!/usr/bin/env python3
"""Runs PyTorch pipelining's own schedule classes and its own lowering and CSV writer.

    python3 run_comms.py PIPELINING_DIR OUT_DIR

PIPELINING_DIR holds PyTorch's torch/distributed/pipelining/schedules.py and _utils.py (a checkout's
directory, or the two files alone); they are loaded unmodified, as the package
torch.distributed.pipelining. Nothing else of PyTorch is imported: the modules schedules.py
imports from torch (torch, torch.distributed, torch.nn, torch.fx, torch._dynamo, torch.profiler,
torch.distributed.fsdp) and from its own package (microbatch, stage) are stand-ins whose every
name is an empty class. The lowering never touches them: they appear in annotations, in
isinstance checks against `stage.submod` (None here) and in the runtime's step code, which is
not run.

For each of the five _PipelineScheduleRuntime classes (by get_schedule_class's name) and P in
2..4 it builds the schedule as rank 0 of P would: two stand-in stages (V = 2; num_stages 2P,
group_size P, group_rank 0, submod None), n_microbatches 2P, no loss_fn. The constructor builds
the compute order and runs _prepare_schedule_with_comms (_add_unshard_reshard, _add_reduce_grad,
_add_send_recv); _dump_csv then writes OUT_DIR/<name>_pp<P>_m<2P>.csv with format
"compute_comms". It prints the git blob id of each source file it ran.
"""
import hashlib
import importlib.util
import os
import sys
import types

PACKAGE = "torch.distributed.pipelining"
CLASSES = ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")


class StandInModule(types.ModuleType):
    """A module whose every attribute is a fresh empty class (torch's names, unused by the lowering)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (), {})
        setattr(self, name, value)
        return value


def install_stand_ins(pipelining_dir):
    package = types.ModuleType(PACKAGE)
    package.__path__ = [pipelining_dir]  # schedules.py and _utils.py load from here, as written
    sys.modules[PACKAGE] = package
    for name in ("torch", "torch.distributed", "torch.distributed.fsdp", "torch.nn", "torch.nn.modules",
                 "torch.nn.modules.loss", "torch.fx", "torch._dynamo", "torch.profiler",
                 PACKAGE + ".microbatch", PACKAGE + ".stage"):
        sys.modules[name] = StandInModule(name)
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, sys.modules[name])
    sys.modules["torch.distributed"].pipelining = package


def git_blob_id(path):
    data = open(path, "rb").read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    pipelining_dir, out_dir = os.path.abspath(sys.argv[1]), sys.argv[2]
    install_stand_ins(pipelining_dir)
    import importlib
    schedules = importlib.import_module(PACKAGE + ".schedules")
    for name in ("schedules.py", "_utils.py"):
        print(f"{name}: git blob {git_blob_id(os.path.join(pipelining_dir, name))}")
    os.makedirs(out_dir, exist_ok=True)
    for class_name in CLASSES:
        schedule_class = schedules.get_schedule_class(class_name)
        for pp in (2, 3, 4):
            micro = 2 * pp
            rank0_stages = (0, pp) if class_name in ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble") \
                else (0, 2 * pp - 1)
            stages = [types.SimpleNamespace(stage_index=s, num_stages=2 * pp, group_size=pp, group_rank=0,
                                            submod=None, is_first=s == 0, is_last=s == 2 * pp - 1)
                      for s in rank0_stages]
            schedule = schedule_class(stages, n_microbatches=micro)
            path = os.path.join(out_dir, f"{class_name}_pp{pp}_m{micro}.csv")
            schedule._dump_csv(path, format="compute_comms")
            print(f"{schedule_class.__name__} pp {pp} micro {micro}: {path}")


if __name__ == "__main__":
    main()
