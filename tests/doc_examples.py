#!/usr/bin/env python3
"""The command examples of README.md and docs/*.md are what the build prints.

    doc_examples.py PPSCHED SOURCE_ROOT [--verbose] [--page FILE]...

Each page runs in a scratch directory of its own (a fresh temporary directory, removed at the
end), which holds `tests` (a link to SOURCE_ROOT/tests, so the examples' tests/data/... paths
read the repository's files) and a `ppsched` on PATH (the built PPSCHED). A file an example
writes lands there, never in the source tree. The page's fenced blocks are taken in order:

- ```console whose first line starts with `$ ppsched `: the command runs (split as a shell
  would, without a shell) and its stdout must equal the rest of the block, line for line
  (trailing blanks ignored). Excerpts: a line `...` alone stands for any number of lines, and
  `[...]` inside a line for any text. A figure published this way fails this test the day it
  stops being true. Every ```console block must be such an example.
- ```sh or ```bash in which every command line (after joining `\` continuations, leaving out
  comments and blank lines) starts with `ppsched `: each line runs in order, through bash;
  a signal or running past 300 s fails. Output is not compared.
  A block with any other command (tools/..., torchrun, srun, meson, ...) is not run: those
  need a build, libtorch or several processes (tools/test and the exec tests run them).
- Exit status: a run command must exit 0 unless its block says otherwise in its info string,
  ```console exit=1 or ```sh exit=1 (every command of the block: 1 the command found problems,
  e.g. `check` of a broken schedule, 2 bad input or usage; the CLI's codes). An example that
  shows violations says so; one that stops working exits otherwise and fails.
- ```LANG file=NAME (e.g. ```csv file=order.csv): the block's text is written to NAME in the
  scratch directory, for the examples after it (the walk-through's hand-written order).
- Any other block (```text, ```json, ```python, ...) is an illustration and is not run.

Links: every relative link of a page ([text](path) or [text](path#anchor)) must name a file
of the repository, and its anchor a heading of that page (GitHub's slugs).

Markdown tables that a page marks with `<!-- checked by tests/doc_examples.py: NAME -->` are
recomputed by the function of that name below and compared cell by cell.

--verbose lists every example run and every block not run. --page FILE (repeatable) checks those
markdown files instead of README.md and docs/*.md (tests/doc_examples_self_test.py uses it).
"""
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

EXE, ROOT = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
VERBOSE = "--verbose" in sys.argv[3:]
PAGES = [os.path.abspath(sys.argv[i + 1]) for i in range(3, len(sys.argv) - 1) if sys.argv[i] == "--page"]
# ppsched's runs: no timeout of their own (the shell commands of the pages have 300 s each);
# relative paths (the tables' tests/data/...) from the repository root unless a run says otherwise.
cli = Cli(EXE, timeout=None, cwd=ROOT)
checked = 0
not_run = 0
GiB = 2 ** 30
LLAMA = "tests/data/models/hf/llama3_8b.json"


def blocks(text):
    """(line number, info string, lines) of each fenced block."""
    out, cur, start, info = [], None, 0, ""
    for n, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            if cur is None:
                cur, start, info = [], n, line[3:].strip()
            else:
                out.append((start, info, cur))
                cur = None
        elif cur is not None:
            cur.append(line)
    return out


def exit_failure(where, command, p, want_exit):
    """The failure of a command that exited otherwise than its block says, with what it said:
    the last line of stderr (an error), else the first of stdout (a verdict)."""
    said = p.stderr.strip().split("\n")[-1] if p.stderr.strip() else p.stdout.strip().split("\n")[0]
    return "%s: `%s` exits %d, the block says %d%s: %s" % (where, command, p.returncode, want_exit,
                                                          "" if want_exit else " (no exit=N)", said)


def excerpt_matches(want, got):
    """Whether got (lines) is what want shows: `...` alone is any run of lines, `[...]` in a
    line any text."""
    def line_ok(w, g):
        if "[...]" not in w:
            return w == g
        return re.fullmatch(".*".join(re.escape(part) for part in w.split("[...]")), g, re.S) is not None

    memo = {}

    def match(i, j):
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(want):
            r = j == len(got)
        elif want[i] == "...":
            r = any(match(i + 1, k) for k in range(j, len(got) + 1))
        else:
            r = j < len(got) and line_ok(want[i], got[j]) and match(i + 1, j + 1)
        memo[(i, j)] = r
        return r
    return match(0, 0)


def command_lines(lines):
    """The commands of a shell block: `\\` continuations joined, comments and blanks left out."""
    out, cur = [], ""
    for line in lines:
        if cur == "" and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    if cur:
        out.append(cur)
    return out


