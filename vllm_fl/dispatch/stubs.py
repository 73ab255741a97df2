"""Recognising the impl stubs ``make codegen`` scaffolds.

A scaffolded stub is a function whose body is a docstring and only ``raise
NotImplementedError("<backend> <op>: write the kernel here, ...")`` (or "write the in-place
eager variant here"). It imports and registers like a written kernel and raises on its first
call; where its backend cannot run, no parity test ever calls it. So ``explain`` marks it
("stub"), and the test suite fails on it on every machine.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import types
from typing import Any, Callable

__all__ = ["STUB_MARK", "is_stub_node", "is_stub", "stub_functions"]

#: the text every scaffolded stub's message holds (templates/impl_stub.py.j2)
STUB_MARK = ": write the "


def is_stub_node(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the parsed function ``fn`` is a scaffolded stub (see the module docstring)."""
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


@functools.lru_cache(maxsize=1024)
def _code_is_stub(code: types.CodeType) -> bool:
    # Cheap first: a stub names NotImplementedError and holds the mark in a constant.
    if "NotImplementedError" not in code.co_names or not any(
        isinstance(c, str) and STUB_MARK in c for c in code.co_consts
    ):
        return False
    try:
        source = textwrap.dedent(inspect.getsource(code))
        node = ast.parse(source).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return False  # no source to read: not one ``make codegen`` wrote
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_stub_node(node)


def is_stub(fn: Callable[..., Any]) -> bool:
    """Whether the function ``fn`` itself is a scaffolded stub."""
    code = getattr(fn, "__code__", None)
    return isinstance(code, types.CodeType) and _code_is_stub(code)


def stub_functions(fn: Callable[..., Any]) -> list[Callable[..., Any]]:
    """The scaffolded stubs among the functions a registered implementation runs: ``fn``
    itself, or, for a generated adapter, the impl it calls (``fn.functional``) and its in-place
    variant (``fn.eager``)."""
    parts = [getattr(fn, name) for name in ("functional", "eager") if hasattr(fn, name)]
    return [part for part in (parts or [fn]) if is_stub(part)]
