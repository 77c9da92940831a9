"""One function of Megatron-LM, taken unmodified from a clone (or a bare git directory) at its
HEAD: its source is compiled alone, out of its module, so neither torch nor the rest of
Megatron is imported; `stubs` stand for the names it calls from elsewhere. Used by run_flops.py
and run_memory.py."""
import ast
import subprocess


def megatron_function(repo, path, name, stubs):
    """(the function, the commit it was read at)."""
    git = lambda *a: subprocess.run(["git", "-C", repo] + list(a), capture_output=True, text=True, check=True).stdout
    commit = git("rev-parse", "HEAD").strip()
    tree = ast.parse(git("show", commit + ":" + path))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace = dict(stubs)
    exec(compile(ast.Module(body=[fn], type_ignores=[]), path, "exec"), namespace)
    return namespace[name], commit