def slug(heading):
    """GitHub's anchor of a heading."""
    h = heading.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path):
    text = open(path, encoding="utf-8").read()
    out, fence = set(), False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            out.add(slug(line.lstrip("#")))
    return out


def check_links(page, rel, text):
    global checked
    body = re.sub(r"```.*?```", "", text, flags=re.S)
    for m in re.finditer(r"\]\(([^)\s]+)\)", body):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        checked += 1
        if not os.path.exists(full):
            cli.fail("%s: link to %s: no such file" % (rel, target))
        elif anchor and full.endswith(".md") and anchor not in anchors(full):
            cli.fail("%s: link to %s: no heading with that anchor in %s" % (rel, target, os.path.relpath(full, ROOT)))


def tables(text):
    """{name: (line number, header, rows)} of the tables marked for checking."""
    out = {}
    lines = text.split("\n")
    for n, line in enumerate(lines):
        m = re.match(r"<!-- checked by tests/doc_examples.py: (\w+) -->", line.strip())
        if not m:
            continue
        k = n + 1
        while k < len(lines) and not lines[k].startswith("|"):
            k += 1
        rows = []
        while k < len(lines) and lines[k].startswith("|"):
            rows.append([c.strip() for c in lines[k].strip().strip("|").split("|")])
            k += 1
        out[m.group(1)] = (n + 1, rows[0], rows[2:])
    return out


# ---- the tables' recomputations ----

FAMILIES = {"1F1B": ["1f1b"], "interleaved 1F1B (V=2)": ["interleaved-1f1b", "--vpp", "2"],
            "ZB-V": ["zbv", "--vpp", "2"], "DualPipeV": ["dualpipev", "--vpp", "2"]}
SETTINGS = {"FlashAttention on": [], "distributed optimizer": ["--distributed-optimizer"],
            "FlashAttention off": ["--flash-attention", "off"],
            "FlashAttention off, selective recomputation": ["--flash-attention", "off", "--recompute", "selective"],
            "full recomputation": ["--recompute", "full"]}


def llama_fit(header, row):
    """Llama-3-8B, 4096 tokens, PP 4 x DP 8, 32 micro-batches, 80 GiB: makespan and peaks."""
    fam = FAMILIES[row[0]]
    settings = SETTINGS[row[1]]
    p = cli.run("simulate", "--generate", fam[0], "--pp", "4", "--micro", "32", *fam[1:],
                "--model", LLAMA, "--dp", "8", "--memory-budget", "80GiB", "--json", *settings, expect=None)
    d = json.loads(p.stdout)
    per = d["memory"]["per_rank"]
    peaks = " / ".join("%.2f" % (r["peak_bytes"] / GiB) for r in per)
    res = " / ".join("%.2f" % (r["resident_bytes"] / GiB) for r in per)
    act = " / ".join("%.2f" % (r["activations_peak_bytes"] / GiB) for r in per)
    fits = "yes" if p.returncode == 0 else "no (exit %d)" % p.returncode
    return [row[0], row[1], "%.1f" % d["makespan_ms"], res, act, peaks, fits]


def megatron_interleave(header, row):
    """Rank 0's exact activation peak of interleaved 1F1B over 1F1B's (P in flight) against
    Megatron's 1 + (P-1)/(P V) (scaled by min(1, M/P)), on the default model."""
    P, V, M = int(row[0]), int(row[1]), int(row[2])
    g = row[3]

    def act0(args):
        p = cli.run("simulate", "--generate", *args, "--json", expect=None)
        return json.loads(p.stdout)["memory"]["per_rank"][0]["activations_peak_bytes"]

    base = act0(["1f1b", "--pp", str(P), "--micro", str(P)])
    extra = [] if g == "default" else ["--group-size", g]
    il = act0(["interleaved-1f1b", "--pp", str(P), "--vpp", str(V), "--micro", str(M)] + extra)
    meg = (1 + (P - 1) / (P * V)) * min(1.0, M / P)
    exact = il / base
    verdict = "equal" if abs(exact - meg) < 5e-4 else ("over by %.0f%%" % (100 * (meg / exact - 1)) if meg > exact
                                                        else "under by %.0f%%" % (100 * (1 - meg / exact)))
    return [row[0], row[1], row[2], g, "%.4f" % exact, "%.4f" % meg, verdict]


