#!/usr/bin/env python3
"""Adds PyTorch's data-parallel steps to a ppsched schedule (JSON), where PyTorch's lowering puts
them (torch/distributed/pipelining/schedules.py):

- `_add_unshard_reshard`: FSDP_UNSHARD of a stage before the rank's first action of that stage;
  FSDP_RESHARD of every stage still gathered at the end of the rank's program (with at most
  two stages per rank, below its default of three active stages, nothing is evicted earlier);
- `_add_reduce_grad`: FSDP_REDUCE_GRAD of a stage right after the action that completes the
  stage's M-th gradient-producing leaf (a full backward or a weight backward, sub-actions of a
  composite counted).

    fsdp_steps.py IN.json OUT.json [--reduce-grad-only]

The executor's --dp tests run generated schedules through this (no generator emits FSDP steps).
"""
import json
import sys

GRAD_LEAVES = {"BWD", "BWD_WEIGHT"}


def leaves(step):
    return step.get("sub_steps") or [step]


def add_fsdp_steps(doc, unshard_reshard=True):
    m = doc["micro_batches"]
    for r, prog in enumerate(doc["programs"]):
        out, gathered, count = [], [], {}
        for step in prog:
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
            for leaf in leaves(step):
                if leaf["op"] in GRAD_LEAVES:
                    s = leaf["stage"]
                    count[s] = count.get(s, 0) + 1
                    if count[s] == m:
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
