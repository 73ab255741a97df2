"""Every registered implementation follows the signature rule of ``vllm_fl.dispatch.signatures``:
the parameters of its op's method in ``FLBackendBase`` (the generated ``vllm_fl/dispatch/spec.py``),
the calling layer first for an op with a layer, by name, in order, with the same defaults;
annotations are not part of the rule. ``make codegen`` checks the same rule on the impl functions
(with ``ast``, before anything is imported) and the registry checks it for every plugin's
implementation; this test checks what the registry actually holds for the built-in backends,
generated adapters and the hand-written functions behind them (``.functional``, ``.eager``).
"""

import pytest

from vllm_fl.dispatch import get_default_manager
from vllm_fl.dispatch.signatures import mismatch
from vllm_fl.dispatch.spec import FLBackendBase


@pytest.mark.parametrize("op", FLBackendBase.OPS)
def test_registered_impls_follow_the_signature_rule(op):
    impls = get_default_manager().registry.get_implementations(op)
    assert impls, f"no implementation of {op} is registered: run `make codegen`"
    problems = [
        f"{impl.impl_id}: {mismatch(op, impl.fn)}" for impl in impls if mismatch(op, impl.fn)
    ]
    assert problems == []


def test_every_registered_op_is_in_the_contract():
    registry = get_default_manager().registry
    builtin = {
        op
        for op in registry.list_operators()
        if any(i.fn.__module__.startswith("vllm_fl.") for i in registry.get_implementations(op))
    }
    assert builtin == set(FLBackendBase.OPS)


@pytest.mark.parametrize("op", FLBackendBase.OPS)
def test_registered_impls_get_the_generated_trampoline_of_their_op(op):
    """The rule's parameters are those of the op's generated trampoline: whichever built-in impl
    is selected, the dispatch installs the code in ``vllm_fl/dispatch/trampolines.py``, not the
    generic ``(*args, **kwargs)`` trampoline."""
    from vllm_fl.dispatch import trampolines
    from vllm_fl.dispatch.runtime.trampoline import build, signature_key

    impls = get_default_manager().registry.get_implementations(op)
    generic = [
        impl.impl_id
        for impl in impls
        if build(op, signature_key(impl.fn)).__code__.co_filename != trampolines.__file__
    ]
    assert generic == []
