"""Running a command line for the CLI tests (tests/*_cli.py): one helper, one failure message."""
import subprocess
import sys


def run(args, expect=0, env=None, timeout=120):
    """Runs `args` and returns the CompletedProcess (text stdout/stderr). When `expect` is not
    None and the exit code differs, the test stops with the command, both codes and the output
    tails."""
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    if expect is not None and p.returncode != expect:
        sys.exit(f"FAILED: {' '.join(args)}: exit {p.returncode}, expected {expect}\n"
                 f"{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


class Expectations:
    """Checks that print as they go ("ok   what" / "FAIL what") and end the test with the count
    of failed ones: expect = Expectations(); expect(ok, what); ...; expect.finish()."""

    def __init__(self):
        self.failures = []

    def __call__(self, ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            self.failures.append(what)

    def finish(self):
        if self.failures:
            sys.exit(f"{len(self.failures)} failed")
