"""What the executor's case scripts (exec_cases.py, launcher_cases.py) share: the tiny model,
the case registry, the failure type, a free port and a strict JSON reader."""
import importlib.machinery
import importlib.util
import json
import os

# A small GPT: 8 blocks so that 8 virtual stages (P=4, V=2) each get one; tiny widths keep a
# PP=4 run well under a second of compute on 2 cores.
GPT = ["--model", "gpt", "--layers", "8", "--hidden", "16", "--heads", "2", "--seq", "4", "--vocab", "32",
       "--micro-batch-size", "2"]


class Failure(Exception):
    pass


def registry():
    """A script's cases by name, and the decorator that adds one: `CASES, case = registry()`."""
    cases = {}

    def case(name):
        def register(fn):
            cases[name] = fn
            return fn
        return register
    return cases, case


_held_ports = []  # the lock files of the ports this test process reserved, held until it exits


def free_port():
    """A port for a rendezvous store, reserved as tools/launch-local reserves MASTER_PORT (below
    the kernel's ephemeral range, locked against the suite's other launches) for as long as
    this test process runs."""
    loader = importlib.machinery.SourceFileLoader(
        "launch_local", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "launch-local"))
    spec = importlib.util.spec_from_loader("launch_local", loader)
    launch_local = importlib.util.module_from_spec(spec)
    loader.exec_module(launch_local)
    port, lock = launch_local.reserve_port()
    _held_ports.append(lock)
    return port


def strict_json(text):
    """JSON as RFC 8259 has it: NaN, Infinity and -Infinity are refused (Python accepts them)."""
    def refuse(name):
        raise Failure(f"the JSON summary holds {name}, which is not JSON: {text}")
    return json.loads(text, parse_constant=refuse)
