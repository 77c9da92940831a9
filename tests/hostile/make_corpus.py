#!/usr/bin/env python3
"""Writes the hostile corpus: input files and the command lines that run them.

    make_corpus.py OUT_DIR [PPSCHED]

(With PPSCHED, also one case per number or file option of every command, read from its --help.)

OUT_DIR gets the files (schedules, cost files, a FIFO, links to devices, a sparse file over
the size limit) and cases.json: a list of {"name", "category", "args", ...} that
run_corpus.py runs under a memory limit. Generated at test time (into the build dir), so the
repository keeps only this script. Python 3 standard library only.
"""
import json
import os
import re
import subprocess
import sys

FMT = {"format": "ppsched-schedule", "version": 1}


def schedule(ranks, stages, micro, programs, **extra):
    d = dict(FMT, name="hostile", ranks=ranks, stages=stages, micro_batches=micro)
    d.update(extra)
    d["programs"] = programs
    return d


def pipeline(ranks, micro=1):
    """A correct 1F1B-like GPipe schedule with its P2P steps: rank r runs stage r."""
    progs = []
    for r in range(ranks):
        p = []
        for m in range(micro):
            if r > 0:
                p.append({"op": "FWD_RECV", "micro": m, "stage": r})
            p.append({"op": "FWD", "micro": m, "stage": r})
            if r + 1 < ranks:
                p.append({"op": "FWD_SEND", "micro": m, "stage": r})
        for m in range(micro):
            if r + 1 < ranks:
                p.append({"op": "BWD_RECV", "micro": m, "stage": r})
            p.append({"op": "BWD", "micro": m, "stage": r})
            if r > 0:
                p.append({"op": "BWD_SEND", "micro": m, "stage": r})
        progs.append(p)
    return schedule(ranks, ranks, micro, progs)


# One option line of CLI11's --help: the flags, the value type and what follows (range, Needs).
OPTION = re.compile(r"^\s+((?:-\w,)?--[a-z][a-z0-9-]*)\s+(INT|UINT|FLOAT|TEXT)(\S*)(.*)$")
# Options whose TEXT names a file the command writes, or one it reads.
WRITES = re.compile(r"\bwrite|output file|\bout\b", re.IGNORECASE)
READS = re.compile(r"\bfile\b|config\.json|trace\b", re.IGNORECASE)


def every_flag_cases(exe, case, path, good, good_csv, good_model):
    """One case per option of every command that takes a number or a file, read from the
    command's --help (so a flag added later is covered the day it lands): a number past its
    range (or one no integer holds), an input that is a device, an output that is a folder.
    Each runs on a valid base command line, with what the option needs (Needs: --generate,
    --model) added, and must be refused (exit 2) with a short located error."""
    trace = path("flags.trace.json")
    gen = ["--generate", "1f1b", "--pp", "2", "--micro", "2"]
    base = {
        "check": [good], "simulate": [good], "show": [good], "convert": [good, "-o", path("flags_out.json")],
        "generate": ["1f1b", "--pp", "2", "--micro", "2"],
        "tune": ["--pp", "2", "--micro", "4", "--seconds", "0", "--iterations", "20", "--des-iterations", "20",
                 "--threads", "1", "-q"],
        "model": [good_model, "--pp", "2"], "costs": ["--default"], "calibrate": [trace],
        "compare": [good, good_csv], "fuzz": ["--cases", "1", "--seconds", "5"],
    }
    seen = set()
    for cmd, args in base.items():
        text = subprocess.run([exe, cmd, "--help"], capture_output=True, text=True).stdout
        lines = text.split("\n")
        for k, line in enumerate(lines):
            m = OPTION.match(line)
            if not m:
                continue
            names, kind, bounds, rest = m.groups()
            flag = names.split(",")[-1]
            desc = rest + " " + (lines[k + 1] if k + 1 < len(lines) else "")
            if (cmd, flag) in seen or flag in ("--pp", "--micro") and cmd in ("generate", "tune", "model"):
                continue
            if (cmd, flag) in (("simulate", "--trace-per-rank"), ("fuzz", "--out")):
                continue  # their value is a folder (the "outputs" cases give them a file)
            if kind == "TEXT" and bounds.startswith(":"):
                continue  # a choice CLI11 checks (TEXT:{a,b})
            # What the option needs: --generate's flags in place of the file, --model's file.
            call = [cmd] + (gen if "Needs: --generate" in desc and cmd in ("check", "simulate") else args)
            extra = ["--model", good_model] if "Needs: --model" in desc and cmd != "model" else []
            if kind in ("INT", "UINT"):
                hi = re.search(r"in \[?\d+ ?(?:\.\.|-) ?(\d+)", bounds + rest)
                value = str(int(hi.group(1)) + 1) if hi else "99999999999999999999999"
                why = "past its range" if hi else "past any integer"
            elif kind == "FLOAT":
                value, why = "1e999", "a float past the double range"
            elif WRITES.search(desc):
                value, why = path(""), "given a folder"
            elif READS.search(desc):
                value, why = "/dev/zero", "given a device"
            else:
                continue  # free text (a name, a budget, a layout): the other categories cover those
            seen.add((cmd, flag))
            case("every flag", "%s %s %s" % (cmd, flag, why), call + extra + [flag, value], expect=[2], max_stderr=1500,
                 before=["simulate", good, "--trace", trace] if cmd == "calibrate" else None)


