"""What the executor's case scripts (exec_cases.py, launcher_cases.py) share: the tiny model,
the case registry, the failure type, a free port and a strict JSON reader."""
import json
import socket

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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def strict_json(text):
    """JSON as RFC 8259 has it: NaN, Infinity and -Infinity are refused (Python accepts them)."""
    def refuse(name):
        raise Failure(f"the JSON summary holds {name}, which is not JSON: {text}")
    return json.loads(text, parse_constant=refuse)
