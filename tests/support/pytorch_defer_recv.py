#!/usr/bin/env python3
"""The deferred-receive lowerings of pytorch/pytorch#172668, made from a schedule in PyTorch's
lowering (a compute_comms CSV: receives posted early, as `_add_send_recv` places them):

  deferred    every RECV moved to just before the compute that consumes it (RECV_F: the F of
              its stage and micro; RECV_B: the B or I), as the issue's patch did;
  swap_odd    the same, then on odd ranks each SEND directly followed by a RECV swapped (the
              issue's "swapping the order of RECV and SEND on odd ranks").

    pytorch_defer_recv.py COMMS_CSV {deferred|swap_odd}   (writes the CSV to stdout)
"""
import re
import sys

ACTION = re.compile(r"(\d+)(SEND_F|SEND_B|RECV_F|RECV_B)(\d+)$")


def consumers(action):
    """The computes that consume a RECV's data, or None for any other action."""
    m = ACTION.match(action)
    if not m or not m.group(2).startswith("RECV"):
        return None
    stage, kind, micro = m.groups()
    return [stage + "F" + micro] if kind == "RECV_F" else [stage + "B" + micro, stage + "I" + micro]


def lower(rows, mode):
    out = []
    for rank, row in enumerate(rows):
        pending = []  # RECVs not yet placed, in their original order
        new = []
        for a in row:
            if consumers(a) is not None:
                pending.append(a)
                continue
            for r in [r for r in pending if a in consumers(r)]:
                pending.remove(r)
                new.append(r)
            new.append(a)
        if pending:
            sys.exit(f"rank {rank}: no consumer for {pending}")
        if mode == "swap_odd" and rank % 2 == 1:
            i = 0
            while i + 1 < len(new):
                if "SEND" in new[i] and "RECV" in new[i + 1]:
                    new[i], new[i + 1] = new[i + 1], new[i]
                    i += 2
                else:
                    i += 1
        out.append(new)
    return out


def main():
    path, mode = sys.argv[1], sys.argv[2]
    if mode not in ("deferred", "swap_odd"):
        sys.exit("mode: deferred or swap_odd")
    with open(path) as f:
        rows = [line.strip().split(",") for line in f if line.strip()]
    for row in lower(rows, mode):
        print(",".join(row))


if __name__ == "__main__":
    main()
