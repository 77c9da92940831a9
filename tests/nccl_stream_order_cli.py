#!/usr/bin/env python3
"""pytorch/pytorch#172668: a lowering that posts a forward receive after an independent send ran
on one node and hung on two. PyTorch's runtime issues every P2P op through batch_isend_irecv on
the pipeline group's communicator, and NCCL runs a communicator's ops in issue order on its
stream: a receive posted after a send is not there for its peer until that send completes, and
an activation-sized send completes only when its receive runs. `ppsched check` must find the
cycle under its default (NCCL) semantics, say which semantics it assumed, and keep Gloo's
verdict (each posted op on its own) for the runs that are really on Gloo.

The two schedules come from the lowered Interleaved1F1B of tests/data/schedules/pytorch_comms
(PP 2, 4 stages, 4 micros: PyTorch's `_add_send_recv` lowering as `ppsched generate
--torch-comms` writes it) through tests/support/pytorch_defer_recv.py: the issue's deferred
receives and its "swap on odd ranks" variant. The orders the issue's reporter logged where the
runs hung appear in them verbatim, and the sends the reporter named as holding the other rank
are the ones the cycle names.

    nccl_stream_order_cli.py PPSCHED DATA_DIR
"""
import glob
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    exe, data = sys.argv[1], sys.argv[2]
    source = os.path.join(data, "schedules", "pytorch_comms", "Interleaved1F1B_pp2_m4.csv")
    folder = os.path.join(data, "schedules", "pytorch_deferred_recv")
    cli = Cli(exe, timeout=120, stop="exit", verbose=True)
    expect = cli.check

    path = {}
    for mode in ("deferred", "swap_odd"):
        path[mode] = os.path.join(folder, f"Interleaved1F1B_pp2_m4_{mode}.csv")
        made = cli.command([sys.executable, os.path.join(HERE, "support", "pytorch_defer_recv.py"), source, mode]).stdout
        with open(path[mode]) as f:
            expect(f.read() == made, f"{mode}: the data file is what pytorch_defer_recv.py makes of PyTorch's CSV")

    def rows(mode):
        with open(path[mode]) as f:
            return [line.strip() for line in f if line.strip()]

    # The orders the reporter logged where the runs hung.
    d = rows("deferred")
    expect("0SEND_F1,2RECV_F0,2F0" in d[0] and "1SEND_F0,1RECV_F1,1F1" in d[1],
           "deferred holds the issue's hung orders: rank 0 [... 0SEND_F1, 2RECV_F0, 2F0], rank 1 [... 1SEND_F0, 1RECV_F1, 1F1]")
    w = rows("swap_odd")
    expect("2SEND_F1,0F2,0SEND_F2,2RECV_B0,2B0" in w[0] and "3RECV_F1,3SEND_B0,3F1,3B1,1RECV_F2,3SEND_B1,1F2" in w[1],
           "swap_odd holds the variant's hung orders: rank 0 [... 2SEND_F1, 0F2, 0SEND_F2, 2RECV_B0, 2B0], "
           "rank 1 [... 3RECV_F1, 3SEND_B0, 3F1, 3B1, 1RECV_F2, 3SEND_B1, 1F2]")

    def cycle(j):
        return [v for v in j["violations"] if v["kind"] == "deadlock" and v.get("cause") == "wait_for_cycle"]

    # Where each rank is stuck (stage, micro of its blocked step), and the send that holds the other
    # rank's stream. deferred: the reporter's "both ranks are waiting for the send to finish":
    # rank 0's 0SEND_F1 holds the receive 2RECV_F0 (rank 1 is stuck at its 1SEND_F0, at the shape
    # exchange ppsched models for a stage's first send). swap_odd: "3SEND_B0 will never finish
    # because on rank-0 0SEND_F2 is before 2RECV_B0 but rank-1 will never reach 1RECV_F2".
    cases = (("deferred", {0: (2, 0), 1: (1, 0)}, ["behind FS1s0"]),
             ("swap_odd", {0: (2, 0), 1: (1, 2)}, ["behind FS2s0", "behind BS0s3"]))
    for mode, hung, holders in cases:
        j = cli.json("check", path[mode], expect=1)
        c = cycle(j)
        expect(len(c) == 1 and sorted(c[0]["ranks"]) == [0, 1],
               f"{mode}: a wait-for cycle between ranks 0 and 1 under the default (NCCL) semantics")
        if c:
            msg = c[0]["message"]
            expect("NCCL stream" in msg and "--p2p-backend nccl" in msg,
                   f"{mode}: the cycle names the stream order it runs through: {msg[:160]}...")
            expect(all(h in msg for h in holders), f"{mode}: the sends that hold the streams are named: {holders}")
            expect("With eager (buffered) sends the schedule would complete" in msg,
                   f"{mode}: and says buffered (small, or one node's) sends would complete it")
            expect("With each posted operation progressing on its own (Gloo" in msg,
                   f"{mode}: and that without the stream order (Gloo) it would complete")
            for rank, (stage, micro) in hung.items():
                steps = [s for s in c[0]["steps"] if s["rank"] == rank]
                ok = len(steps) == 1 and steps[0]["step"].get("stage") == stage and steps[0]["step"].get("micro") == micro
                expect(ok, f"{mode}: rank {rank} is stuck at a step of stage {stage} micro {micro}: {steps}")
        expect(j["p2p_backend"] == "nccl" and "NCCL stream" in j["semantics"],
               f"{mode}: the verdict says which semantics it assumes: {j['semantics']}")
        g = cli.json("check", path[mode], "--p2p-backend", "gloo")
        expect(g["ok"] and g["p2p_backend"] == "gloo" and "progresses on its own" in g["semantics"],
               f"{mode}: verified with --p2p-backend gloo, each posted operation on its own (what Gloo does)")
        b = cli.json("check", path[mode], "--no-overlap-p2p", expect=1)
        expect(len(cycle(b)) == 1, f"{mode}: blocking (--no-overlap-p2p) finds the cycle too")

    # PyTorch's lowering (receives posted early) runs on NCCL: the stream order must not refuse it.
    own = sorted(glob.glob(os.path.join(data, "schedules", "pytorch_comms", "*.csv")))
    bad = [os.path.basename(p) for p in own if not cli.json("check", p, expect=None)["ok"]]
    expect(len(own) == 15 and not bad, f"the {len(own)} schedules in PyTorch's lowering are verified under NCCL ({bad})")

    text = cli.run("check", path["deferred"], expect=1).stdout
    expect("assumes rendezvous sends" in text and "on its NCCL stream" in text, "the text report says what it assumes")
    err = cli.run("check", os.path.join(data, "schedules", "1f1b_pp4_m8.json"), "--p2p-backend", "gloo", expect=2).stderr
    expect("--p2p-backend applies to P2P operations posted without waiting" in err,
           "--p2p-backend is refused where nothing is posted without waiting (exit 2)")
    err = cli.run("simulate", path["deferred"], "--p2p-backend", "tcp", expect=2).stderr
    expect("--p2p-backend" in err, "--p2p-backend takes nccl or gloo (exit 2)")
    cli.finish("nccl_stream_order_cli")


if __name__ == "__main__":
    main()
