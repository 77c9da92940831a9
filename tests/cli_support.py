"""What the command-line tests share: run ppsched, collect failures, hold a refusal to its rules.

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cli_support import Cli
    cli = Cli(EXE)
    run, check, refused, failures = cli.run, cli.check, cli.refused, cli.failures
    tmp, write = cli.tmp, cli.write

A script appends to `failures` (or calls check) and reports them at its end.
"""
import os
import subprocess
import tempfile


class Cli:
    def __init__(self, exe, env=None, timeout=300, tmp_prefix="ppsched_cli_"):
        self.exe, self.env, self.timeout = exe, env, timeout
        self.failures = []
        self.tmp = tempfile.mkdtemp(prefix=tmp_prefix)  # the script's scratch folder

    def write(self, name, text):
        """Writes `text` to NAME in the scratch folder; returns its path."""
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def run(self, *args, expect=0):
        """Runs ppsched ARGS; a failure unless it exits `expect` (None: any exit)."""
        p = subprocess.run([self.exe] + list(args), capture_output=True, text=True, timeout=self.timeout, env=self.env)
        if expect is not None and p.returncode != expect:
            self.failures.append("%s: exit %d, expected %d\n%s%s" % (" ".join(args), p.returncode, expect,
                                                                   p.stdout[-1500:], p.stderr[-1500:]))
        return p

    def check(self, cond, what):
        if not cond:
            self.failures.append(what)

    def refused(self, args, *words):
        """`args` exits 2 with an error that starts with "error:" and names every one of `words`."""
        p = self.run(*args, expect=2)
        self.check(p.stderr.startswith("error:"),
                   "%s: the error does not start with 'error:': %r" % (" ".join(args), p.stderr[:300]))
        for w in words:
            self.check(w in p.stderr, "%s: the error does not name %r: %r" % (" ".join(args), w, p.stderr[:600]))
        return p
