#!/usr/bin/env python3
"""Runs the hostile corpus (make_corpus.py) against ppsched and asserts that input cannot hurt.

    run_corpus.py PPSCHED MAKE_CORPUS_PY WORK_DIR [--jobs N] [--only SUBSTRING] [--sanitized] [--expect-failure]

Each case runs with its address space limited to 1 GiB and a 30 s timeout, and must: exit
0, 1 or 2 (and the case's expected code where it names one); print no abort text
("terminate called", "Aborted", sanitizer reports); print no non-finite figure (inf, nan)
and no wrapped one (a negative number of 12 or more digits); keep stderr short (the input
is quoted at most ~200 characters); and honour the case's own checks (a file left
unchanged, the result printed before a failed write). A case's "before" command (a trace to
calibrate) runs first, unchecked.

Every refusal (exit 2) gets a reason class from its message: limit, malformed, out of memory or
internal. An internal error fails the case; so does running out of memory unless the case
expects that class; a case that names a class ("expect_class", the cases built to exceed a
limit) fails unless refused with it.

--expect-failure: the run passes only if some case fails (the planted test: with one limit check
removed, PPSCHED_TESTING_PLANTED_NO_PAIR_LIMIT=1, the corpus must notice).

--sanitized (a build under AddressSanitizer, tools/test-sanitized): ASan reserves terabytes of
address space for its shadow memory, so no address-space limit can be set; instead any single
allocation over 1 GiB fails as it would under the limit (ASan's max_allocation_size_mb with
allocator_may_return_null, so `new` throws std::bad_alloc), and the timeout is tripled (ASan
and UBSan make the program 2-3x slower). The 1 GiB total is held by the main build's run.
"""
import concurrent.futures
import hashlib
import json
import os
import re
import resource
import subprocess
import sys
import time

MEMORY = 1 << 30
TIMEOUT = 30
ABORT = re.compile(r"terminate called|Aborted|core dumped|AddressSanitizer|UndefinedBehaviorSanitizer|"
                   r"runtime error:|Segmentation fault|std::bad_alloc|json\.exception")
# A figure, not a quote of the input ('nan' in "got 'nan'").
NONFINITE = re.compile(r"(?<![A-Za-z_'])[-+]?(inf|infinity|nan)(?![A-Za-z_'])", re.IGNORECASE)
WRAPPED = re.compile(r"(?<![\w.])-\d{12,}")
# The reason class of a refusal (exit 2), from the message tools/ppsched.cpp rendered: an
# exception no reader turned into a located refusal is "internal"; std::bad_alloc and
# std::length_error are "out of memory"; a message naming a limit is "limit"; any other
# located refusal is "malformed".
INTERNAL = re.compile(r"internal error")
OUT_OF_MEMORY = re.compile(r"out of memory|a table would be too large")
LIMIT = re.compile(r"\blimits?\b|too large|too long|too many|too deep|at most|more than")


def refusal_class(rc, err):
    if INTERNAL.search(err):
        return "internal"
    if OUT_OF_MEMORY.search(err):
        return "out of memory"
    if rc != 2:
        return None
    return "limit" if LIMIT.search(err) else "malformed"


SANITIZED = False


