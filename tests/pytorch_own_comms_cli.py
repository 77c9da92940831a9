#!/usr/bin/env python3
"""ppsched's PyTorch lowering against PyTorch's own: for each of the five _PipelineScheduleRuntime
classes at P 2..4 (V 2, M 2P), `generate FAMILY --torch-comms` must write the rows PyTorch's own
constructor, _prepare_schedule_with_comms and _dump_csv wrote (tests/data/peers/pytorch_comms,
made by run_comms.py from PyTorch's schedules.py; its README.md says how), and `check` must
verify PyTorch's file. The kept files of tests/data/schedules/pytorch_comms (the exec cases'
input) must be PyTorch's bytes too.

    pytorch_own_comms_cli.py PPSCHED DATA_DIR
"""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

# PyTorch's class name (get_schedule_class) -> the ppsched family with its compute order.
CLASSES = {"Interleaved1F1B": "interleaved-1f1b", "LoopedBFS": "looped-bfs",
           "InterleavedZeroBubble": "interleaved-zb", "ZBVZeroBubble": "zbv", "DualPipeV": "dualpipev"}


def first_difference(got, want):
    """The first row (rank) and cell where two CSV texts part, for the failure message."""
    for rank, (g, w) in enumerate(zip(got.split("\n"), want.split("\n"))):
        if g != w:
            for cell, (a, b) in enumerate(zip(g.split(","), w.split(","))):
                if a != b:
                    return f"rank {rank} cell {cell}: ppsched {a}, PyTorch {b}"
            return f"rank {rank}: ppsched has {len(g.split(','))} cells, PyTorch {len(w.split(','))}"
    return f"ppsched has {got.count(chr(10))} rows, PyTorch {want.count(chr(10))}"


def main():
    exe, data = sys.argv[1], sys.argv[2]
    peers = os.path.join(data, "peers", "pytorch_comms")
    cli = Cli(exe, timeout=120, stop="exit", verbose=True)
    expect = cli.check

    compared = 0
    for name, family in CLASSES.items():
        for pp in (2, 3, 4):
            micro = 2 * pp
            path = os.path.join(peers, f"{name}_pp{pp}_m{micro}.csv")
            with open(path, "rb") as f:
                raw = f.read()
            # csv.writer ends every row with \r\n; ppsched writes \n.
            expect(raw.endswith(b"\r\n") and raw.count(b"\r\n") == pp and raw.count(b"\n") == pp,
                   f"{name} P={pp}: PyTorch's file has {pp} rows, each ended by csv.writer's \\r\\n")
            want = raw.decode().replace("\r\n", "\n")
            got = cli.run("generate", family, "--pp", str(pp), "--vpp", "2", "--micro", str(micro),
                          "--format", "csv", "--torch-comms").stdout
            same = got == want
            expect(same, f"{name} P={pp} M={micro}: generate {family} --torch-comms = PyTorch's _dump_csv"
                   + ("" if same else " (" + first_difference(got, want) + ")"))
            p = cli.run("check", path)
            expect(p.stdout.startswith(path + ": verified"), f"{name} P={pp}: check verifies PyTorch's file")
            with open(os.path.join(data, "schedules", "pytorch_comms", os.path.basename(path)), "rb") as f:
                expect(f.read() == raw, f"{name} P={pp}: tests/data/schedules/pytorch_comms holds PyTorch's bytes")
            compared += 1
    expect(compared == 15, f"{compared} of 15 PyTorch dumps compared")
    cli.finish("pytorch_own_comms_cli")


if __name__ == "__main__":
    main()
