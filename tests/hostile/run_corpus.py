#!/usr/bin/env python3
"""Runs the hostile corpus (make_corpus.py) against ppsched and asserts that input cannot hurt.

    run_corpus.py PPSCHED MAKE_CORPUS_PY WORK_DIR [--jobs N] [--only SUBSTRING] [--sanitized]

Each case runs with its address space limited to 1 GiB and a 30 s timeout, and must: exit
0, 1 or 2 (and the case's expected code where it names one); print no abort text
("terminate called", "Aborted", sanitizer reports); print no non-finite figure (inf, nan)
and no wrapped one (a negative number of 12 or more digits); keep stderr short (the input
is quoted at most ~200 characters); and honour the case's own checks (a file left
unchanged, the result printed before a failed write). A case's "before" command (a trace to
calibrate) runs first, unchecked.

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
    return problems, rc, seconds, err.strip().splitlines()[-1][:160] if err.strip() else ""


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
    if "--sanitized" in args:
        args.remove("--sanitized")
        SANITIZED = True
        TIMEOUT *= 3
        os.environ["ASAN_OPTIONS"] = ":".join(
            o for o in (os.environ.get("ASAN_OPTIONS", ""), "allocator_may_return_null=1",
                        "max_allocation_size_mb=%d" % (MEMORY >> 20)) if o)
    exe, maker, work = args
    subprocess.run([sys.executable, maker, work], check=True)
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
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
