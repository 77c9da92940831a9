#!/usr/bin/env python3
"""`ppsched simulate` and `ppsched check` of a pipeline x data parallel job (--dp, --fsdp,
--mesh-order; `generate --fsdp-steps`): the report and --json name the DP degree and the DP
collective time, the mesh order moves the DP ring inside a node, and bad flags exit 2 with a
message naming the flag.

    data_parallel_cli.py PPSCHED
"""
import json
import os
import sys
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402
from schedules import move_reduce_grad_before_tower  # noqa: E402




def main():
    exe = sys.argv[1]
    cli = Cli(exe, timeout=120, stop="exit")
    expect = cli.check

    with tempfile.TemporaryDirectory() as tmp:
        sched = os.path.join(tmp, "1f1b_fsdp.csv")
        cli.run("generate", "1f1b", "--pp", "4", "--micro", "8", "--fsdp-steps", "-o", sched)
        text = open(sched).read()
        expect(text.startswith("0UNSHARD,"), "the generated CSV starts rank 0 with UNSHARD, as PyTorch's lowering")
        expect(text.count("REDUCE_GRAD") == 4, "one REDUCE_GRAD per stage")

        # check: verified, and the JSON names the layout
        chk = cli.json("check", sched, "--dp", "8", "--fsdp")
        expect(chk["ok"], "a generated PP x DP schedule checks clean")
        expect(chk["data_parallel"] == {"degree": 8, "mesh_order": "dp,pp", "fsdp": True, "world_ranks": 32},
               f"check --json data_parallel: {chk.get('data_parallel')}")
        expect("DP 8 (mesh dp,pp, FSDP), world 32 ranks" in cli.run("check", sched, "--dp", "8", "--fsdp").stdout,
               "check's text names the layout")

        # simulate: default 7B costs (3 GiB of parameters per stage), 8 ranks per node: the
        # ("dp", "pp") DP group of rank r is {r, r+4, ..., r+28}, across four nodes at 50 GB/s.
        base = cli.json("simulate", sched)
        dp = cli.json("simulate", sched, "--dp", "8")
        all_reduce = 2 * 7 / 8 * 3 * 2**30 / 50e9 * 1e3 + 14 * 0.010
        d = dp["data_parallel"]
        expect(d["degree"] == 8 and d["world_ranks"] == 32 and not d["fsdp"], f"simulate --json data_parallel: {d}")
        expect(abs(d["collective_ms"] - 4 * all_reduce) < 1e-6, f"4 ranks x one all-reduce: {d['collective_ms']}")
        expect(all(r["dp_ring"] == "inter_node" for r in dp["ranks"]), "every DP ring crosses nodes under dp,pp")
        expect(abs(dp["makespan_ms"] - (base["makespan_ms"] + all_reduce)) < 1e-6,
               f"the job takes one all-reduce longer: {dp['makespan_ms']} vs {base['makespan_ms']} + {all_reduce}")
        expect(base["data_parallel"]["degree"] == 1 and base["data_parallel"]["collective_ms"] == 0,
               "without --dp the report says DP 1 and no DP time")
        pp_dp = cli.json("simulate", sched, "--dp", "8", "--mesh-order", "pp,dp")
        expect(all(r["dp_ring"] == "intra_node" for r in pp_dp["ranks"]), "pp,dp keeps each DP ring inside a node")
        expect(pp_dp["data_parallel"]["collective_ms"] < d["collective_ms"] / 5, "an intra-node ring is faster")
        out = cli.run("simulate", sched, "--dp", "8", "--fsdp").stdout
        expect("data parallel: DP 8 (mesh dp,pp, FSDP), world 32 ranks; DP collectives" in out,
               f"simulate's text names the layout and the DP time: {out[:400]}")
        plain = cli.run("simulate", "--generate", "1f1b", "--pp", "4", "--micro", "8", "--dp", "2").stdout
        expect("has no FSDP_* steps" in plain, "a schedule without FSDP steps is noted")
        cmp_rows = cli.json("compare", sched, "--dp", "8")
        expect(cmp_rows[0]["dp_degree"] == 8 and cmp_rows[0]["dp_collective_ms"] > 0, "compare takes --dp too")

        # bad flags: exit 2, the message names the flag
        for cmd in (["simulate", sched], ["check", sched]):
            for args, says in ((["--dp", "0"], "--dp"), (["--dp", "-1"], "--dp"), (["--dp", "abc"], "--dp"),
                               (["--dp", "1e3"], "--dp"), (["--dp", "99999999999999999999"], "--dp"),
                               (["--dp", "1048577"], "--dp"),
                               (["--dp", "262145"], "(--dp): the world of 4 pipeline ranks x 262145"),
                               (["--mesh-order", "dp"], "--mesh-order"), (["--mesh-order", "pp,pp"], "--mesh-order")):
                p = cli.run(*cmd, *args, expect=2)
                err = p.stderr + p.stdout
                expect(says in err and "terminate" not in err, f"{cmd[0]} {' '.join(args)}: {err.strip()[:300]}")
        # the largest world that fits runs (no FSDP steps are needed to price it)
        cli.run("check", sched, "--dp", "262144")

        # A trainable MPipe tower: its backward adds to stage 0's gradients, so stage 0's
        # REDUCE_GRAD must follow it (the generated schedule has it there); owner-backward
        # leaves every rank with tower gradients that no DP step averages.
        mp = os.path.join(tmp, "mpipe_fsdp.json")
        cli.run("generate", "mpipe-transpose", "--pp", "2", "--micro", "4", "--fsdp-steps", "-o", mp)
        cli.run("check", mp, "--dp", "2")
        doc = json.load(open(mp))
        tower, rg = move_reduce_grad_before_tower(doc)
        expect(rg > tower, f"--fsdp-steps puts stage 0's REDUCE_GRAD (step {rg}) after the tower's backward ({tower})")
        early = os.path.join(tmp, "mpipe_early_reduce.json")
        json.dump(doc, open(early, "w"))
        p = cli.run("check", early, "--dp", "2", expect=1)
        expect("adds the tower's gradients to stage 0's after its FSDP_REDUCE_GRAD" in p.stdout,
               f"a REDUCE_GRAD before the tower's backward: {p.stdout[:600]}")
        cli.run("check", early)  # without --dp nothing is averaged, so nothing is early
        ob = os.path.join(tmp, "mpipe_ob_fsdp.json")
        cli.run("generate", "mpipe-transpose", "--pp", "2", "--micro", "4", "--owner-backward", "--fsdp-steps", "-o", ob)
        p = cli.run("check", ob, "--dp", "2", expect=1)
        expect("with an owner-backward MPipe tower" in p.stdout, f"owner-backward under --dp: {p.stdout[:600]}")

    return cli.finish("data_parallel_cli")


if __name__ == "__main__":
    sys.exit(main())
