"""Every registered implementation matches the backend contract, ``FLBackendBase``.

``FLBackendBase`` (the generated ``vllm_fl/dispatch/spec.py``) is the manifest's signatures as
Python: one abstract method per op, ``(self, layer, <args>)`` for an op with a layer and
``(self, <args>)`` for one without. An implementation takes the same arguments, in order, with
the same kinds, defaults and annotations and the same return annotation; the calling layer
comes in as its first parameter ``self``. ``make codegen`` checks the impl functions against
the same signatures (with ``ast``, before anything is imported); this test checks what the
registry actually holds, generated adapters and the hand-written functions behind them
(``.functional``, ``.eager``) alike.
"""

import inspect

import pytest

from vllm_fl.dispatch import get_default_manager
from vllm_fl.dispatch.spec import FLBackendBase

EMPTY = inspect.Parameter.empty


def _params(fn) -> list[tuple[str, object, object, object]]:
    """(name, kind, default, annotation) per parameter, annotations evaluated."""
    signature = inspect.signature(fn, eval_str=True)
    return [(p.name, p.kind, p.default, p.annotation) for p in signature.parameters.values()]


def _contract(op: str) -> tuple[bool, list[tuple[str, object, object, object]], object]:
    """(has a layer, the parameters an impl takes, the return annotation) of ``op``."""
    method = getattr(FLBackendBase, op)
    params = _params(method)[1:]  # FLBackendBase's own self
    has_layer = bool(params) and params[0][0] == "layer"
    if has_layer:
        params[0] = ("self", params[0][1], EMPTY, EMPTY)  # the layer, unannotated in impls
    return has_layer, params, inspect.signature(method, eval_str=True).return_annotation


def _functions(fn) -> list:
    """The functions a registered implementation runs: a generated adapter (with the op's
    exact signature) and the impl and in-place variant behind it."""
    return [fn] + [getattr(fn, name) for name in ("functional", "eager") if hasattr(fn, name)]


@pytest.mark.parametrize("op", FLBackendBase.OPS)
def test_registered_impls_match_the_contract(op):
    has_layer, expected, returns = _contract(op)
    impls = get_default_manager().registry.get_implementations(op)
    assert impls, f"no implementation of {op} is registered: run `make codegen`"
    for impl in impls:
        for fn in _functions(impl.fn):
            where = f"{impl.impl_id} {fn.__module__}.{fn.__qualname__}"
            actual = _params(fn)
            if has_layer and actual:
                actual[0] = (actual[0][0], actual[0][1], EMPTY, EMPTY)
            assert actual == expected, f"{where}: {actual} != FLBackendBase.{op}: {expected}"
            assert inspect.signature(fn, eval_str=True).return_annotation == returns, where


def test_every_registered_op_is_in_the_contract():
    registry = get_default_manager().registry
    builtin = {
        op
        for op in registry.list_operators()
        if any(i.fn.__module__.startswith("vllm_fl.") for i in registry.get_implementations(op))
    }
    assert builtin == set(FLBackendBase.OPS)
