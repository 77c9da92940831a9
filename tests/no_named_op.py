#!/usr/bin/env python3
"""A step type's meaning lives in the step table (schedule/step_types.*); everything else reads
its columns. This test fails when a C++ file outside the allow-list below compares a step's
op with a named Op (`== Op::X`, `!= Op::X`, `Op::X ==`, `case Op::X`): such a comparison
re-derives a rule the table should state, and adding a step type would mean editing it.

usage: no_named_op.py SOURCE_ROOT   (exit 0: clean, 1: comparisons found, 2: usage)
"""
import fnmatch
import os
import re
import sys

# Files that may name ops in comparisons, and why.
ALLOWED = {
    # The table itself.
    "schedule/step_types.hpp": "the step table",
    "schedule/step_types.cpp": "the step table",
    # Generators write the orders of published schedules: they name the steps they emit.
    "schedule/generators/*": "generators emit named steps",
    # Deliberately independent reference oracles: written without the table, so that a table
    # or pass bug cannot hide a generator bug (checkers/oracles.hpp).
    "checkers/oracles.cpp": "independent oracle",
    # The fuzzer's reference communication oracle derives every rank's messages from the
    # reference semantics without the lowering (issue 15), so a lowering bug cannot hide.
    "tools/fuzz/comm_oracle.cpp": "independent oracle",
    # Tests pin the behaviour of named step types, and their oracles are independent by design.
    "tests/*.cpp": "test assertions and independent test oracles",
    "tests/exec/*.cpp": "test assertions and independent test oracles",
}

COMPARISON = re.compile(r"(?:==|!=)\s*Op::[A-Z_][A-Z0-9_]*|\bOp::[A-Z_][A-Z0-9_]*\s*(?:==|!=)|\bcase\s+Op::[A-Z_]")
SKIP_DIRS = {".git", "subprojects", "corpus"}


def allowed(rel):
    # "*" stays inside one folder.
    return any(fnmatch.fnmatchcase(rel, p) and rel.count("/") == p.count("/") for p in ALLOWED)


def strip_comment(line):
    cut = line.find("//")
    return line if cut < 0 else line[:cut]


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        print(__doc__, file=sys.stderr)
        return 2
    root = os.path.abspath(sys.argv[1])
    found = []
    scanned = 0
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        # Build folders (build/, build-sanitized/, ...) hold generated or copied sources.
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not (rel_dir == "." and d.startswith("build"))]
        for name in filenames:
            if not name.endswith((".cpp", ".hpp", ".h", ".cc")):
                continue
            rel = os.path.normpath(os.path.join(rel_dir, name)).replace(os.sep, "/")
            scanned += 1
            if allowed(rel):
                continue
            with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    if COMPARISON.search(strip_comment(line)):
                        found.append(f"{rel}:{n}: {line.strip()}")
    if scanned == 0:
        print(f"no C++ sources under {root}", file=sys.stderr)
        return 2
    if found:
        print("comparisons of a step's op with a named Op outside the step table (read a column of "
              "schedule/step_types.hpp instead, or add one):")
        for f in found:
            print("  " + f)
        print("allowed files: " + ", ".join(sorted(ALLOWED)))
        return 1
    print(f"{scanned} files scanned; named-op comparisons only in: " + ", ".join(sorted(ALLOWED)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