def limit():
    if not SANITIZED:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run_case(exe, c):
    if c.get("before"):  # what the case needs first (a trace to calibrate)
        subprocess.run([exe] + c["before"], capture_output=True, timeout=TIMEOUT)
    before = digest(c["unchanged"]) if c.get("unchanged") else None
    out_target = c.get("stdout")
    start = time.monotonic()
    try:
        if out_target:
            with open(out_target, "w") as sink:
                p = subprocess.run([exe] + c["args"], stdout=sink, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                   timeout=TIMEOUT, preexec_fn=limit)
            stdout = b""
        else:
            p = subprocess.run([exe] + c["args"], capture_output=True, stdin=subprocess.DEVNULL, timeout=TIMEOUT,
                               preexec_fn=limit)
            stdout = p.stdout
    except subprocess.TimeoutExpired:
        return ["ran past %d s" % TIMEOUT], None, time.monotonic() - start, ""
    seconds = time.monotonic() - start
    out = stdout.decode("utf-8", "replace")
    err = p.stderr.decode("utf-8", "replace")
    problems = []
    rc = p.returncode
    cls = refusal_class(rc, err)
    if rc not in (0, 1, 2):
        problems.append("exit %d" % rc)
    elif c.get("expect") and rc not in c["expect"]:
        problems.append("exit %d, expected %s" % (rc, "/".join(map(str, c["expect"]))))
    both = out + err
    for pattern, what in ((ABORT, "abort text"), (NONFINITE, "non-finite figure"), (WRAPPED, "wrapped figure")):
        m = pattern.search(both)
        if m:
            problems.append("%s %r" % (what, both[max(0, m.start() - 40):m.end() + 40]))
    if len(err) > c.get("max_stderr", 4000):
        problems.append("stderr of %d characters" % len(err))
    if c.get("stdout_has") and c["stdout_has"] not in out:
        problems.append("stdout lacks %r" % c["stdout_has"])
    if c.get("stderr_has") and c["stderr_has"] not in err:
        problems.append("stderr lacks %r" % c["stderr_has"])
    if c.get("stderr_no") and c["stderr_no"] in err:
        problems.append("stderr has %r" % c["stderr_no"])
    if before is not None and digest(c["unchanged"]) != before:
        problems.append("%s was overwritten" % c["unchanged"])
    # An internal error is never a refusal; running out of memory is one only where the case
    # says so; a case built to exceed a limit is refused by that limit, not by anything else.
    if cls == "internal":
        problems.append("an internal error")
    elif cls == "out of memory" and c.get("expect_class") != "out of memory":
        problems.append("refused by running out of memory, not by a limit")
    if c.get("expect_class") and cls != c["expect_class"]:
        problems.append("refused as %s, expected %s" % (cls or "nothing (exit %s)" % rc, c["expect_class"]))
    return problems, rc, seconds, ("[%s] " % cls if cls else "") + (err.strip().splitlines()[-1][:160] if err.strip() else "")


def main():
    args = sys.argv[1:]
    jobs, only = 2, None
    if "--jobs" in args:
        k = args.index("--jobs")
        jobs = int(args[k + 1])
        del args[k:k + 2]
    if "--only" in args:
        k = args.index("--only")
        only = args[k + 1]
        del args[k:k + 2]
    global SANITIZED, TIMEOUT
    expect_failure = "--expect-failure" in args
    if expect_failure:
        args.remove("--expect-failure")
    if "--sanitized" in args:
        args.remove("--sanitized")
        SANITIZED = True
        TIMEOUT *= 3
        os.environ["ASAN_OPTIONS"] = ":".join(
            o for o in (os.environ.get("ASAN_OPTIONS", ""), "allocator_may_return_null=1",
                        "max_allocation_size_mb=%d" % (MEMORY >> 20)) if o)
    exe, maker, work = args
    subprocess.run([sys.executable, maker, work, exe], check=True)
    with open(os.path.join(work, "cases.json")) as f:
        cases = json.load(f)
    if only:
        cases = [c for c in cases if only in c["name"]]
    start = time.monotonic()
    failed = 0
    by_category = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda c: run_case(exe, c), cases))
    for c, (problems, rc, seconds, last) in zip(cases, results):
        tot = by_category.setdefault(c["category"], [0, 0])
        tot[0] += 1
        if problems:
            failed += 1
            tot[1] += 1
            print("FAIL [%s] %s (%.1f s): %s" % (c["category"], c["name"], seconds, "; ".join(problems)))
            print("     ppsched " + " ".join(a if len(a) < 60 else a[:40] + "..." for a in c["args"]))
        else:
            print("ok   [%s] %s: exit %s (%.1f s) %s" % (c["category"], c["name"], rc, seconds, last))
    print("\n%d cases, %d broke the promise, %.1f s" % (len(cases), failed, time.monotonic() - start))
    for cat, (n, bad) in sorted(by_category.items()):
        print("  %-11s %3d cases, %d broke" % (cat, n, bad))
    if expect_failure:
        print("--expect-failure: %s" % ("the corpus noticed (%d cases failed)" % failed if failed
                                         else "NO case failed: the corpus cannot tell"))
        return 0 if failed else 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
