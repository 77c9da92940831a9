#!/usr/bin/env python3
"""`ppsched plan MODEL --gpus N --global-batch-size B` end to end: every plan tiles the GPUs and the
batch, the written schedule simulates to the plan's step time with no flag (it carries its plan),
and the launch files follow what the frameworks' own readers accept:

  torchtitan (v0.2.2): every section and key of the TOML is a field of its JobConfig
    (tests/data/peers/torchtitan/job_config_fields.json, dumped from its dataclasses: its
    ConfigManager refuses any other), with the field's type; module_fqns_per_model_part equals
    what torchtitan's own generate_llm_fqn_per_model_part gives for the even split
    (fqn_per_model_part.json, its output); n_microbatches = local_batch_size //
    pipeline_parallel_microbatch_size is the plan's M; the degrees multiply to the GPUs.
  Megatron-LM (core_v0.15.3): the layout string splits as Megatron's parser split the same strings
    (layout_cases.json: its PipelineParallelLayerLayout's output) and as the plan's layout;
    gbs = mbs x DP x M; the flags are ones its argument parser took.

Then the refusals (exit 2) and, unless --no-timing, --seconds within a few percent. --quick (the
sanitized build, several times slower) leaves out re-making the peers' files, which the main build
checks: the same code paths, at a tenth of the time.

    plan_cli.py PPSCHED DATA [--no-timing] [--quick]
"""
import json
import os
import re
import subprocess
import sys
import time
import tomllib
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402


def tt_type_ok(value, type_text):
    """Whether a TOML value has the type torchtitan's field declares (its dataclass's annotation)."""
    if type_text.startswith("int"):
        return isinstance(value, int) and not isinstance(value, bool)
    if type_text.startswith("str") or type_text.startswith("Literal"):
        if not isinstance(value, str):
            return False
        if type_text.startswith("Literal"):
            return ("'%s'" % value) in type_text
        return True
    if type_text.startswith("list[list[str]]"):
        return isinstance(value, list) and all(isinstance(p, list) and all(isinstance(n, str) for n in p) for p in value)
    if type_text.startswith("bool"):
        return isinstance(value, bool)
    return False


