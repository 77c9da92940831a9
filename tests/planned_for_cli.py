#!/usr/bin/env python3
"""A schedule `ppsched tune -o` writes with a model carries what it was planned for (the schedule
file's "planned_for": the model file, the best's layout, the training and data-parallel flags),
and `simulate`, `compare`, `check` and `show --timeline` price it so without being told again:
`simulate best.json` gives tune's makespan, where before it priced the even split. An explicit
--layout overrides the plan's (with a note), a --model of another file sets it aside (with a
note), and a plan whose model cannot be found, or whose layout does not fit, is refused (exit 2).
With --dp, every candidate carries the FSDP steps, so the file runs under --dp as it is. And tune
ends within a few percent of --seconds.

    planned_for_cli.py PPSCHED DATA [--no-timing]
"""
import json
import os
import shutil
import sys
import time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402


def main():
    exe, data = sys.argv[1], sys.argv[2]
    # --no-timing: a sanitized build runs several times slower than the time limit's shares
    # assume of its fixed work (the families' DES runs), so the --seconds check is left out there.
    timing = "--no-timing" not in sys.argv[3:]
    cli = Cli(exe, timeout=300, stop="exit", verbose=True)
    tmp = cli.tmp
    gpt2 = os.path.join(data, "models", "hf", "gpt2.json")
    llama = os.path.join(data, "models", "hf", "llama3_8b.json")
    best = os.path.join(tmp, "best.json")
    # GPT-2's output head costs several layers at 1024 tokens: the searched layout is not the even one.
    training = ["--seq-len", "1024", "--micro-batch-size", "8"]
    dp = ["--dp", "2", "--fsdp"]
    tuned = cli.json("tune", "--pp", "4", "--micro", "8", "--model", gpt2, *training, *dp, "--partition", "search",
                     "--seconds", "0", "--iterations", "500", "--des-iterations", "10", "-q", "-o", best)
    layout = tuned["layout"]
    even = tuned["partition"]["even_layout"]
    cli.check(layout != even, "the searched layout %s differs from the even %s (else this test shows nothing)" % (layout, even))

    with open(best) as f:
        doc = json.load(f)
    plan = doc.get("planned_for", {})
    cli.check(plan.get("model") == gpt2, "planned_for.model is the model tune read: %r" % plan.get("model"))
    cli.check(plan.get("layout") == layout, "planned_for.layout is the best's layout: %r" % plan.get("layout"))
    cli.check(plan.get("layout_megatron") == tuned["layout_megatron"], "planned_for.layout_megatron")
    cli.check(plan.get("seq_len") == 1024 and plan.get("micro_batch_size") == 8, "the training flags given: %r" % plan)
    cli.check(plan.get("dp") == 2 and plan.get("fsdp") is True, "the data parallelism: %r" % plan)
    ops = [s["op"] if isinstance(s, dict) else s for prog in doc["programs"] for s in prog if s is not None]
    cli.check(sum(1 for o in ops if o == "FSDP_REDUCE_GRAD") == doc["stages"],
              "the written schedule carries one FSDP_REDUCE_GRAD per stage (tune --dp prices the gradient sync)")

    # Priced as planned, with no flag at all.
    sim = cli.json("simulate", best)
    cli.check(abs(sim["makespan_ms"] - tuned["makespan_ms"]) <= 1e-9 * tuned["makespan_ms"],
              "simulate best.json gives tune's makespan: %r vs %r" % (sim.get("makespan_ms"), tuned["makespan_ms"]))
    cli.check(sim["data_parallel"]["degree"] == 2 and sim["data_parallel"]["fsdp"], "simulate takes the plan's DP 2 FSDP")
    cli.check(sim["data_parallel"]["collective_ms"] > 0, "the gradient sync is priced")
    # What the user had to type before: the same figure.
    explicit = cli.json("simulate", best, "--model", gpt2, *training, *dp, "--layout", ",".join(map(str, layout)))
    cli.check(explicit["makespan_ms"] == sim["makespan_ms"], "the plan equals its flags given by hand")
    # --layout overrides the plan's, with a note.
    p = cli.run("simulate", best, "--layout", ",".join(map(str, even)), "--json")
    cli.check("overrides the layout" in p.stderr, "an explicit --layout says it overrides the plan's: %r" % p.stderr[:300])
    on_even = json.loads(p.stdout)["makespan_ms"]
    cli.check(on_even > sim["makespan_ms"] * 1.01,
              "the even split (what simulate priced before) is slower: %r vs %r" % (on_even, sim["makespan_ms"]))
    # check, compare and show --timeline take the plan too.
    text = cli.run("check", best).stdout
    cli.check("DP 2" in text and "FSDP" in text, "check takes the plan's data parallelism: %r" % text[:400])
    rows = cli.json("compare", best)
    cli.check(rows and rows[0]["makespan_ms"] == sim["makespan_ms"], "compare prices it as planned")
    shown = cli.run("show", best, "--timeline").stdout
    cli.check(("makespan %.3f ms" % sim["makespan_ms"]) in shown, "show --timeline prices it as planned: %r" % shown[:200])
    # A --model of another file sets the plan aside (its layout does not even fit Llama's layers).
    p = cli.run("simulate", best, "--model", llama, "--json")
    cli.check("was planned for" in p.stderr, "another --model says the plan is set aside: %r" % p.stderr[:300])

    # The model is looked up from here, else beside the schedule; else refused with the path.
    moved = os.path.join(tmp, "moved")
    os.makedirs(os.path.join(moved, "m"))
    shutil.copy(gpt2, os.path.join(moved, "m", "gpt2.json"))
    doc2 = dict(doc)
    doc2["planned_for"] = dict(plan, model="m/gpt2.json")
    with open(os.path.join(moved, "best.json"), "w") as f:
        json.dump(doc2, f)
    beside = cli.json("simulate", os.path.join(moved, "best.json"))
    cli.check(beside.get("makespan_ms") == sim["makespan_ms"], "the model beside the schedule file is found")
    doc2["planned_for"] = dict(plan, model="nowhere/gpt2.json")
    with open(os.path.join(moved, "lost.json"), "w") as f:
        json.dump(doc2, f)
    cli.refused(["simulate", os.path.join(moved, "lost.json")], "nowhere/gpt2.json", "give --model")
    cli.run("simulate", os.path.join(moved, "lost.json"), "--model", gpt2)
    # A layout that does not fit the stages, and one without a model key: located errors.
    doc2["planned_for"] = dict(plan, layout=[12, 0, 0])
    with open(os.path.join(moved, "short.json"), "w") as f:
        json.dump(doc2, f)
    cli.refused(["check", os.path.join(moved, "short.json")], "planned_for.layout", "4 stages")
    doc2["planned_for"] = {"layout": layout}
    with open(os.path.join(moved, "nomodel.json"), "w") as f:
        json.dump(doc2, f)
    cli.refused(["check", os.path.join(moved, "nomodel.json")], "planned_for.model", "missing key")
    # Two schedules planned differently cannot share one run's model.
    other = os.path.join(tmp, "other.json")
    cli.run("tune", "--pp", "4", "--micro", "8", "--model", gpt2, *training, "--family", "1f1b", "--seconds", "0",
            "--iterations", "0", "--des-iterations", "0", "-q", "-o", other)
    cli.refused(["compare", best, other], "planned for different")
    # Without a plan, a model flag still needs --model.
    plain = os.path.join(tmp, "plain.json")
    cli.run("generate", "1f1b", "--pp", "4", "--micro", "8", "-o", plain)
    cli.refused(["simulate", plain, "--layout", "3,3,3,3"], "--layout needs --model")
    cli.refused(["check", plain, "--seq-len", "1024"], "--seq-len needs --model")

    # tune honours --seconds: the time left is shared over the searches still to run, and a search
    # stops filling gaps, and its DES climb stops timing starts, once its share is spent (before,
    # 2 s ran 6.5 s here: a share left at 0 meant no limit).
    llama70 = os.path.join(data, "models", "hf", "llama3_70b.json")
    for extra in (["--partition", "even"], ["--partition", "search"]) if timing else ():
        t0 = time.monotonic()
        cli.run("tune", "--pp", "8", "--micro", "32", "--vpp-max", "2", "--model", llama70, "--tp", "8", "--dp", "4",
                "--seconds", "3", "-q", *extra)
        wall = time.monotonic() - t0
        print("tune --seconds 3 %s: %.2f s" % (" ".join(extra), wall))
        cli.check(wall <= 3 * 1.15 + 0.3, "tune --seconds 3 %s ran %.2f s" % (" ".join(extra), wall))
    return cli.finish()


if __name__ == "__main__":
    sys.exit(main())
