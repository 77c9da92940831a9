#!/usr/bin/env python3
"""tests/doc_examples.py fails an example whose exit status its block does not declare.

    doc_examples_self_test.py DOC_EXAMPLES PPSCHED SOURCE_ROOT

Runs DOC_EXAMPLES --page on each fixture of tests/data/doc_examples/ and requires its verdict
and the failures it names: a ```sh or ```console block whose command exits 1 without `exit=1`
fails (before issue 36 an exit 1 passed silently: sh blocks accepted 0 or 1, console blocks
any status); a block that declares the exit it gets passes; one that declares another fails.
"""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from cli import Cli  # noqa: E402

SCRIPT, EXE, ROOT = sys.argv[1], sys.argv[2], sys.argv[3]
FIXTURES = os.path.join(ROOT, "tests", "data", "doc_examples")
BAD = "`ppsched check tests/data/bad/both_send_first.json` exits 1"
CASES = [  # fixture, doc_examples' exit, what its output must say
    ("undeclared_exit.md", 1, ["undeclared_exit.md:6: %s, the block says 0 (no exit=N)" % BAD,
                               "undeclared_exit.md:10: %s, the block says 0 (no exit=N)" % BAD, "2 failures"]),
    ("declared_exit.md", 0, ["2 examples, links and table rows checked, 0 blocks not run, 0 failures"]),
    ("wrong_exit.md", 1, ["wrong_exit.md:6: `ppsched generate 1f1b --pp 2 --micro 2 -o fine.json` exits 0, the block says 1",
                          "wrong_exit.md:10: %s, the block says 2" % BAD, "2 failures"]),
]
cli = Cli(EXE, timeout=120)
for fixture, want_rc, said in CASES:
    # doc_examples run by this Python: the Cli's command, not its run (which runs ppsched).
    p = cli.command([sys.executable, SCRIPT, EXE, ROOT, "--page", os.path.join(FIXTURES, fixture)], expect=want_rc)
    out = p.stdout + p.stderr
    if p.returncode != want_rc:
        continue
    for s in said:
        cli.check(s in out, "%s: doc_examples does not say %r:\n%s" % (fixture, s, out))
    print("ok: %s: exit %d" % (fixture, p.returncode))
cli.finish("doc_examples_self_test")
