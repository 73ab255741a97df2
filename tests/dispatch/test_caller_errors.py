"""Non-strict mode and the caller's own mistakes: when every implementation rejects the call with
the same exception type, the caller gets that exception, not a DispatchError."""

from __future__ import annotations

import pytest

from vllm_fl.dispatch import (
    DispatchError,
    OpImpl,
    OpManager,
    OpRegistry,
    SelectionPolicy,
    dispatch_method,
    policy_context,
)


def checked(tag: str):
    def norm(self, x, residual=None):
        if not isinstance(x, int):
            raise TypeError(f"norm: x must be an int, got {type(x).__name__}")
        if x < 0:
            raise ValueError(f"{tag}: x must be >= 0, got {x}")
        return tag

    return norm


@pytest.fixture
def layer_and_manager():
    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl("norm", "default.flagos", "flagos", checked("flagos")),
            OpImpl("norm", "vendor.cuda", "vendor", checked("cuda"), vendor="cuda"),
            OpImpl("norm", "reference.torch", "reference", checked("reference")),
        ]
    )
    m = OpManager(reg)

    class Layer:
        forward_oot = dispatch_method("norm", manager=m)

    return Layer(), m


@pytest.mark.parametrize("first_call", [True, False], ids=["unresolved", "resolved"])
def test_bad_argument_reaches_the_caller_as_its_own_type(layer_and_manager, first_call):
    layer, m = layer_and_manager
    if not first_call:
        assert layer.forward_oot(1) == "flagos"
    with pytest.raises(TypeError) as ei:
        layer.forward_oot("not an int")
    assert type(ei.value) is TypeError
    assert str(ei.value) == "norm: x must be an int, got str"
    notes = "\n".join(getattr(ei.value, "__notes__", []))
    for impl_id in ("default.flagos", "vendor.cuda", "reference.torch"):
        assert f"'{impl_id}': TypeError" in notes
    # The inputs were wrong, not the backends: nothing is excluded afterwards.
    assert m.failed_impls() == {}
    assert layer.forward_oot(2) == "flagos"


def test_same_type_different_messages_gives_the_preferred_impls_exception(layer_and_manager):
    layer, m = layer_and_manager
    with pytest.raises(ValueError) as ei:
        layer.forward_oot(-1)
    assert str(ei.value) == "flagos: x must be >= 0, got -1"
    assert len(ei.value.__notes__) == 1  # a re-raised error gets its note once
    with pytest.raises(ValueError) as again:
        layer.forward_oot(-1)
    assert len(again.value.__notes__) == 1


def test_strict_mode_raises_the_same_exception_at_once(layer_and_manager):
    layer, m = layer_and_manager
    with policy_context(SelectionPolicy.from_dict(strict=True)):
        with pytest.raises(ValueError) as ei:
            layer.forward_oot(-1)
    assert str(ei.value) == "flagos: x must be >= 0, got -1"
    assert not getattr(ei.value, "__notes__", None)


def test_mixed_types_still_give_a_dispatch_error():
    def flagos(x):
        raise ValueError("bad value")

    def ref(x):
        raise KeyError("missing")

    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl("op", "default.flagos", "flagos", flagos),
            OpImpl("op", "reference.torch", "reference", ref),
        ]
    )
    m = OpManager(reg)
    with pytest.raises(DispatchError, match="every implementation failed") as ei:
        m.call("op", 1)
    assert isinstance(ei.value.__cause__, KeyError)


def test_single_impl_failing_reaches_the_caller_unchanged():
    def only(x):
        raise IndexError("index 9 is out of bounds")

    reg = OpRegistry()
    reg.register_impl(OpImpl("op", "reference.torch", "reference", only))
    m = OpManager(reg)
    for _ in range(2):
        with pytest.raises(IndexError, match="index 9 is out of bounds"):
            m.call("op", 1)
