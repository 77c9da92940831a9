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
