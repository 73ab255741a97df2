"""Trampolines: the one function per op that every caller holds.

A trampoline's body is ``return _f(<args>)`` with ``_f`` read from a closure cell (``_impl``)
inside a try/except. Before resolution the cell holds a resolver, afterwards the selected impl
itself; swapping the cell re-routes every holder at once, also functions vLLM already bound in
``_forward_method``. The try/except costs nothing until an impl raises; then the fallback gets the
function that was actually called (``_f``), so a selection changed meanwhile by another thread is
never blamed for it.

When the policy selects another impl for calls traced by torch.compile (``compile_prefer``), the
trampoline also reads ``_traced`` and branches on ``torch.compiler.is_compiling()``, which Dynamo
folds to a constant while tracing.

Nothing is compiled at run time. An op of ops.yaml has its trampolines written out by the
generator in ``vllm_fl/dispatch/trampolines.py``, with the parameters of the op's impls; ``build``
installs them when the selected impls take exactly those parameters (``same_key``; the layer
parameter may have any name, see ``build``). Every other op (one a plugin declares itself, a
test's) and every impl whose parameters differ gets the generic ``(*args, **kwargs)`` trampoline
of this module, same body, which carries the impls' signature as ``__signature__`` where they
have one.
"""

from __future__ import annotations

import functools
import inspect
import keyword
import sys
import types
from typing import Any, Callable

__all__ = ["signature_key", "same_key", "build", "generated", "tracing_now", "FREEVARS"]

#: a trampoline factory: (_impl, _traced, _strict, _fallback) -> a trampoline over those cells
Factory = Callable[[Any, Any, bool, Any], Callable[..., Any]]

# Names the trampolines use themselves; the generated ones never take a parameter of these names
# (ops.yaml refuses arguments starting with _), so such an impl gets the generic trampoline.
_RESERVED = {"_impl", "_traced", "_strict", "_fallback", "_exc", "_f", "_is_compiling"}
#: the closure of every trampoline, in the order ``__code__.co_freevars`` lists it
FREEVARS = ("_fallback", "_impl", "_strict", "_traced")
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
#: the layer parameter of the generated trampolines (the impls' convention, see spec.py);
#: ops.yaml refuses an argument of this name, so it marks an op with a layer
_LAYER = "self"


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


# -- the generic trampolines --------------------------------------------------------------------
#
# The same bodies as the generated ones (vllm_fl/dispatch/trampolines.py) over *args, **kwargs.
# ``_f`` is bound before anything that can raise, so the handler always knows what was called;
# the walrus form costs about a nanosecond, a separate assignment about four. Every variant names
# all four cells (the handler passes ``_traced`` only for that reason), so that variants can share
# one closure.

#: torch.compiler.is_compiling, bound by ``build`` before the first split trampoline exists:
#: ``import vllm_fl.dispatch`` imports no torch
_is_compiling: Callable[[], bool]


def _plain(
    _impl: Callable[..., Any], _traced: Callable[..., Any], _strict: bool, _fallback: Callable
) -> Callable[..., Any]:
    def trampoline(*args, **kwargs):
        try:
            return (_f := _impl)(*args, **kwargs)
        except Exception as _exc:
            if _strict:
                raise
            return _fallback(_exc, _f, args, kwargs, _traced)

    return trampoline


def _split(
    _impl: Callable[..., Any], _traced: Callable[..., Any], _strict: bool, _fallback: Callable
) -> Callable[..., Any]:
    def trampoline(*args, **kwargs):
        try:
            _f = _impl
            if _is_compiling():
                _f = _traced
            return _f(*args, **kwargs)
        except Exception as _exc:
            if _strict:
                raise
            return _fallback(_exc, _f, args, kwargs, _traced)

    return trampoline


def _bind_is_compiling() -> None:
    global _is_compiling
    from torch.compiler import is_compiling

    _is_compiling = is_compiling


