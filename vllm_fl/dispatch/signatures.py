"""The one rule an implementation's signature follows, checked when a plugin registers it.

An implementation of op ``X`` takes the parameters of ``FLBackendBase.X`` (``vllm_fl/dispatch/
spec.py``) after that method's own ``self``: for an op with a layer, the calling layer first
(``self`` by convention; its name is free), then the op's arguments, in order, by name, with the
same defaults, each positional-or-keyword. Annotations are documentation, not part of the rule
(``make codegen`` checks the same rule on the source with ``ast``; an unannotated impl passes
both). A generated adapter is checked through the functions it carries (``functional``,
``eager``). Ops that ``FLBackendBase`` does not declare (a plugin's own) are not checked.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

__all__ = ["ImplSignatureError", "contract", "mismatch"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class ImplSignatureError(TypeError):
    """An implementation whose parameters are not its op's (raised in strict mode)."""


@functools.cache
def contract(op: str) -> tuple[bool, tuple[tuple[str, Any], ...]] | None:
    """(whether the op has a caller, its arguments as ``(name, default)``) from FLBackendBase;
    None for an op it does not declare. The caller is a layer, or a collective's communicator."""
    from .spec import FLBackendBase

    if op not in FLBackendBase.OPS:
        return None
    params = list(inspect.signature(getattr(FLBackendBase, op)).parameters.values())[1:]
    has_layer = bool(params) and params[0].name in ("layer", "communicator")
    args = params[1:] if has_layer else params
    return has_layer, tuple((p.name, p.default) for p in args)


def _expected(op: str, has_layer: bool, args: tuple[tuple[str, Any], ...]) -> str:
    shown = [
        name if default is inspect.Parameter.empty else f"{name}={default!r}"
        for name, default in args
    ]
    return f"def {op}({', '.join((['self'] if has_layer else []) + shown)})"


def _problem(fn: Callable, has_layer: bool, args: tuple[tuple[str, Any], ...]) -> str | None:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return None
    if has_layer:
        if not params or params[0].kind not in _POSITIONAL:
            return "takes no layer as its first parameter"
        params = params[1:]
    for param in params:
        if param.kind not in _POSITIONAL:
            return f"has the {param.kind.description} parameter {param.name!r}"
    names = [p.name for p in params]
    want = [name for name, _ in args]
    if names != want:
        return (
            f"takes ({', '.join(names)}) after the layer"
            if has_layer
            else f"takes ({', '.join(names)})"
        )
    for param, (name, default) in zip(params, args):
        if param.default is not default and param.default != default:
            have = (
                "no default"
                if param.default is inspect.Parameter.empty
                else f"default {param.default!r}"
            )
            return f"gives {name!r} {have}"
    return None


def mismatch(op: str, fn: Callable) -> str | None:
    """Why ``fn`` (or a function a generated adapter carries) cannot implement ``op``; None
    when it can, or when ``op`` is not in the contract."""
    spec = contract(op)
    if spec is None:
        return None
    has_layer, args = spec
    carried = [getattr(fn, name) for name in ("functional", "eager") if hasattr(fn, name)]
    for function in carried or [fn]:
        problem = _problem(function, has_layer, args)
        if problem is not None:
            where = f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', function)!s}"
            return f"{where} {problem}; expected {_expected(op, has_layer, args)}"
    return None