def main():
    out = sys.argv[1]
    exe = sys.argv[2] if len(sys.argv) > 2 else None
    os.makedirs(out, exist_ok=True)
    cases = []

    def path(name):
        return os.path.join(out, name)

    def write(name, text):
        with open(path(name), "w", encoding="utf-8", newline="") as f:
            f.write(text)
        return path(name)

    def wjson(name, obj):
        return write(name, json.dumps(obj, separators=(",", ":")))

    def case(category, name, args, **kw):
        cases.append(dict(name=name, category=category, args=args, **{k: v for k, v in kw.items() if v is not None}))

    good = wjson("good.json", pipeline(2, 2))
    write("good.csv", "0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n")
    good_csv = path("good.csv")

    # ---- size: memory in proportion to the input ----
    big_ranks = wjson("ranks30k.json", schedule(30000, 30000, 1,
                                                [[{"op": "FWD", "micro": 0, "stage": r}] for r in range(30000)]))
    for cmd in (["check"], ["simulate"], ["show", "--summary"]):
        case("size", "30000 ranks, one step each: " + cmd[0], cmd + [big_ranks])
    case("size", "30000 ranks to CSV", ["convert", big_ranks, "-o", path("out_ranks30k.csv")])
    r100k = wjson("ranks100k.json", schedule(100000, 100000, 1,
                                             [[{"op": "FWD", "micro": 0, "stage": r}] for r in range(100000)]))
    case("size", "100000 ranks, one step each: check", ["check", r100k])
    pipe = wjson("pipeline3000.json", pipeline(3000))
    case("size", "3000-rank pipeline with P2P: check", ["check", pipe])
    case("size", "3000-rank pipeline with P2P: simulate", ["simulate", pipe])
    # A compute-only CSV gets its sends and receives laid out in time columns (~1.5 rows^2
    # slots for a one-micro pipeline). Past 2^23 slots the idle padding is dropped, so 5,000
    # and 20,000 rows check and simulate in memory in proportion to the steps.
    for rows in (1500, 5000, 20000):
        csv = write("rows%d.csv" % rows, "".join("%dF0,%dB0\n" % (r, r) for r in range(rows)))
        case("size", "%d-row compute-only CSV: check" % rows, ["check", csv], expect=[0], stdout_has="verified")
        case("size", "%d-row compute-only CSV: simulate" % rows, ["simulate", csv], expect=[0])
        # PyTorch's lowering: its sweeps would revisit every rank (rows^2); ours only the ready ones.
        case("size", "%d-row compute-only CSV: convert --torch-comms" % rows,
             ["convert", csv, "-o", path("rows%d_torch.csv" % rows), "--torch-comms"], expect=[0])
    comms = write("rows5000_comms.csv", "".join(
        ",".join(([] if r == 0 else ["%dRECV_F0" % r]) + ["%dF0" % r] + ([] if r == 4999 else ["%dSEND_F0" % r])
                 + ([] if r == 4999 else ["%dRECV_B0" % r]) + ["%dB0" % r] + ([] if r == 0 else ["%dSEND_B0" % r]))
        + "\n" for r in range(5000)))
    case("size", "5000-row compute_comms CSV: check", ["check", comms], expect=[0])
    case("size", "5000-row compute_comms CSV: simulate", ["simulate", comms], expect=[0])
    n = 800
    group = list(range(n))
    ar = wjson("allreduce%d.json" % n, schedule(n, n, 1, [[{"op": "ALL_REDUCE", "group": group}] for _ in range(n)]))
    case("size", "ALL_REDUCE over %d ranks: check" % n, ["check", ar])
    case("size", "ALL_REDUCE over %d ranks: simulate" % n, ["simulate", ar])
    wide = wjson("stages_2e15_micro_2e20.json", schedule(1, 1 << 15, 1 << 20, [[{"op": "FWD", "micro": 0, "stage": 0}]]))
    case("size", "2^15 stages (the most) x 2^20 micro-batches, one step: convert --torch-comms",
         ["convert", wide, "-o", path("wide_torch.csv"), "--torch-comms"])
    for cmd in ("check", "simulate", "show"):
        # The default costs of 2^15 stages: one stage's figures stand for all but the last (they
        # took ~1.5 KB a stage before).
        case("size", "stages = 2^15, micro = 2^20, one step: " + cmd, [cmd, wide], expect=[0, 1])
    over = wjson("stages_over_2e15.json", schedule(1, (1 << 15) + 1, 1, [[{"op": "FWD", "micro": 0, "stage": 0}]]))
    case("size", "2^15 + 1 stages: check (refused: a Step holds a stage in 16 bits)", ["check", over], expect=[2],
         expect_class="limit", stderr_has="expected at most 32768 for stages")
    mbig = wjson("micro_2e20.json", schedule(2, 2, 1 << 20, pipeline(2)["programs"]))
    case("size", "micro_batches 2^20 with 1 micro used: simulate", ["simulate", mbig])
    case("size", "micro_batches 2^20: check", ["check", mbig])
    idle = wjson("idle2m.json", schedule(1, 1, 1, [[None] * 2000000 + [{"op": "FWD", "micro": 0, "stage": 0}]]))
    case("size", "2M idle slots: check", ["check", idle])
    case("size", "2M idle slots: show", ["show", idle, "--max-steps", "10"])
    owners = wjson("owners_long.json", dict(schedule(2, 2, 2, pipeline(2, 2)["programs"]),
                                           mpipe={"owners": [0] * 500000}))
    case("size", "mpipe owners 500k entries", ["check", owners])
    place = wjson("placement_long.json", schedule(2, 2, 1, pipeline(2)["programs"], placement=[0] * 1000000))
    case("size", "placement of 1M entries", ["check", place])
    # Multi-stream programs (ppsched-streams): one event shared by 100k ops under `any` (every
    # wait may be satisfied by every record before it: the checker keeps views, not copies), 1000
    # communicators of two calls each spanning the rank, 100k ranks, bad values refused.
    def streams(ranks, comms=None, binding="latest"):
        return dict(format="ppsched-streams", version=1, event_binding=binding, communicators=comms or {}, ranks=ranks)
    shared = [{"name": "c%d" % i, "stream": "s%d" % (i % 2), "wait": ["E"], "record": ["E"], "collective": "C"}
              for i in range(100000)]
    sh = wjson("streams_shared_event.json", streams([{"streams": ["s0", "s1"], "ops": shared}] * 2, {"C": [0, 1]}, "any"))
    case("size", "streams: one event shared by 100k ops (any binding): check", ["check", sh], expect=[1],
         stdout_has="collective_order_race")
    span = [{"name": "x%d" % i, "stream": "a", "collective": "K%d" % i} for i in range(1000)]
    span += [{"name": "pad %d" % i, "stream": "a"} for i in range(50000)]
    span += [{"name": "x%d" % i, "stream": "b", "collective": "K%d" % i} for i in range(1000)]
    sp = wjson("streams_long_domains.json", streams([{"streams": ["a", "b"], "ops": span}] * 2,
                                                    {"K%d" % i: [0, 1] for i in range(1000)}))
    case("size", "streams: 1000 communicators whose two calls span 52k ops: check", ["check", sp], expect=[1],
         stdout_has="more collective_order_race")
    many = wjson("streams_30k_ranks.json", streams([{"streams": ["s"], "ops": [{"name": "x", "stream": "s"}]}] * 30000))
    case("size", "streams: 30k ranks of one op: check", ["check", many], expect=[0])
    over = wjson("streams_100k_ranks.json", streams([{"streams": ["s"], "ops": []}] * 100000))
    case("size", "streams: 100k ranks (over the limit): check", ["check", over], expect=[2], stderr_has="at most 32768 ranks")
    for name, doc, needle in [
        ("streams_bad_stream.json", streams([{"streams": ["a"], "ops": [{"name": "x", "stream": "zz"}]}]), "not one of the rank's streams"),
        ("streams_bad_peer.json", streams([{"streams": ["a"], "ops": [{"name": "x", "stream": "a", "send": 99999999999}]}]), "out of range"),
        ("streams_too_many_streams.json", streams([{"streams": ["s%d" % i for i in range(100)], "ops": []}]), "stream names"),
        ("streams_bad_binding.json", dict(streams([{"streams": ["a"], "ops": []}]), event_binding=7), "expected a string"),
        ("streams_no_member.json", streams([{"streams": ["a"], "ops": [{"name": "x", "stream": "a", "collective": "C"}]},
                                           {"streams": ["a"], "ops": []}], {"C": [1]}), "not a member"),
    ]:
        case("files", "check " + name, ["check", wjson(name, doc)], expect=[2], stderr_has=needle)

    # Over the slot limit (2^24): a CSV of empty cells (one byte each, each an idle slot) is
    # refused by counting its cells before holding any (16 MiB of file, not 800 MB of slots).
    commas = path("cells_over_limit.csv")
    with open(commas, "w") as f:
        f.write("," * (1 << 24) + "\n")
    case("size", "a CSV of 2^24 + 1 empty cells (over the slot limit)", ["check", commas], expect=[2],
         expect_class="limit", stderr_has="over the limit of 16777216 slots")
    # Over the size limit: a sparse file, so it costs no disk.
    with open(path("huge.json"), "wb") as f:
        f.truncate(3 << 29)
    case("size", "a 1.5 GiB schedule file (over the limit)", ["check", path("huge.json")], expect=[2],
         stderr_has="limit")
    with open(path("huge_costs.json"), "wb") as f:
        f.truncate(100 << 20)
    case("size", "a 100 MiB cost file (over the limit)", ["costs", path("huge_costs.json")], expect=[2])

    # ---- non-regular files ----
    for name, target in (("zero.json", "/dev/zero"), ("null.json", "/dev/null"), ("urandom.csv", "/dev/urandom"),
                         ("zero_costs.json", "/dev/zero")):
        link = path(name)
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(target, link)
    fifo = path("fifo.json")
    if os.path.lexists(fifo):
        os.remove(fifo)
    os.mkfifo(fifo)
    os.makedirs(path("dir.json"), exist_ok=True)
    for name in ("zero.json", "null.json", "urandom.csv", "fifo.json", "dir.json"):
        case("files", "check " + name, ["check", path(name)], expect=[2])
        case("files", "show " + name, ["show", path(name)], expect=[2])
    case("files", "convert /dev/zero --from json", ["convert", "/dev/zero", "--from", "json", "-o", path("o.json")],
         expect=[2])
    case("files", "costs on /dev/zero", ["costs", path("zero_costs.json")], expect=[2])
    case("files", "simulate --costs /dev/zero", ["simulate", good, "--costs", path("zero_costs.json")], expect=[2])
    case("files", "calibrate a FIFO", ["calibrate", fifo, "-o", path("c.json")], expect=[2])
    case("files", "calibrate /dev/zero", ["calibrate", "/dev/zero", "-o", path("c.json")], expect=[2])
    case("files", "fuzz --mutate a FIFO", ["fuzz", "--mutate", fifo], expect=[2])

    # ---- flags: counts checked against their limits before anything is allocated ----
    flag_cases = [
        ["generate", "1f1b", "--pp", "2147483647", "--micro", "1"],
        ["generate", "1f1b", "--pp", "100000", "--micro", "100000"],
        ["generate", "gpipe", "--pp", "1", "--micro", "2147483647"],
        ["generate", "interleaved-1f1b", "--pp", "4", "--vpp", "1000000", "--micro", "8"],
        ["generate", "interleaved-1f1b", "--pp", "2048", "--vpp", "1024", "--micro", "8"],
        ["generate", "mpipe-transpose", "--pp", "4", "--vpp", "1000000", "--micro", "8"],
        ["generate", "looped-bfs", "--pp", "100000", "--vpp", "100", "--micro", "1"],
        ["generate", "zbv", "--pp", "1000000", "--vpp", "2", "--micro", "1000000"],
        ["generate", "dualpipev", "--pp", "1048576", "--vpp", "2", "--micro", "2097152"],
        ["generate", "zb-h1", "--pp", "30000", "--micro", "30000"],
        ["generate", "1f1b", "--pp", "0", "--micro", "4"],
        ["generate", "1f1b", "--pp", "-1", "--micro", "4"],
        ["generate", "1f1b", "--pp", "abc", "--micro", "4"],
        ["generate", "1f1b", "--pp", "99999999999999999999", "--micro", "4"],
        ["generate", "1f1b", "--pp", "1e3", "--micro", "4"],
        ["generate", "1f1b", "--pp", "4", "--micro", "0"],
        ["check", "--generate", "1f1b", "--pp", "4096", "--micro", "4096"],
        ["check", "--generate", "interleaved-1f1b", "--pp", "2", "--vpp", "1000000", "--micro", "2"],
        ["costs", "--default", "--stages", "3000000"],
        ["costs", "--default", "--stages", "0"],
        ["costs", "--default", "--stages", "-1"],
        ["costs", "--default", "--stages", "2147483648"],
        ["costs", "--default", "--json", "--stages", "1048577"],
        ["fuzz", "--cases", "-5"],
        ["fuzz", "--cases", "0"],
        ["fuzz", "--seconds", "0"],
        ["fuzz", "--seconds", "-1"],
        ["fuzz", "--seconds", "1e300"],
        ["fuzz", "--seconds", "nan"],
        ["fuzz", "--seconds", "inf"],
        ["fuzz", "--cases", "99999999999999999999"],
        ["fuzz", "--cases", "1", "--pp-max", "1000000"],
        ["fuzz", "--cases", "1", "--pp-max", "0"],
        ["show", good, "--max-steps", "-5"],
        ["show", good, "--max-steps", "0"],
        ["show", good, "--width", "-1"],
        ["show", good, "--width", "0"],
        ["show", good, "--width", "2147483647"],
        ["show", good, "--width", "99999999999999"],
        ["check", good, "--memory-budget", "99999999999999999999999"],
        ["check", good, "--memory-budget", "-5"],
        ["check", good, "--memory-budget", "1e300"],
        ["check", good, "--memory-budget", "nan"],
        ["check", good, "--memory-budget", "inf"],
        ["check", good, "--memory-budget", "9223372036854775807"],
        ["check", good, "--memory-budget", "8EiB"],
        ["check", good, "--memory-budget", "16EiB"],
        ["check", good, "--memory-budget", "99999999999PiB"],
        ["check", good, "--activation-bytes", "9e18"],
        ["check", good, "--activation-bytes", "99999999999999999999GiB"],
        ["check", good, "--activation-bytes", "-1"],
        # With a unit, the same figures are over the byte limit (without one, refused for it).
        ["check", good, "--memory-budget", "99999999999999999999999B"],
        ["check", good, "--memory-budget", "1e300B"],
        ["check", good, "--activation-bytes", "9e18B"],
        ["simulate", good, "--memory-budget", "99999999999999999999999"],
        ["simulate", good, "--dp", "nan"],
        ["simulate", good, "--dp", "1e300"],
        ["simulate", good, "--dp", "-8"],
        ["simulate", good, "--dp", "1048576", "--fsdp"],
        ["simulate", good, "--dp", "524288", "--fsdp", "--mesh-order", "pp,dp"],
        ["check", good, "--dp", "524289"],
        ["check", good, "--mesh-order", ""],
        ["check", big_ranks, "--dp", "34", "--fsdp"],
        ["simulate", big_ranks, "--dp", "35"],
        ["convert", good_csv, "--micro", "2147483647", "-o", path("conv.json")],
        ["convert", good_csv, "--micro", "0", "-o", path("conv.json")],
        ["convert", good_csv, "--placement", "0,1,99999999999", "-o", path("conv.json")],
        ["convert", good_csv, "--placement", ",".join(["0"] * 20000), "-o", path("conv.json")],
        ["calibrate", "/nonexistent.json", "--stages", "3000000"],
        ["calibrate", "/nonexistent.json", "--eager-threshold", "1e300"],
    ]
    # Built to exceed a limit checked before anything is allocated: refused by that limit's
    # message (run_corpus.py's class "limit"), never by running out of memory.
    over_limit = [
        ["generate", "1f1b", "--pp", "100000", "--micro", "100000"],
        ["generate", "interleaved-1f1b", "--pp", "4", "--vpp", "1000000", "--micro", "8"],
        ["generate", "interleaved-1f1b", "--pp", "2048", "--vpp", "1024", "--micro", "8"],
        ["generate", "mpipe-transpose", "--pp", "4", "--vpp", "1000000", "--micro", "8"],
        ["generate", "looped-bfs", "--pp", "100000", "--vpp", "100", "--micro", "1"],
        ["generate", "zbv", "--pp", "1000000", "--vpp", "2", "--micro", "1000000"],
        ["generate", "zb-h1", "--pp", "30000", "--micro", "30000"],
        ["check", "--generate", "1f1b", "--pp", "4096", "--micro", "4096"],
        ["check", "--generate", "interleaved-1f1b", "--pp", "2", "--vpp", "1000000", "--micro", "2"],
        ["check", good, "--memory-budget", "99999999999999999999999B"],
        ["check", good, "--memory-budget", "1e300B"],
        ["check", good, "--activation-bytes", "9e18B"],
        ["simulate", good, "--dp", "1048576", "--fsdp"],
        ["check", good, "--dp", "524289"],
        ["simulate", big_ranks, "--dp", "35"],
    ]
    for args in over_limit:
        assert args in flag_cases, args
    for args in flag_cases:
        shown = " ".join(a if len(a) < 40 else a[:20] + "..." for a in args)
        case("flags", shown, args, expect=[1, 2] if args[0] != "show" else [0, 2],
             expect_class="limit" if args in over_limit else None)

    # tune: every flag that takes a number or a file (short searches: --iterations / --seconds).
    short = ["--iterations", "10", "--des-iterations", "5", "--seconds", "5", "--threads", "1"]
    tune_cases = [
        (["tune", "--pp", "2000000", "--micro", "4"] + short, "limit"),
        (["tune", "--pp", "4", "--micro", "2000000"] + short, "limit"),
        (["tune", "--pp", "4096", "--micro", "4096"] + short, "limit"),
        (["tune", "--pp", "2", "--micro", "4", "--vpp", "1000"] + short, None),
        (["tune", "--pp", "2", "--micro", "4", "--dp", "2000000"] + short, None),
        (["tune", "--pp", "2", "--micro", "4", "--memory-budget", "99999999999999999999999B"] + short, "limit"),
        (["tune", "--pp", "2", "--micro", "4", "--memory-budget", "99999999999999999999999"] + short, "malformed"),
        (["tune", "--pp", "2", "--micro", "4", "--memory-budget", "nan"] + short, None),
        (["tune", "--pp", "2", "--micro", "4", "--seconds", "1e300"], None),
        (["tune", "--pp", "2", "--micro", "4", "--iterations", "99999999999999999999"], None),
        (["tune", "--pp", "2", "--micro", "4", "--costs", "/dev/zero"] + short, None),
        (["tune", "--pp", "2", "--micro", "4", "--costs", path("huge_costs.json")] + short, "limit"),
        (["tune", "--pp", "2", "--micro", "4", "--model", "/dev/urandom"] + short, None),
        (["tune", "--pp", "2", "--micro", "4", "--partition-layouts", "0"] + short, None),
        (["tune", "--pp", "2", "--micro", "4", "--pareto", "--pareto-searches", "100000"] + short, None),
        (["tune", "--pp", "2", "--micro", "4", "--trace", "/nonexistent/dir/t.json"] + short, None),
    ]
    for args, cls in tune_cases:
        case("flags", "tune " + " ".join(args[1:7]), args, expect=[0, 1, 2], expect_class=cls)

    # Flags that do not apply are refused (exit 2, naming the flag), never ignored.
    good_sched = wjson("flags_good.json", pipeline(2, 2))
    for args, needle in [
            (["generate", "1f1b", "--pp", "4", "--micro", "8", "--dxdw-split"], "--dxdw-split does not apply"),
            (["generate", "1f1b", "--pp", "4", "--micro", "8", "--less-memory"], "--less-memory does not apply"),
            (["generate", "zbv", "--pp", "4", "--vpp", "2", "--micro", "8", "--overflow", "min"], "--overflow does not apply"),
            (["generate", "gpipe", "--pp", "4", "--micro", "8", "--tower", "trainable"], "--tower does not apply"),
            (["generate", "1f1b", "--pp", "4", "--micro", "8", "--owner-backward"], "--owner-backward does not apply"),
            (["check", good_sched, "--pp", "8"], "--pp requires --generate"),
            (["simulate", good_sched, "--micro", "3"], "--micro requires --generate"),
            (["simulate", good_sched, "--vpp", "2"], "--vpp requires --generate")]:
        case("flags", " ".join(args[:2] + args[-2:]) + " (does not apply)", args, expect=[2], stderr_has=needle)

    # ---- arithmetic: bytes and times that would wrap or go non-finite ----
    def costs(**sections):
        d = {"format": "ppsched-costs", "version": 1,
             "compute": {"FWD": 1.0, "BWD": 2.0}}
        for k, v in sections.items():
            if isinstance(v, dict) and isinstance(d.get(k), dict):
                d[k].update(v)
            else:
                d[k] = v
        return d

    arith = {
        "capacity_2e63": costs(memory={"capacity_bytes": 9223372036854775808}),
        "capacity_2e64": costs(memory={"capacity_bytes": 18446744073709551616}),
        "capacity_1e19": costs(memory={"capacity_bytes": 1e19}),
        "capacity_1e300": costs(memory={"capacity_bytes": 1e300}),
        "capacity_max_int64": costs(memory={"capacity_bytes": 9223372036854775807}),
        "activation_9e18": costs(memory={"activation_bytes": 9e18}),
        "activation_1e300": costs(memory={"activation_bytes": 1e300}),
        "tower_graph_1e300": costs(memory={"tower_graph_bytes": 1e300}),
        "bytes_9e18": costs(bytes={"activation": 9e18}),
        "bytes_max_int64": costs(bytes={"activation": 9223372036854775807, "gradient": 9223372036854775807}),
        "bytes_1e300": costs(bytes={"activation": 1e300}),
        "bytes_2e64": costs(bytes={"activation": 18446744073709551616}),
        "meta_9e18": costs(bytes={"meta": 9e18}),
        "tower_params_9e18": costs(bytes={"tower_params": 9e18, "tied_params": 9e18}),
        "fwd_1e308": costs(compute={"FWD": 1e308, "BWD": 1e308}),
        "fwd_1_7e308": costs(compute={"FWD": 1.7e308, "BWD": 1.7e308, "BWD_INPUT": 1.7e308, "BWD_WEIGHT": 1.7e308}),
        "fwd_1e300": costs(compute={"FWD": 1e300, "BWD": 1e300}),
        "fwd_1e20": costs(compute={"FWD": 1e20, "BWD": 1e20}),
        "fwd_tiny": costs(compute={"FWD": 1e-320, "BWD": 1e-320}),
        "data_load_1e308": costs(compute={"DATA_LOAD": 1e308}),
        "latency_1e308": costs(link={"latency_ms": 1e308, "bandwidth_GBps": 1.0}),
        "bandwidth_tiny": costs(link={"latency_ms": 0.0, "bandwidth_GBps": 1e-300}),
        "bandwidth_huge": costs(link={"latency_ms": 0.0, "bandwidth_GBps": 1e308}),
        "ranks_per_node_2e40": costs(link={"intra_node": {"latency_ms": 0.0, "bandwidth_GBps": 1.0},
                                           "inter_node": {"latency_ms": 0.0, "bandwidth_GBps": 1.0},
                                           "ranks_per_node": 1099511627776}),
        "eager_1e300": costs(protocol={"eager_threshold_bytes": 1e300}),
        "eager_9e18": costs(protocol={"eager_threshold_bytes": 9e18}),
        "overlap_1e300": costs(overlap_efficiency=1e300),
        "per_micro_huge": costs(compute={"FWD": [[1e308, 1e308], [1e308, 1e308]], "BWD": 1.0}),
        "pair_rank_huge": costs(link={"latency_ms": 0.0, "bandwidth_GBps": 1.0,
                                      "pairs": [{"src": 0, "dst": 2147483647, "latency_ms": 1.0,
                                                 "bandwidth_GBps": 1.0}]}),
        "pair_rank_2e40": costs(link={"latency_ms": 0.0, "bandwidth_GBps": 1.0,
                                      "pairs": [{"src": 0, "dst": 1099511627776, "latency_ms": 1.0,
                                                 "bandwidth_GBps": 1.0}]}),
    }
    for name, d in arith.items():
        f = wjson("costs_%s.json" % name, d)
        case("arithmetic", "costs " + name, ["costs", f])
        case("arithmetic", "simulate --costs " + name, ["simulate", good, "--costs", f])
        case("arithmetic", "check --costs " + name, ["check", good, "--costs", f])
    over = write("costs_1e432.json", '{"format": "ppsched-costs", "version": 1, "compute": {"FWD": 1E432, "BWD": 1}}')
    case("arithmetic", "cost number 1E432", ["costs", over], expect=[2])
    over_s = write("sched_1e432.json", json.dumps(pipeline(2))[:-1] + ', "x-big": 1E432}')
    case("arithmetic", "schedule number 1E432", ["check", over_s], expect=[2], stderr_no="json.exception")
    micro_big = write("micro_2e64.json", json.dumps(schedule(1, 1, 1, [[]]), separators=(",", ":")).replace('"micro_batches":1',
                                                                                    '"micro_batches":18446744073709551616'))
    case("arithmetic", "micro_batches 2^64", ["check", micro_big], expect=[2])
    shape = wjson("shape_huge.json", schedule(2, 2, 1, [[{"op": "FWD", "micro": 0, "stage": 0},
                                                         {"op": "FWD_SEND", "micro": 0, "stage": 0,
                                                          "tensors": [{"shape": [9223372036854775807, 4],
                                                                       "dtype": "bf16"}]}],
                                                        [{"op": "FWD_RECV", "micro": 0, "stage": 1,
                                                          "tensors": [{"shape": [9223372036854775807, 4],
                                                                       "dtype": "bf16"}]},
                                                         {"op": "FWD", "micro": 0, "stage": 1}]]))
    case("arithmetic", "tensor shape overflowing bytes: check", ["check", shape])
    case("arithmetic", "tensor shape overflowing bytes: simulate", ["simulate", shape])

    # ---- messages: bounded quotes, no library tags, BOM and blank lines ----
    long_cell = write("long_cell.csv", "0F0," + "X" * 1000000 + "\n")
    case("messages", "1 MB CSV cell", ["check", long_cell], expect=[2], max_stderr=1500)
    long_action = wjson("long_action.json", schedule(1, 1, 1, [["0F0" + "x" * 170000]]))
    case("messages", "170 KB action string", ["check", long_action], expect=[2], max_stderr=1500)
    long_key = wjson("long_key.json", dict(schedule(1, 1, 1, [[]]), **{"k" * 1000000: 1}))
    case("messages", "1 MB unknown key", ["check", long_key], expect=[2], max_stderr=1500)
    long_op = wjson("long_op.json", schedule(1, 1, 1, [[{"op": "F" * 1000000, "micro": 0, "stage": 0}]]))
    case("messages", "1 MB op name", ["check", long_op], expect=[2], max_stderr=1500)
    long_fmt = wjson("long_format.json", dict(schedule(1, 1, 1, [[]]), format="p" * 1000000))
    case("messages", "1 MB format tag", ["check", long_fmt], expect=[2], max_stderr=1500)
    long_place = wjson("long_placement.json", schedule(1, 1, 1, [[]], placement="z" * 1000000))
    case("messages", "1 MB placement name", ["check", long_place], expect=[2], max_stderr=1500)
    long_dtype = wjson("long_dtype.json", schedule(2, 2, 1, [[{"op": "FWD_SEND", "micro": 0, "stage": 0,
                                                               "tensors": [{"shape": [1], "dtype": "d" * 1000000}]}],
                                                             [{"op": "FWD_RECV", "micro": 0, "stage": 1}]]))
    case("messages", "1 MB dtype", ["check", long_dtype], expect=[2], max_stderr=1500)
    junk = write("long_junk.json", '{"format": "ppsched-schedule", "version": 1, "x": ' + "@" * 1000000 + "}")
    case("messages", "1 MB of junk after a key", ["check", junk], expect=[2], max_stderr=1500)
    long_str_err = write("long_bad_string.json", '{"format": "' + "a" * 1000000 + '\x01"}')
    case("messages", "1 MB string with a control character", ["check", long_str_err], expect=[2], max_stderr=1500)
    long_cost_key = wjson("costs_long_key.json", dict(costs(), **{"q" * 1000000: 1}))
    case("messages", "cost file: 1 MB unknown key", ["costs", long_cost_key], expect=[2], max_stderr=1500)
    bom_json = write("bom.json", "\ufeff" + json.dumps(pipeline(2)))
    case("messages", "JSON with a byte-order mark", ["check", bom_json], expect=[0])
    bom_csv = write("bom.csv", "\ufeff0F0,0B0\n")
    case("messages", "CSV with a byte-order mark", ["check", bom_csv], expect=[0])
    blank_json = write("blank_lines.json", "\n\n" + json.dumps(pipeline(2), indent=2).replace("\n", "\n\n") + "\n\n\n")
    case("messages", "JSON with blank lines", ["check", blank_json], expect=[0])
    blank_csv = write("blank_lines.csv", "0F0,0B0\n\n\n")
    # A blank CSV row is an idle rank, as PyTorch's loader reads it (README "Limits").
    case("messages", "CSV with trailing blank lines", ["check", blank_csv], expect=[0, 1])
    crlf = write("crlf.csv", "0F0,0F1,0B0,0B1\r\n1F0,1F1,1B0,1B1\r\n")
    case("messages", "CSV with CRLF", ["check", crlf], expect=[0])
    case("messages", "a 5000-character path", ["check", "/tmp/" + "d" * 5000 + ".json"], expect=[2], max_stderr=1500)
    case("messages", "an unknown family of 100 KB", ["generate", "f" * 100000, "--pp", "2", "--micro", "2"],
         expect=[2], max_stderr=1500)

    # ---- malformed input ----
    malformed = {
        "deep_arrays.json": "[" * 200000 + "]" * 200000,
        "deep_objects.json": '{"a":' * 100000 + "1" + "}" * 100000,
        "deep_annotation.json": json.dumps(schedule(1, 1, 1, [[]]))[:-1] + ', "x-deep": ' + "[" * 100000 + "]" * 100000 + "}",
        "nul.json": json.dumps(pipeline(2))[:50] + "\x00" + json.dumps(pipeline(2))[50:],
        "bad_utf8.json": None,
        "truncated.json": json.dumps(pipeline(2))[:-7],
        "empty.json": "",
        "only_bom.json": "\ufeff",
        "whitespace.json": "   \n\n  ",
        "two_values.json": json.dumps(pipeline(2)) + json.dumps(pipeline(2)),
        "scalar.json": "42",
        "dup_annotation.json": '{"comment": 1, "comment": 2}',
        "many_keys.json": "{" + ",".join('"x-%d": %d' % (k, k) for k in range(200000)) + "}",
        "dup_deep.json": json.dumps(schedule(1, 1, 1, [[]]))[:-1] + ', "x-a": {"b": {"c": 1, "c": 2}}}',
        "programs_object.json": json.dumps(schedule(1, 1, 1, {})),
        "negative_ranks.json": json.dumps(schedule(-5, 1, 1, [])),
        "zero_everything.json": json.dumps(schedule(0, 0, 0, [])),
        "int_max_ranks.json": json.dumps(schedule(2147483647, 1, 1, [])),
        "int_overflow_ranks.json": json.dumps(schedule(1, 1, 1, [[]]), separators=(",", ":")).replace('"ranks":1', '"ranks":2147483648'),
        "float_stage.json": json.dumps(schedule(1, 1, 1, [[{"op": "FWD", "micro": 0, "stage": 0.5}]])),
        "huge_peer.json": json.dumps(schedule(2, 2, 1, [[{"op": "FWD_SEND", "micro": 0, "stage": 0, "peer": 2147483647}],
                                                         [{"op": "FWD_RECV", "micro": 0, "stage": 1}]])),
        "group_huge_rank.json": json.dumps(schedule(1, 1, 1, [[{"op": "ALL_REDUCE", "group": [0, 2147483647]}]])),
        "group_dups.json": json.dumps(schedule(2, 2, 1, [[{"op": "ALL_REDUCE", "group": [0] * 100000 + [1]}],
                                                          [{"op": "ALL_REDUCE", "group": [0, 1]}]])),
        "recursive_composite.json": json.dumps(schedule(1, 1, 1, [["(" * 10000 + "0F0" + ")" * 10000]])),
        "composite_many.json": json.dumps(schedule(1, 1, 1, [[{"op": "BATCH_SEND_RECV",
                                                               "sub_steps": ["0F0"] * 200000}]])),
        "action_huge_micro.json": json.dumps(schedule(1, 1, 1, [["0F99999999999999999999"]])),
        "action_huge_stage.json": json.dumps(schedule(1, 1, 1, [["2147483648F0"]])),
        "owner_huge.json": json.dumps(dict(schedule(2, 2, 2, pipeline(2, 2)["programs"]),
                                           mpipe={"owners": [2147483647, 0]})),
    }
    for name, text in malformed.items():
        if text is None:
            with open(path(name), "wb") as f:
                f.write(b'{"format": "ppsched-schedule", "name": "\xff\xfe\xc3"}')
        else:
            write(name, text)
        case("malformed", name, ["check", path(name)], expect=[1, 2])
    csv_bad = {
        "csv_huge_stage.csv": "99999999999999999999F0\n",
        "csv_nul.csv": "0F0,\x000B0\n",
        "csv_many_commas.csv": "," * 2000000 + "0F0\n",
        "csv_deep_composite.csv": "(" * 100000 + "0F0" + ")" * 100000 + "\n",
        "csv_many_rows_empty.csv": "\n" * 200000 + "0F0,0B0\n",
        "csv_binary.csv": None,
        "csv_huge_micro.csv": "0F2147483647,0B2147483647\n",
        "csv_max_minus.csv": "0F-1\n",
    }
    for name, text in csv_bad.items():
        if text is None:
            with open(path(name), "wb") as f:
                f.write(bytes(range(256)) * 100)
        else:
            write(name, text)
        # 200,000 blank rows are 200,000 idle ranks: a valid, if odd, schedule.
        case("malformed", name, ["check", path(name)], expect=[0, 1, 2] if "empty" in name else [1, 2])
        case("malformed", name + " (simulate)", ["simulate", path(name)], expect=[0, 1, 2])

    # ---- model files, Hugging Face configs and layouts (issue: plan a real model) ----
    def model(**kw):
        d = {"format": "ppsched-model", "version": 1}
        d.update(kw)
        return d

    def layer(**kw):
        d = {"params": 1000, "fwd_flops": 1e9, "activation_bytes": 1000, "output_bytes": 100}
        d.update(kw)
        return d

    llama = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256}
    model_cases = {
        "hf_layers_1e9.json": (dict(llama, num_hidden_layers=1000000000), "num_hidden_layers"),
        "hf_layers_2e64.json": (None, "num_hidden_layers"),
        "hf_hidden_2e60.json": (dict(llama, hidden_size=2 ** 60), "hidden_size"),
        "hf_negative_heads.json": (dict(llama, num_attention_heads=-32), "num_attention_heads"),
        "hf_vocab_float.json": (dict(llama, vocab_size=1.5), "vocab_size"),
        "hf_unknown_type.json": (dict(llama, model_type="x" * 100000), "model_type"),
        "hf_experts_huge.json": (dict(llama, model_type="qwen3_moe", num_experts=2 ** 40, num_experts_per_tok=8,
                                      moe_intermediate_size=768), "num_experts"),
        # Every dimension at its limit: the figures leave the range and are refused, located.
        "hf_all_at_limit.json": (dict(llama, hidden_size=2 ** 24, intermediate_size=2 ** 24, num_attention_heads=2 ** 24,
                                      num_key_value_heads=2 ** 24, vocab_size=2 ** 28), "too large"),
        "model_layers_count_1e9.json": (model(layers=[layer(count=1000000000)]), "layers[0].count"),
        "model_layers_200k.json": (model(layers=[layer()] * 200000), "layers"),
        "model_flops_1e300.json": (model(layers=[layer(fwd_flops=1e300)]), "layers[0].fwd_flops"),
        "model_params_negative.json": (model(layers=[layer(params=-1)]), "layers[0].params"),
        "model_activation_9e18.json": (model(layers=[layer(activation_bytes=9e18)]), "layers[0].activation_bytes"),
        "model_output_2e64.json": (model(layers=[layer(output_bytes=2 ** 64)]), "layers[0].output_bytes"),
        "model_unknown_key.json": (model(layers=[layer()], trainng={}), "trainng"),
        "model_unknown_layer_key.json": (model(layers=[layer(flops=1)]), "layers[0].flops"),
        "model_seq_len_1e30.json": (model(hf_config=llama, training={"seq_len": 1e30}), "training.seq_len"),
        "model_micro_batch_2e40.json": (model(hf_config=llama, training={"micro_batch_size": 2 ** 40}),
                                        "training.micro_batch_size"),
        "model_mfu_zero.json": (model(layers=[layer()], device={"mfu": 0}), "device.mfu"),
        "model_flops_per_s_tiny.json": (model(layers=[layer()], device={"flops_per_s": 1e-300}), "device.flops_per_s"),
        "model_link_bad.json": (model(layers=[layer(count=8)], link={"latency_ms": -1}), "link.latency_ms"),
        "model_hf_path_dev.json": (model(hf_config="/dev/zero"), "hf_config"),
        "model_hf_path_missing.json": (model(hf_config="/nonexistent/config.json"), "hf_config"),
        "model_layout_huge_repeat.json": (model(layers=[layer(count=8)], layout="Et*99999999999|L"), "layout"),
        "model_fitted_zero_rate.json": (model(layers=[layer(count=8)], device={"fitted": {"FWD": {"flops_per_s": 0}}}),
                                        "device.fitted.FWD.flops_per_s"),
        "model_fitted_negative_overhead.json": (model(layers=[layer(count=8)], device={
            "fitted": {"BWD_INPUT": {"flops_per_s": 1e12, "overhead_ms": -1}}}), "device.fitted.BWD_INPUT.overhead_ms"),
        "model_fitted_unknown_kind.json": (model(layers=[layer(count=8)], device={"fitted": {"BWD": {"flops_per_s": 1e12}}}),
                                           "device.fitted.BWD"),
        "model_fitted_overhead_1e300.json": (model(layers=[layer(count=8)], device={
            "fitted": {"FWD": {"flops_per_s": 1e12, "overhead_ms": 1e300}}}), "device.fitted.FWD.overhead_ms"),
    }
    for name, (obj, located) in model_cases.items():
        if obj is None:
            write(name, json.dumps(llama)[:-1] + ', "num_hidden_layers": 18446744073709551616}')
        else:
            wjson(name, obj)
        case("models", "model " + name, ["model", path(name), "--pp", "2"], expect=[2], stderr_has=located,
             max_stderr=1500)
        case("models", "simulate --model " + name,
             ["simulate", "--generate", "1f1b", "--pp", "2", "--micro", "2", "--model", path(name)], expect=[2],
             stderr_has=located, max_stderr=1500)
    good_model = wjson("model_good.json", model(layers=[layer(count=8)]))
    hf_good = wjson("hf_llama.json", llama)
    for text in ["t" * 100000, "Et*1000000000|L", "E(t|)*100000000L", "((t|)*4)*4", "1," * 50000 + "1",
                 "99999999999999999999,1", "E" + "|" * 100000 + "L", "-1,9"]:
        case("models", "layout " + text[:30], ["model", good_model, "--pp", "2", "--layout", text], expect=[2],
             max_stderr=1500)
    case("models", "2^20 stages of a 32-layer model", ["model", hf_good, "--pp", "1048576"], expect=[2], max_stderr=1500)
    case("models", "per-micro sequence lengths x stages over the limit",
         ["model", wjson("model_seq_list.json", model(hf_config=llama, training={"seq_len": [128] * 65536})),
          "--pp", "64", "--layout", ",".join(["1"] * 32 + ["0"] * 32)], expect=[2], max_stderr=1500)
    tune_model = ["tune", "--pp", "4", "--micro", "8", "--model", hf_good, "--seconds", "1", "-q"]
    for extra, why in [(["--partition", "search", "--partition-layouts", "0"], "no layouts"),
                       (["--partition", "search", "--partition-layouts", "99999999999999"], "layouts over the range"),
                       (["--partition", "sideways"], "an unknown partition mode"),
                       (["--partition", "search", "--vpp", "64"], "more stages than the model has layers"),
                       (["--family", "x" * 100000], "a 100 kB family name"),
                       (["--partition", "search", "--layout-out", "/nonexistent/dir/l.txt"], "an unwritable --layout-out")]:
        case("models", "tune " + why, tune_model + extra, expect=[2], max_stderr=1500)
    case("models", "--seq-len at its limit", ["model", hf_good, "--pp", "4", "--seq-len", str(2 ** 24)], expect=[0, 2],
         max_stderr=1500)
    case("models", "a model flag without --model", ["simulate", good, "--seq-len", "4096"], expect=[2])
    case("models", "a model flag a listed model cannot take", ["model", good_model, "--seq-len", "4096"], expect=[2],
         stderr_has="does not apply")

    # ---- outputs ----
    victim = wjson("victim.json", pipeline(2, 2))
    case("outputs", "simulate X.json --trace X.json", ["simulate", victim, "--trace", victim], expect=[2],
         unchanged=victim)
    case("outputs", "simulate X.json --svg X.json", ["simulate", victim, "--svg", victim], expect=[2],
         unchanged=victim)
    case("outputs", "convert X.json -o X.json", ["convert", victim, "-o", victim], expect=[2], unchanged=victim)
    cost_victim = wjson("costs_victim.json", costs())
    case("outputs", "calibrate -o over its trace", ["calibrate", cost_victim, "-o", cost_victim], expect=[2],
         unchanged=cost_victim)
    case("outputs", "simulate with an unwritable --trace keeps the result",
         ["simulate", good, "--trace", "/nonexistent/dir/t.json"], expect=[2], stdout_has="makespan")
    case("outputs", "simulate with an unwritable --svg keeps the result",
         ["simulate", good, "--svg", "/nonexistent/dir/t.svg"], expect=[2], stdout_has="makespan")
    case("outputs", "generate to /dev/full", ["generate", "1f1b", "--pp", "4", "--micro", "8"], stdout="/dev/full",
         expect=[2])
    case("outputs", "generate -o /dev/full", ["generate", "1f1b", "--pp", "4", "--micro", "8", "-o", "/dev/full"],
         expect=[2])
    case("outputs", "check to /dev/full", ["check", good], stdout="/dev/full", expect=[2])
    case("outputs", "check --json to /dev/full", ["check", good, "--json"], stdout="/dev/full", expect=[2])
    case("outputs", "simulate to /dev/full", ["simulate", good], stdout="/dev/full", expect=[2])
    case("outputs", "show to /dev/full", ["show", good], stdout="/dev/full", expect=[2])
    case("outputs", "costs --default to /dev/full", ["costs", "--default"], stdout="/dev/full", expect=[2])
    case("outputs", "costs --template to /dev/full", ["costs", "--template"], stdout="/dev/full", expect=[2])
    case("outputs", "generate --list to /dev/full", ["generate", "--list"], stdout="/dev/full", expect=[2])
    case("outputs", "compare to /dev/full", ["compare", good, good_csv], stdout="/dev/full", expect=[2])
    case("outputs", "--help to /dev/full", ["--help"], stdout="/dev/full", expect=[0, 2])
    case("outputs", "calibrate with an unwritable -o keeps the fit",
         ["calibrate", path("sim.trace.json"), "-o", "/nonexistent/dir/c.json"], expect=[2], stdout_has="stage",
         before=["simulate", good, "--trace", path("sim.trace.json")])
    case("outputs", "convert -o a directory", ["convert", good, "-o", path("dir.json")], expect=[2])
    case("outputs", "--trace-per-rank into a file", ["simulate", good, "--trace-per-rank", good_csv], expect=[2],
         stdout_has="makespan")

    # ---- every flag that takes a number or a file, of every command (read from its --help) ----
    if exe:
        every_flag_cases(exe, case, path, good, good_csv, good_model)

    with open(path("cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
    print("%d cases in %s" % (len(cases), out))


if __name__ == "__main__":
    main()