def megatron_first_stage(header, row):
    """Megatron's activation estimate (theoretical_memory_usage.py, restated: s b h (18 + 4 f / h)
    per layer x L layers, + 8 s b P + s b h P for the embedding, x the interleaving penalty)
    beside ppsched's exact peak of rank 0, Llama-3-8B at 4096 tokens, PP 4, 32 micro-batches."""
    fam = FAMILIES[row[0]]
    cfg = json.load(open(os.path.join(ROOT, LLAMA)))
    s, b, h, f, L, P = 4096, 1, cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], 4
    meg = s * b * h * (18 + 4 * f / h) * L + 8 * s * b * P + s * b * h * P
    V = int(fam[2]) if "--vpp" in fam else None
    if V:
        meg *= 1 + (P - 1) / (P * V)
    p = cli.run("simulate", "--generate", fam[0], "--pp", "4", "--micro", "32", *fam[1:], "--model", LLAMA, "--json",
                expect=None)
    per = json.loads(p.stdout)["memory"]["per_rank"]
    exact0 = per[0]["activations_peak_bytes"]
    exact_max = max(r["activations_peak_bytes"] for r in per)
    has_formula = fam[0] in ("1f1b", "interleaved-1f1b")  # Megatron's estimator knows these two
    return [row[0], "%.2f" % (exact0 / GiB), "%.2f" % (exact_max / GiB),
            "%.2f" % (meg / GiB) if has_formula else "no formula"]


MODELS = {"GPT-2": "gpt2", "Llama-3-8B": "llama3_8b", "Llama-3-70B": "llama3_70b", "Qwen3-30B-A3B": "qwen3_30b_a3b"}


def partition_gain(header, row):
    """tune --partition search against torchtitan's even split (deterministic: --seconds 0 and
    bounded iterations)."""
    model = "tests/data/models/hf/%s.json" % MODELS[row[0]]
    args = ["tune", "--model", model, "--partition", "search", "--seconds", "0", "--iterations", "2000",
            "--des-iterations", "50", "-q", "--json"] + shlex.split(row[1].strip("`"))
    d = json.loads(cli.run(*args, expect=None).stdout)
    p = d["partition"]
    return [row[0], row[1], ",".join(map(str, p["even_layout"])), "%.1f" % p["even_makespan_ms"],
            ",".join(map(str, d["layout"])), "%.1f" % d["makespan_ms"], d["best"], "%.1f%%" % (100 * p["gain_over_even"])]


PT_DIR = "tests/data/peers/pytorch_partition"
PT_TUNE = ["--seconds", "0", "--iterations", "300", "--des-iterations", "20", "--threads", "1", "-q", "--json"]
PT_NAMES = {"1F1B": "1f1b", "Interleaved1F1B V=2": "interleaved-1f1b", "InterleavedZeroBubble V=2": "interleaved-zb"}
_pt_any = {}


def pytorch_partition(header, row):
    """PyTorch's _partition.py search (tests/data/peers/pytorch_partition/pytorch_results.json)
    against tune --partition search --family F --placement loop, both timed by ppsched's DES on
    the workload's model file; and the search over every family and V <= 2."""
    res = json.load(open(os.path.join(ROOT, PT_DIR, "pytorch_results.json")))
    w = next(x for x in res["workloads"] if x["name"] == row[0])
    fam = next(f for f in w["families"] if f["ppsched_family"] == PT_NAMES[row[1]])
    model = "%s/%s" % (PT_DIR, w["model_file"])
    shape = ["--pp", str(res["pp"]), "--micro", str(res["micro"])]
    vpp = ["--vpp", str(fam["vpp"])] if fam["vpp"] > 1 else []

    def family_ms(counts):
        args = ["simulate", "--generate", fam["ppsched_family"]] + shape + vpp + ["--model", model, "--layout",
                                                                               ",".join(map(str, counts)), "--json"]
        return json.loads(cli.run(*args, expect=None).stdout)["makespan_ms"]

    t = json.loads(cli.run("tune", *shape, *vpp, "--model", model, "--partition", "search", "--family",
                           fam["ppsched_family"], "--placement", "loop", *PT_TUNE, expect=None).stdout)
    if row[0] not in _pt_any:
        _pt_any[row[0]] = json.loads(cli.run("tune", *shape, "--vpp-max", "2", "--model", model, "--partition",
                                             "search", *PT_TUNE, expect=None).stdout)
    a = _pt_any[row[0]]
    ms = lambda v: "%.1f" % v
    return [row[0], row[1], ",".join(map(str, fam["best_counts"])), ms(family_ms(fam["best_counts"])),
            ",".join(map(str, t["layout"])), ms(family_ms(t["layout"])), ms(t["makespan_ms"]),
            "%s %s" % (a["best"], ",".join(map(str, a["layout"]))), ms(a["makespan_ms"])]


CHECKS = {"partition_gain": partition_gain, "pytorch_partition": pytorch_partition, "llama_fit": llama_fit, "megatron_interleave": megatron_interleave, "megatron_first_stage": megatron_first_stage}