def main():
    exe, data = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    timing = "--no-timing" not in sys.argv[3:]
    quick = "--quick" in sys.argv[3:]
    cli = Cli(exe, timeout=300, stop="exit", verbose=True)
    tmp = cli.tmp
    hf = os.path.join(data, "models", "hf")
    llama = os.path.join(hf, "llama3_8b.json")
    qwen = os.path.join(hf, "qwen3_30b_a3b.json")
    user = ["--gpus", "32", "--global-batch-size", "256", "--seq-len", "8192"]
    fields = json.load(open(os.path.join(data, "peers", "torchtitan", "job_config_fields.json")))["sections"]
    fqn_cases = json.load(open(os.path.join(data, "peers", "torchtitan", "fqn_per_model_part.json")))["cases"]
    layout_cases = json.load(open(os.path.join(data, "peers", "megatron", "layout_cases.json")))["cases"]

    # ---- the sweep: every plan tiles the GPUs and the batch ----
    best = os.path.join(tmp, "best.json")
    r = cli.json("plan", llama, *user, "--seconds", "20", "-q", "-o", best)
    plans = r["plans"]
    cli.check(len(plans) >= 3, "plan prints several plans: %d" % len(plans))
    for p in plans:
        cli.check(p["tp"] * p["pp"] * p["dp"] == 32, "TP x PP x DP = 32: %s" % p)
        cli.check(p["dp"] * p["micro_batch_size"] * p["micro_batches"] == 256, "DP x mbs x M = 256: %s" % p)
        cli.check(p["peak_bytes"] <= p["budget_bytes"], "the peak fits the usable memory: %s" % p)
        mfu = r["model_flops_per_step"] / (32 * r["peak_flops_per_gpu"] * p["step_ms"] / 1e3)
        cli.check(abs(p["mfu"] - mfu) < 1e-9, "MFU = model FLOPs / (GPUs x peak x step): %s vs %s" % (p["mfu"], mfu))
    cli.check(all(a["step_ms"] <= b["step_ms"] for a, b in zip(plans, plans[1:])), "plans fastest first")
    base = r["baseline_pp1"]
    cli.check(base is not None and base["pp"] == 1 and base["step_ms"] >= plans[0]["step_ms"],
              "the PP = 1 baseline is reported and not faster than the best: %s" % (base,))
    shapes = r["shapes"]
    cli.check(shapes["timed"] + shapes["pruned_by_bound"] + shapes["over_memory"] <= shapes["enumerated"] + 1,
              "the shape counts add up: %s" % shapes)
    cli.check("fastest of" in r["why"], "why says what the best won against: %s" % r["why"])
    # The written schedule carries its plan: simulate prices it so with no flag.
    sim = cli.json("simulate", best)
    cli.check(abs(sim["makespan_ms"] - plans[0]["step_ms"]) <= 1e-6 * plans[0]["step_ms"],
              "simulate best.json gives the plan's step: %s vs %s" % (sim.get("makespan_ms"), plans[0]["step_ms"]))
    # Quiet in a log: no progress line when stderr is not a terminal.
    p = cli.run("plan", llama, *user, "--pp", "2", "--tp", "1", "--seconds", "5")
    cli.check("shapes timed" not in p.stderr, "no progress line in a log: %r" % p.stderr[:300])

    # ---- torchtitan ----
    def torchtitan(extra, name):
        toml_path = os.path.join(tmp, name + ".toml")
        plan = cli.json("plan", llama, *user, *extra, "--seconds", "0", "-q", "--torchtitan", toml_path)
        with open(toml_path, "rb") as f:
            doc = tomllib.load(f)
        for section, keys in doc.items():
            cli.check(section in fields, "[%s] is a torchtitan JobConfig section" % section)
            for key, value in keys.items():
                field = fields.get(section, {}).get(key)
                cli.check(field is not None, "[%s] %s is a field of torchtitan's %s" % (section, key, section))
                if field:
                    cli.check(tt_type_ok(value, field["type"]), "[%s] %s = %r has torchtitan's type %s" %
                              (section, key, value, field["type"]))
        return plan["plans"][0], doc

    # PP 4 on the even split: module_fqns_per_model_part is torchtitan's own split.
    p, doc = torchtitan(["--pp", "4", "--tp", "1", "--refine", "0"], "tt_pp4")
    par, tr = doc["parallelism"], doc["training"]
    theirs = [c for c in fqn_cases if c["num_stages"] == 4 and c["num_layers"] == 32 and c["input_weight"] == 1
              and c["output_weight"] == 1]
    cli.check(len(theirs) == 1, "torchtitan's split of 32 layers over 4 stages is in the peer data")
    cli.check(p["layout"] == [8, 9, 8, 7], "--refine 0 keeps the even split: %s" % p["layout"])
    cli.check(par["module_fqns_per_model_part"] == theirs[0]["fqns"],
              "module_fqns_per_model_part is torchtitan's own split:\n%s\n%s" % (par["module_fqns_per_model_part"], theirs[0]["fqns"]))
    cli.check(tr["local_batch_size"] // par["pipeline_parallel_microbatch_size"] == p["micro_batches"],
              "n_microbatches = local_batch_size // microbatch_size = M (%s)" % p["micro_batches"])
    cli.check(tr["local_batch_size"] % par["pipeline_parallel_microbatch_size"] == 0, "local batch divisible by microbatch_size")
    dp = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    cli.check(dp * par["tensor_parallel_degree"] * par["pipeline_parallel_degree"] == 32, "the degrees multiply to WORLD_SIZE")
    cli.check(tr["global_batch_size"] == tr["local_batch_size"] * dp, "global = local x DP (no accumulation with a pipeline)")
    cli.check(p["sharding"] == "fsdp" and par["data_parallel_shard_degree"] == p["dp"], "torchtitan plans shard with FSDP")
    if "pipeline_parallel_schedule_csv" in par:
        csv = par["pipeline_parallel_schedule_csv"]
        cli.check(os.path.exists(csv), "the order's CSV is written beside the TOML: %s" % csv)
        chk = cli.run("check", csv, "--no-overlap-p2p", expect=None)
        cli.check(chk.returncode == 0, "ppsched check verifies the CSV: %s" % chk.stdout[-400:])
    # A torch class where the plan is one as generated: interleaved 1F1B at V = 2.
    p, doc = torchtitan(["--pp", "4", "--tp", "2", "--family", "interleaved-zb", "--vpp-max", "2", "--refine", "0",
                         "--micro-batch-size", "1"], "tt_izb")
    if p["vpp"] == 2 and p["schedule"] == "interleaved-zb V=2":
        cli.check(doc["parallelism"].get("pipeline_parallel_schedule") == "InterleavedZeroBubble",
                  "interleaved-zb V=2 is torch's InterleavedZeroBubble: %s" % doc["parallelism"])
        cli.check(len(doc["parallelism"]["module_fqns_per_model_part"]) == 8, "P x V = 8 model parts")
    # Without a pipeline: M gradient-accumulation steps of a local batch of mbs.
    p, doc = torchtitan(["--pp", "1", "--tp", "2"], "tt_pp1")
    tr, par = doc["training"], doc["parallelism"]
    cli.check("module_fqns_per_model_part" not in par and par["pipeline_parallel_degree"] == 1, "PP 1: no model parts")
    acc = tr["global_batch_size"] // (tr["local_batch_size"] * par["data_parallel_shard_degree"] * par["data_parallel_replicate_degree"])
    cli.check(acc == p["micro_batches"], "PP 1: gradient accumulation = M (%d vs %d)" % (acc, p["micro_batches"]))
    # An MoE model: expert_parallel_degree.
    qp = cli.json("plan", qwen, "--gpus", "32", "--global-batch-size", "256", "--seq-len", "4096", "--pp", "2", "--ep", "8",
                  "--micro-batch-size", "1", "--seconds", "0", "-q", "--torchtitan", os.path.join(tmp, "q.toml"))
    with open(os.path.join(tmp, "q.toml"), "rb") as f:
        qdoc = tomllib.load(f)
    cli.check(qdoc["parallelism"].get("expert_parallel_degree") == qp["plans"][0]["ep"] == 8, "EP 8 written")

    # ---- Megatron-LM ----
    def megatron(extra, name, model=llama, args=user):
        path = os.path.join(tmp, name + ".sh")
        plan = cli.json("plan", model, *args, *extra, "--seconds", "0", "-q", "--megatron", path)
        got = subprocess.run(["bash", "-c", 'source "$1" && printf "%s\\n" "${MEGATRON_PLAN_ARGS[@]}" && '
                              'printf "CDMC=%s\\n" "${CUDA_DEVICE_MAX_CONNECTIONS:-}"', "-", path],
                             capture_output=True, text=True)
        cli.check(got.returncode == 0, "bash sources %s: %s" % (name, got.stderr))
        lines = got.stdout.split("\n")
        cdmc = [l for l in lines if l.startswith("CDMC=")][0][5:]
        argv = [l for l in lines if l and not l.startswith("CDMC=")]
        return plan["plans"][0], argv, cdmc

    def flag(argv, name):
        return argv[argv.index(name) + 1] if name in argv else None

    # The flags Megatron-LM's own argument parser declared (layout_cases.json "flag_facts") or took
    # in the runs on plan's files (plan_exports/verdicts.json).
    known = set(json.load(open(os.path.join(data, "peers", "megatron", "layout_cases.json")))["argparse"]["flag_facts"])
    for v in json.load(open(os.path.join(data, "peers", "plan_exports", "verdicts.json")))["files"].values():
        if v.get("argparse") == "ok":
            known.update(a for a in v["plan_args"] if a.startswith("--"))
    for extra, name in ((["--pp", "4", "--tp", "2", "--vpp-max", "2", "--recompute", "full", "--refine", "0"], "mg_v2"),
                        (["--pp", "2,4"], "mg_search")):
        p, argv, cdmc = megatron(extra, name)
        for a in argv:
            if a.startswith("--"):
                cli.check(a in known, "%s is a flag Megatron-LM's parser took" % a)
        gbs, mbs = int(flag(argv, "--global-batch-size")), int(flag(argv, "--micro-batch-size"))
        dp = 32 // (int(flag(argv, "--tensor-model-parallel-size")) * int(flag(argv, "--pipeline-model-parallel-size")))
        cli.check(gbs % (mbs * dp) == 0 and gbs // (mbs * dp) == p["micro_batches"], "gbs / (mbs x DP) = M")
        cli.check((cdmc == "1") == (p["tp"] > 1), "CUDA_DEVICE_MAX_CONNECTIONS=1 exactly with TP > 1 (Megatron asserts it)")
        layout = flag(argv, "--pipeline-model-parallel-layout")
        stages = layout.split("|")
        counts = [sum(int(m.group(1) or 1) for m in re.finditer(r"t(?:\*(\d+))?", s)) for s in stages]
        cli.check(counts == p["layout"], "the layout %s is the plan's %s" % (layout, p["layout"]))
        cli.check(len(stages) == p["pp"] * p["vpp"] and len(stages) % p["pp"] == 0, "Megatron's stage count is P x V")
        cli.check(stages[0].startswith("E") and stages[-1].endswith("L"), "E first, L last")
        if p["vpp"] > 1:
            cli.check(flag(argv, "--microbatch-group-size-per-virtual-pipeline-stage") == str(p["pp"]),
                      "interleaved: Megatron's default group of P")
        cli.check(p["schedule"] == "1f1b" or p["schedule"].startswith("interleaved-1f1b --group-size"),
                  "a Megatron plan runs Megatron's order: %s" % p["schedule"])
        if p["recompute"] == "full":
            cli.check(flag(argv, "--recompute-granularity") == "full" and flag(argv, "--recompute-method") == "uniform"
                      and flag(argv, "--recompute-num-layers") == "1", "full recomputation per layer")
    # Megatron's own parser on layout strings of this writer's form (layout_cases.json): where it
    # accepted one, its stages hold the t's this writer counts.
    for c in layout_cases:
        if not c.get("constructed") or c.get("validates") is not True:
            continue
        stages = c["layout"].split("|") if "(" not in c["layout"] else None
        if stages is None:
            continue
        counts = [sum(int(m.group(1) or 1) for m in re.finditer(r"t(?:\*(\d+))?", s)) for s in stages]
        theirs = [sum(1 for x in st if x == "decoder") for st in c["parse_str_to_list"]]
        cli.check(counts == theirs, "Megatron splits %s as %s, the writer's reading %s" % (c["layout"], theirs, counts))

    # ---- the files the frameworks' own readers took (tests/data/peers/plan_exports) ----
    peers = os.path.join(data, "peers", "plan_exports")
    verdicts = json.load(open(os.path.join(peers, "verdicts.json")))["files"]
    here = os.path.join(tmp, "exports")
    os.makedirs(here, exist_ok=True)
    for line in open(os.path.join(peers, "commands.txt")):
        if quick or not line.strip() or line.startswith("#"):
            continue
        name, *args = line.split()
        args = [a.replace("MODELS", os.path.abspath(hf)) for a in args]
        cli.run("plan", *args, cwd=here)
        def body(path):
            return [l for l in open(path).read().splitlines() if not l.startswith("#")]
        ours = os.path.join(here, name)
        theirs = os.path.join(peers, "files", name)
        cli.check(body(ours) == body(theirs), "%s is the file the framework's reader took (else re-run the peers: %s)" %
                  (name, os.path.join(peers, "README.md")))
        csv = name[:-5] + "_schedule.csv"
        if os.path.exists(os.path.join(peers, "files", csv)):
            cli.check(open(os.path.join(here, csv)).read() == open(os.path.join(peers, "files", csv)).read(),
                      "%s is the CSV the framework's reader took" % csv)
        v = verdicts[name]
        if name.endswith(".toml"):
            cli.check(v["accepted"] is True, "torchtitan's ConfigManager accepted %s: %s" % (name, v.get("error")))
            ranks = v["pipeline_llm_per_pp_rank"]
            cli.check(ranks and all(r["result"] == "ok" for r in ranks.values()),
                      "torchtitan's pipeline_llm built every rank of %s: %s" % (name, ranks))
            if "pipeline_parallel_schedule_csv" in open(theirs).read():
                cli.check(all(r.get("csv_loaded") == "compute_only" for r in ranks.values()),
                          "the CSV of %s loads as compute_only, torchtitan's format" % name)
        else:
            cli.check(v["argparse"] == "ok" and v["validate_args"] == "ok",
                      "Megatron-LM's parse_args and validate_args took %s: %s / %s" % (name, v["argparse"], v["validate_args"]))
            cli.check(v["num_microbatches"] == v["header_M"], "Megatron's micro-batch count is the plan's M in %s" % name)

    # ---- ppsched-exec ----
    run_sh = os.path.join(tmp, "run.sh")
    cli.run("plan", llama, *user, "--tp", "1", "--pp", "2,4", "--seconds", "5", "-q", "-o", best, "--exec-cmd", run_sh)
    text = open(run_sh).read()
    cli.check("ppsched-exec" in text and "--schedule" in text and best in text and "--dp" in text, "the torchrun line: %s" % text)

    # ---- refusals ----
    cli.refused(["plan", llama, *user, "--torchtitan", "a.toml", "--megatron", "b.sh"], "--torchtitan", "--megatron")
    cli.refused(["plan", llama, *user, "--ep", "8"], "--ep", "no experts")
    cli.refused(["plan", llama, *user, "--exec-cmd", "x.sh"], "--exec-cmd needs -o")
    cli.refused(["plan", llama, *user, "--torchtitan", "a.toml", "--sharding", "zero1"], "zero1", "torchtitan")
    cli.refused(["plan", llama, *user, "--megatron", "a.sh", "--sharding", "fsdp"], "fsdp", "Megatron")
    cli.refused(["plan", llama, *user, "-o", "x.csv"], "-o")
    cli.refused(["plan", llama, *user, "--family", "nonesuch"], "nonesuch")
    cli.refused(["plan", llama, "--gpus", "48", "--global-batch-size", "48", "--tp", "3"], "no shape",
                "TP does not divide the heads")
    cli.refused(["plan", llama, "--gpus", "32", "--global-batch-size", "7", "--pp", "1"], "no shape", "DP does not divide")
    cli.refused(["plan", llama, *user, "--exec-cmd", "x.sh", "-o", os.path.join(tmp, "y.json"), "--tp", "2"],
                "--exec-cmd", "TP 2")

    # ---- --seconds ----
    if timing:
        t0 = time.monotonic()
        # Under a loaded machine the first shapes timed may not fit yet: exit 1 (nothing found) is
        # an answer too; the time is what this checks.
        p = cli.run("plan", os.path.join(hf, "llama3_70b.json"), "--gpus", "256", "--global-batch-size", "512",
                    "--seq-len", "8192", "--seconds", "4", "-q", expect=None)
        cli.check(p.returncode in (0, 1), "plan --seconds 4 answers (exit %d): %s" % (p.returncode, p.stderr[-300:]))
        took = time.monotonic() - t0
        cli.check(took <= 4 * 1.1 + 0.5, "plan --seconds 4 ended in %.2f s" % took)
    return cli.finish("plan_cli")


if __name__ == "__main__":
    sys.exit(main())
