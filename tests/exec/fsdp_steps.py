#!/usr/bin/env python3
"""Adds PyTorch's data-parallel steps to a ppsched schedule (JSON), where PyTorch's lowering puts
them (torch/distributed/pipelining/schedules.py):

- `_add_unshard_reshard`: FSDP_UNSHARD of a stage before the rank's first action of that stage;
  FSDP_RESHARD of every stage still gathered at the end of the rank's program (with at most
  two stages per rank, below its default of three active stages, nothing is evicted earlier);
- `_add_reduce_grad`: FSDP_REDUCE_GRAD of a stage right after the action that completes the
  stage's M-th gradient-producing leaf (a full backward or a weight backward, sub-actions of a
  composite counted), i.e. after its last one. MPipe (not PyTorch's): a trainable tower's
  backward on rank 0 (MPIPE_TRANSPOSE_BWD) adds to stage 0's gradients, so stage 0's
  REDUCE_GRAD follows the later of its last backward and the tower's.

    fsdp_steps.py IN.json OUT.json [--reduce-grad-only]

The executor's --dp tests run generated schedules through this (no generator emits FSDP steps).
"""
import json
import sys

GRAD_LEAVES = {"BWD", "BWD_WEIGHT"}


def leaves(step):
    return step.get("sub_steps") or [step]


def grad_stage(leaf):
    """The stage whose gradients the leaf adds to, or None."""
    if leaf["op"] in GRAD_LEAVES:
        return leaf["stage"]
    if leaf["op"] == "MPIPE_TRANSPOSE_BWD":
        return 0
    return None


def add_fsdp_steps(doc, unshard_reshard=True):
    for r, prog in enumerate(doc["programs"]):
        last = {}  # stage -> index in prog of the action with its last gradient-producing leaf
        for i, step in enumerate(prog):
            for leaf in leaves(step) if step else []:
                if grad_stage(leaf) is not None:
                    last[grad_stage(leaf)] = i
        out, gathered = [], []
        for i, step in enumerate(prog):
            if step is None:
                out.append(None)
                continue
            if unshard_reshard:
                for leaf in leaves(step):
                    s = leaf.get("stage")
                    if s is not None and s >= 0 and s not in gathered and leaf["op"] in (
                            "FWD", "BWD", "BWD_INPUT", "BWD_WEIGHT"):
                        gathered.append(s)
                        out.append({"op": "FSDP_UNSHARD", "stage": s})
            out.append(step)
            for s in sorted(st for st, at in last.items() if at == i):
                out.append({"op": "FSDP_REDUCE_GRAD", "stage": s})
        for s in gathered:
            out.append({"op": "FSDP_RESHARD", "stage": s})
        doc["programs"][r] = out
    doc["name"] = doc.get("name", "schedule") + "+fsdp"
    return doc


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(args[0]) as f:
        doc = json.load(f)
    add_fsdp_steps(doc, unshard_reshard="--reduce-grad-only" not in sys.argv)
    with open(args[1], "w") as f:
        json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
