"""No impl named in ops.yaml is still the stub `make codegen` scaffolded.

A stub raises NotImplementedError; in a backend that cannot run on this machine (FlagGems, CUDA,
Ascend on a CPU-only host) its parity tests are skipped, so without this check a stub would pass
the suite. Read from the source with ast, so every backend is checked on every machine.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from codegen.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[2]
STUB_MARK = ": write the "


def scaffolded_stub(fn: ast.FunctionDef) -> bool:
    """Whether `fn` is what `make codegen` scaffolds: a docstring, then only
    ``raise NotImplementedError("<backend> <op>: write the kernel here, ...")``."""
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], ast.Raise):
        return False
    exc = body[0].exc
    if not (isinstance(exc, ast.Call) and getattr(exc.func, "id", None) == "NotImplementedError"):
        return False
    text = "".join(
        part.value
        for arg in exc.args
        for part in ast.walk(arg)
        if isinstance(part, ast.Constant) and isinstance(part.value, str)
    )
    return STUB_MARK in text and " here" in text


def _impl_functions():
    manifest = load_manifest((ROOT / "ops.yaml").read_text())
    for op in manifest.ops:
        for impl in op.impls:
            backend = manifest.backend(impl.backend)
            refs = [(impl.module, impl.function)] + ([impl.eager] if impl.eager else [])
            for module, function in refs:
                path = ROOT / backend.path / "impl" / f"{module}.py"
                yield pytest.param(path, function, id=f"{op.name}-{backend.name}-{function}")


@pytest.mark.parametrize("path, function", list(_impl_functions()))
def test_impl_is_not_a_scaffolded_stub(path, function):
    tree = ast.parse(path.read_text())
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    assert fns, f"{path.relative_to(ROOT)} defines no {function}"
    assert not scaffolded_stub(fns[-1]), (
        f"{path.relative_to(ROOT)}:{fns[-1].lineno}: {function} is still the stub `make codegen` "
        "scaffolded: write the kernel"
    )


def test_the_detector_recognises_the_generated_stub():
    source = '''
def relu2(x):
    """Doc."""
    raise NotImplementedError(
        "flagos relu2: write the kernel here, "
        "matching FLBackendBase.relu2 (vllm_fl/dispatch/spec.py)"
    )


def written(x):
    """Doc."""
    if x is None:
        raise NotImplementedError("flagos relu2: write the kernel here")
    return x


def unsupported(x):
    raise NotImplementedError("flag_gems relu2 has no parameter for y")
'''
    fns = {n.name: n for n in ast.parse(source).body}
    assert scaffolded_stub(fns["relu2"])
    assert not scaffolded_stub(fns["written"])
    assert not scaffolded_stub(fns["unsupported"])