# -- the generated trampolines ------------------------------------------------------------------


@functools.cache
def _generated_table() -> dict[str, tuple[Factory, Factory]]:
    # Imported on first use: the generated module imports torch (its split trampolines call
    # torch.compiler.is_compiling), which importing the dispatch never does.
    try:
        from .. import trampolines
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        return {}  # no torch: nothing here can run a manifest op's kernels anyway
    return trampolines.TRAMPOLINES


@functools.cache
def generated(op: str) -> tuple[tuple, Factory, Factory] | None:
    """(signature key, plain factory, split factory) of the generated trampolines of ``op``; None
    for an op ops.yaml does not declare. The key is computed from the generated function itself,
    as ``signature_key`` computes an impl's, so the two cannot drift."""
    entry = _generated_table().get(op)
    if entry is None:
        return None
    plain, split = entry
    key = signature_key(plain(None, None, False, None))
    assert key is not None, f"generated trampoline of op {op!r} has no signature key"
    return key, plain, split


def _layer_as_generated(key: tuple, generated_key: tuple) -> tuple:
    """``key`` with its layer parameter named and kinded as the generated trampoline's.

    An impl's layer may have any name (``signatures``: ``self`` by convention) and be
    positional-only. The layer is always passed positionally (a method call binds it,
    ``call_op`` passes it first), and the trampoline passes it on positionally, so such an impl
    still gets the op's generated trampoline; only a caller naming the layer as a keyword
    (``layer=``) gets a TypeError from it."""
    if not key or not generated_key or generated_key[0][0] != _LAYER:
        return key
    name, kind, default = key[0]
    if kind not in _POSITIONAL or default is not inspect.Parameter.empty:
        return key
    return (generated_key[0],) + key[1:]


def _generated_factory(op: str, key: tuple, split: bool) -> Factory | None:
    found = generated(op)
    if found is None:
        return None
    generated_key, plain, split_factory = found
    if not same_key(_layer_as_generated(key, generated_key), generated_key):
        return None
    return split_factory if split else plain


def _signature(key: tuple) -> inspect.Signature:
    return inspect.Signature(
        [inspect.Parameter(name, kind, default=default) for name, kind, default in key]
    )


def build(
    op: str, key: tuple | None, split: bool = False, closure: tuple | None = None
) -> Callable[..., Any]:
    """A trampoline of op ``op`` whose free variables ``_impl``, ``_traced``, ``_strict``,
    ``_fallback`` are closure cells (Dynamo guards on closure cells like on any closure).

    ``key``: the signature of the impls it calls (``signature_key``; None: none in common).
    When it is that of the op's generated trampoline, the trampoline is the generated one, so a
    call that does not fit raises ``TypeError`` before any impl runs; otherwise it is the generic
    ``(*args, **kwargs)`` one, with ``__signature__`` made from ``key`` (where not None). A bad
    call then reaches an impl, which raises ``TypeError``; the binding re-raises it as the
    caller's error (``Binding._recover``) without blaming the impl.

    ``split``: calls traced by torch.compile go to ``_traced``; ``closure``: share the cells of an
    existing trampoline (the cells' order is ``FREEVARS`` in every variant)."""
    factory = _generated_factory(op, key, split) if key is not None else None
    generic = factory is None
    if generic:
        if split:
            _bind_is_compiling()
        factory = _split if split else _plain
    fn = factory(None, None, False, None)
    if closure is not None:
        # Same code, but sharing the closure cells of an existing trampoline: both see one `_impl`.
        assert fn.__code__.co_freevars == FREEVARS
        new = types.FunctionType(fn.__code__, fn.__globals__, op, fn.__defaults__, closure)
        new.__kwdefaults__ = fn.__kwdefaults__
        fn = new
    fn.__name__ = op
    if generic and key is not None:
        fn.__signature__ = _signature(key)  # type: ignore[attr-defined]
    return fn
