"""How the Python tests (tests/*.py) run ppsched, or any other program, and report what failed.

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
    from cli import Cli
    cli = Cli(EXE)
    p = cli.run("check", path, expect=1)          # ppsched ARGS; a failure unless it exits 1
    d = cli.json("simulate", path)                # ppsched ARGS --json, parsed ({} when it fails)
    cli.refused(["simulate", "--bogus"], "--bogus")  # exit 2, "error:", naming each word
    cli.command([sys.executable, script, ...])    # any other program, the same way
    cli.check(cond, "what must hold")             # cli.fail(what): a failure found otherwise
    path = cli.write("name.json", text)           # in cli.tmp, the test's scratch folder
    cli.finish()                                  # the failures, and exit 1 if there are any

A failure is a wrong exit code, output that is not JSON where JSON is asked for, or a check that
does not hold. `stop` says which of them end the test at once (the others are collected in
cli.failures and reported by finish): "none" (the default), "exit" (a wrong exit code or
unreadable JSON: for tests whose next line reads the output) or "first" (any failure).
`verbose` prints each check as it is made ("ok   what" / "FAIL what"). `env`, `timeout` and `cwd`
are the Cli's for every run, and each run may give its own.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

TAIL = 2000  # the characters of stdout and stderr a wrong exit code reports


class Cli:
    def __init__(self, exe, env=None, timeout=300, cwd=None, stop="none", verbose=False, tmp_prefix="ppsched_cli_"):
        """`env`, `timeout` (seconds; None: none) and `cwd`: each run's, unless the run gives its own."""
        if stop not in ("none", "exit", "first"):
            raise ValueError("stop is none, exit or first, not %r" % (stop,))
        self.exe, self.env, self.timeout, self.cwd, self.stop, self.verbose = exe, env, timeout, cwd, stop, verbose
        self.failures = []
        self.checks = 0
        self.tmp_prefix = tmp_prefix
        self._tmp = None

    # ---- scratch files ----
    @property
    def tmp(self):
        """The test's scratch folder, made on first use."""
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix=self.tmp_prefix)
        return self._tmp

    def write(self, name, text):
        """Writes `text` to NAME in the scratch folder; returns its path."""
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    # ---- failures ----
    def fail(self, what, stop=False):
        """Records a failure; ends the test at once when `stop` or stop="first"."""
        self.failures.append(what)
        if self.verbose:
            print("FAIL " + what, flush=True)
        if stop or self.stop == "first":
            self._report()
            sys.exit("FAILED: " + what.split("\n")[0])

    def check(self, cond, what):
        """A failure unless `cond`; returns whether it held."""
        self.checks += 1
        if cond and self.verbose:
            print("ok   " + what, flush=True)
        if not cond:
            self.fail(what)
        return bool(cond)

    def _report(self):
        if not self.verbose:
            for f in self.failures:
                print("FAIL " + f, flush=True)

    def finish(self, name=None, summary=None):
        """Prints the failures, then `summary` (a line of the test's own), and exits 1 if there are
        any failures (the scratch folder kept, to look at); else says so (as `name`), removes the
        scratch folder and returns 0."""
        name = name or os.path.basename(sys.argv[0])
        if self.failures:
            self._report()
            if summary is not None:
                print(summary)
            if self._tmp is not None:
                print("%s: the scratch files are in %s" % (name, self._tmp))
            sys.exit("%s: %d failed" % (name, len(self.failures)))
        if summary is not None:
            print(summary)
        print("%s: all %d checks passed" % (name, self.checks) if self.checks else "%s: ok" % name)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
        return 0

    # ---- running ----
    def command(self, argv, expect=0, env=None, timeout=None, cwd=None, input=None):
        """Runs `argv` (any program) and returns the CompletedProcess (text stdout and stderr). A
        failure unless it exits `expect` (None: any exit). `env`, `timeout` and `cwd` default to the
        Cli's; a run past the timeout raises subprocess.TimeoutExpired."""
        argv = [str(a) for a in argv]
        p = subprocess.run(argv, capture_output=True, text=True, input=input, cwd=self.cwd if cwd is None else cwd,
                           env=self.env if env is None else env, timeout=self.timeout if timeout is None else timeout)
        if expect is not None and p.returncode != expect:
            self.fail("%s: exit %d, expected %d\n%s\n%s" % (" ".join(argv), p.returncode, expect,
                                                           p.stdout[-TAIL:], p.stderr[-TAIL:]),
                      stop=self.stop == "exit")
        return p

    def run(self, *args, expect=0, env=None, timeout=None, cwd=None, input=None):
        """Runs ppsched (the Cli's exe) with ARGS, as `command` does."""
        return self.command([self.exe] + list(args), expect=expect, env=env, timeout=timeout, cwd=cwd, input=input)

    def json(self, *args, expect=0, env=None, timeout=None, cwd=None):
        """Runs ppsched ARGS --json and returns its output parsed; on a wrong exit code or output that
        is not JSON, a failure and {} (falsy)."""
        p = self.run(*args, "--json", expect=expect, env=env, timeout=timeout, cwd=cwd)
        if expect is not None and p.returncode != expect:
            return {}
        try:
            return json.loads(p.stdout)
        except ValueError:
            self.fail("%s --json: not JSON: %s" % (" ".join(map(str, args)), p.stdout[:300]), stop=self.stop == "exit")
            return {}

    def refused(self, args, *words, silent=False):
        """`args` exits 2 with an error that starts with "error:" and names every one of `words`;
        `silent`: and prints nothing on stdout (no view, no report)."""
        p = self.run(*args, expect=2)
        if silent:
            self.check(p.stdout == "", "%s: a refusal prints no view: %r" % (" ".join(args), p.stdout[:300]))
        self.check(p.stderr.startswith("error:"),
                   "%s: the error does not start with 'error:': %r" % (" ".join(args), p.stderr[:300]))
        for w in words:
            self.check(w in p.stderr, "%s: the error does not name %r: %r" % (" ".join(args), w, p.stderr[:600]))
        return p
