"""Trampolines: the one function per op that every caller holds.

A trampoline's signature mirrors the impls' signature and its body is ``return _f(<args>)`` with
``_f`` read from a closure cell (``_impl``) inside a try/except. Before resolution the cell holds a
resolver, afterwards the selected impl itself; swapping the cell re-routes every holder at once,
also functions vLLM already bound in ``_forward_method``. The try/except costs nothing until an
impl raises; then the fallback gets the function that was actually called (``_f``), so a selection
changed meanwhile by another thread is never blamed for it.

When the policy selects another impl for calls traced by torch.compile (``compile_prefer``), the
trampoline also reads ``_traced`` and branches on ``torch.compiler.is_compiling()``, which Dynamo
folds to a constant while tracing.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import keyword
import sys
import types
from typing import Any, Callable

__all__ = ["signature_key", "same_key", "build", "tracing_now", "FREEVARS"]

# Names the generated code uses itself; an impl parameter with one of these names gets the generic
# (*args, **kwargs) trampoline instead.
_RESERVED = {"_impl", "_traced", "_strict", "_fallback", "_exc", "_f", "_is_compiling"}
FREEVARS = ("_fallback", "_impl", "_strict", "_traced")


@functools.lru_cache(maxsize=4096)
def signature_key(fn: Callable[..., Any]) -> tuple | None:
    """(name, kind, default) per parameter of ``fn``, or None when no exact trampoline fits."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    key = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            return None
        if not p.name.isidentifier() or keyword.iskeyword(p.name) or p.name in _RESERVED:
            return None
        key.append((p.name, p.kind, p.default))
    return tuple(key)


def same_key(a: tuple, b: tuple) -> bool:
    """Whether two signature keys accept exactly the same calls."""
    if len(a) != len(b):
        return False
    for (n1, k1, d1), (n2, k2, d2) in zip(a, b):
        if n1 != n2 or k1 != k2:
            return False
        if d1 is not d2:
            try:
                if type(d1) is not type(d2) or not bool(d1 == d2):
                    return False
            except Exception:  # noqa: BLE001 - e.g. tensors as defaults
                return False
    return True


def tracing_now() -> bool:
    """Whether torch.compile is tracing the caller (False when torch was never imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


_FACTORY = """
def _make(_impl, _traced, _strict, _fallback{dparams}):
{body}
    return {name}
"""

# ``_f`` is bound before anything that can raise, so the handler always knows what was called;
# the walrus form costs about a nanosecond, a separate assignment about four. Every variant names
# all four cells (the handler passes ``_traced`` only for that reason), so that variants can share
# one closure.
_CALL = """\
            return (_f := _impl)({call})
"""
_SPLIT_CALL = """\
            _f = _impl
            if _is_compiling():
                _f = _traced
            return _f({call})
"""
_BODY = """\
    def {name}({params}):
        try:
{call}\
        except Exception as _exc:
            if _strict:
                raise
            return _fallback(_exc, _f, {args}, {kwargs}, _traced)
"""


def _body(name: str, key: tuple | None, split: bool, defaults: dict[str, Any]) -> str:
    if key is None:
        params, call, args, kwargs = "*args, **kwargs", "*args, **kwargs", "args", "kwargs"
    else:
        params, call, args, kwargs = _exact_parts(key, defaults)
    return _BODY.format(
        name=name,
        params=params,
        call=(_SPLIT_CALL if split else _CALL).format(call=call),
        args=args,
        kwargs=kwargs,
    )


def _exact_parts(key: tuple, defaults: dict[str, Any]) -> tuple[str, str, str, str]:
    params, pos, kws = [], [], []
    star_done = False
    last_posonly = max(
        (i for i, (_, kind, _) in enumerate(key) if kind is inspect.Parameter.POSITIONAL_ONLY),
        default=-1,
    )
    for i, (pname, kind, default) in enumerate(key):
        if kind is inspect.Parameter.KEYWORD_ONLY and not star_done:
            params.append("*")
            star_done = True
        text = pname
        if default is not inspect.Parameter.empty:
            dname = f"_d{i}"
            defaults[dname] = default
            text = f"{pname}={dname}"
        params.append(text)
        if i == last_posonly:
            params.append("/")
        if kind is inspect.Parameter.KEYWORD_ONLY:
            kws.append(pname)
        else:
            pos.append(pname)
    call = ", ".join(pos + [f"{k}={k}" for k in kws])
    args_tuple = "(" + "".join(f"{p}, " for p in pos) + ")"
    kwargs_dict = "{" + ", ".join(f"{k!r}: {k}" for k in kws) + "}"
    return ", ".join(params), call, args_tuple, kwargs_dict


def build(
    name: str, key: tuple | None, split: bool = False, closure: tuple | None = None
) -> Callable[..., Any]:
    """A trampoline whose free variables ``_impl``, ``_traced``, ``_strict``, ``_fallback`` are
    closure cells (Dynamo guards on closure cells like on any closure). ``key``: the exact
    signature (None: ``*args, **kwargs``); ``split``: calls traced by torch.compile go to
    ``_traced``; ``closure``: share the cells of an existing trampoline."""
    defaults: dict[str, Any] = {}
    body = _body(name, key, split, defaults)
    ns: dict[str, Any] = {"__builtins__": builtins}
    if split:
        import torch

        ns["_is_compiling"] = torch.compiler.is_compiling
    exec(_FACTORY.format(name=name, body=body, dparams="".join(f", {d}" for d in defaults)), ns)
    fn = ns["_make"](None, None, False, None, *defaults.values())
    if closure is None:
        return fn
    # Same code, but sharing the closure cells of an existing trampoline: both see one `_impl`.
    assert fn.__code__.co_freevars == FREEVARS
    new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new