def run_page(page, rel, text, scratch):
    global checked, not_run
    for start, info, lines in blocks(text):
        words = info.split()
        lang = words[0] if words else ""
        file_attr = next((w[len("file="):] for w in words[1:] if w.startswith("file=")), None)
        exit_attr = next((w[len("exit="):] for w in words[1:] if w.startswith("exit=")), "0")
        if exit_attr not in ("0", "1", "2"):
            cli.fail("%s:%d: exit=%s: the CLI's exit codes are 0, 1 and 2" % (rel, start, exit_attr))
            continue
        want_exit = int(exit_attr)
        if file_attr is not None:
            if "/" in file_attr or file_attr.startswith("."):
                cli.fail("%s:%d: file=%s: a plain file name is expected" % (rel, start, file_attr))
                continue
            with open(os.path.join(scratch, file_attr), "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
            continue
        if lang == "console":
            if not lines or not lines[0].startswith("$ ppsched "):
                cli.fail("%s:%d: a console block must start with `$ ppsched `" % (rel, start))
                continue
            args = shlex.split(lines[0][len("$ ppsched "):])
            p = cli.run(*args, expect=None, cwd=scratch)
            got = [l.rstrip() for l in p.stdout.rstrip("\n").split("\n")] if p.stdout.strip() else []
            want = [l.rstrip() for l in lines[1:]]
            while want and want[-1] == "":
                want.pop()
            checked += 1
            if VERBOSE:
                print("ran    %s:%d: ppsched %s (exit %d)" % (rel, start, " ".join(args), p.returncode))
            if p.returncode != want_exit:
                cli.fail(exit_failure("%s:%d" % (rel, start), "ppsched " + " ".join(args), p, want_exit))
            if not excerpt_matches(want, got):
                diff = next((i for i in range(max(len(got), len(want)))
                             if i >= len(got) or i >= len(want) or got[i] != want[i]), 0)
                cli.fail("%s:%d: `ppsched %s` (exit %d) prints, from line %d of the block:\n  got:  %s\n  want: %s" % (
                    rel, start, " ".join(args), p.returncode, diff + 2,
                    got[diff] if diff < len(got) else "<end>", want[diff] if diff < len(want) else "<end>"))
        elif lang in ("sh", "bash"):
            cmds = command_lines(lines)
            if not cmds or not all(c.startswith("ppsched ") for c in cmds):
                not_run += 1
                if VERBOSE:
                    print("not run %s:%d: %s" % (rel, start, "; ".join(c for c in cmds if not c.startswith("ppsched "))[:150]))
                continue
            for c in cmds:
                checked += 1
                if VERBOSE:
                    print("ran    %s:%d: %s" % (rel, start, c[:150]))
                try:
                    p = cli.command(["bash", "-c", c], expect=None, cwd=scratch, timeout=300,
                                    env=dict(os.environ, PATH=os.path.join(scratch, ".bin") + os.pathsep + os.environ.get("PATH", "")))
                except subprocess.TimeoutExpired:
                    cli.fail("%s:%d: `%s` ran past 300 s" % (rel, start, c))
                    continue
                if VERBOSE:
                    print("       exit %d" % p.returncode)
                if p.returncode != want_exit:
                    cli.fail(exit_failure("%s:%d" % (rel, start), c, p, want_exit))


pages = PAGES or [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
for page in pages:
    text = open(page, encoding="utf-8").read()
    rel = os.path.relpath(page, ROOT)
    scratch = tempfile.mkdtemp(prefix="doc_examples.")
    try:
        os.symlink(os.path.join(ROOT, "tests"), os.path.join(scratch, "tests"))
        os.mkdir(os.path.join(scratch, ".bin"))
        os.symlink(EXE, os.path.join(scratch, ".bin", "ppsched"))
        run_page(page, rel, text, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    check_links(page, rel, text)
    for name, (line, header, rows) in tables(text).items():
        if name not in CHECKS:
            cli.fail("%s:%d: no check named %s" % (rel, line, name))
            continue
        if not rows:
            cli.fail("%s:%d: table %s has no rows" % (rel, line, name))
        for row in rows:
            checked += 1
            try:
                got = CHECKS[name](header, row)
            except (KeyError, ValueError, IndexError) as e:
                cli.fail("%s:%d: table %s, row %s: cannot recompute (%s)" % (rel, line, name, row, e))
                continue
            if got != row:
                cli.fail("%s:%d: table %s:\n  page:     %s\n  ppsched:  %s" % (rel, line, name, row, got))

if checked < 4 and not PAGES:
    cli.fail("only %d console examples and table rows found: the pages lost their checked examples" % checked)
cli.finish("doc_examples", summary="%d examples, links and table rows checked, %d blocks not run, %d failures" % (
    checked, not_run, len(cli.failures)))
