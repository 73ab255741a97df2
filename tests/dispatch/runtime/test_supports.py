"""An impl that declares ``supports`` (ops.yaml) serves only calls whose arguments have the listed
values: the dispatch gives any other call to the next candidate instead of calling it (and
instead of raising), and ops whose selected impl declares nothing keep the plain trampoline."""

from __future__ import annotations

import pytest

from vllm_fl.dispatch import (
    DispatchError,
    OpImpl,
    OpManager,
    OpRegistry,
    SelectionPolicy,
    policy_context,
)
from vllm_fl.dispatch.explain import explain


def build(fast_fails: bool = False):
    """experts impls flagos (silu only, no bias) > reference; the calls each one got."""
    calls: list[tuple[str, str]] = []

    def fast(x, activation="silu", bias=None):
        calls.append(("flagos", activation))
        if fast_fails:
            raise RuntimeError("fast broke")
        return "flagos"

    def reference(x, activation="silu", bias=None):
        calls.append(("reference", activation))
        return "reference"

    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl(
                "experts",
                "default.flagos",
                "flagos",
                fast,
                supports={"activation": ("silu",), "bias": (None,)},
            ),
            OpImpl("experts", "reference.torch", "reference", reference),
        ]
    )
    return OpManager(registry=reg), calls


def test_a_call_the_impl_serves_goes_to_it():
    m, calls = build()
    assert m.call("experts", 1) == "flagos"
    assert m.call("experts", 1, "silu") == "flagos"
    assert m.call("experts", 1, activation="silu", bias=None) == "flagos"
    assert calls == [("flagos", "silu")] * 3


def test_a_call_it_does_not_serve_goes_to_the_next_candidate_without_calling_it():
    m, calls = build()
    assert m.call("experts", 1, "swigluoai") == "reference"
    assert m.call("experts", 1, activation="swigluoai") == "reference"
    assert m.call("experts", 1, "silu", object()) == "reference"  # a bias
    assert calls == [("reference", "swigluoai")] * 2 + [("reference", "silu")]
    # the impl is not marked failed: its calls still go to it
    assert m.call("experts", 1) == "flagos"
    assert m.failed_impls() == {}


def test_a_failure_of_the_served_impl_falls_back_to_a_candidate_that_serves_the_call():
    m, calls = build(fast_fails=True)
    assert m.call("experts", 1) == "reference"
    assert calls == [("flagos", "silu"), ("reference", "silu")]
    assert "default.flagos" in m.failed_impls()["experts"]


def test_no_candidate_serving_the_call_is_a_dispatch_error_naming_why():
    m, _ = build()
    with policy_context(SelectionPolicy.from_dict(per_op_order={"experts": ["flagos"]})):
        with pytest.raises(DispatchError, match=r"'default.flagos' does not serve activation="):
            m.call("experts", 1, "gelu")
        assert m.call("experts", 1, "silu") == "flagos"


def test_refusal_reads_positional_keyword_and_default_arguments():
    impl = OpImpl(
        "experts",
        "default.flagos",
        "flagos",
        lambda x, activation="silu", bias=None: x,
        supports={"activation": ("silu",), "bias": (None,)},
    )
    assert impl.refusal((1,), {}) is None
    assert impl.refusal((1, "silu", None), {}) is None
    assert "activation='gelu'" in impl.refusal((1, "gelu"), {})
    assert "bias=" in impl.refusal((1,), {"bias": object()})
    plain = OpImpl("experts", "reference.torch", "reference", lambda x, activation="silu": x)
    assert plain.refusal((1, "anything"), {}) is None


def test_supports_naming_no_argument_is_refused_at_registration():
    with pytest.raises(ValueError, match="supports\\['activaton'\\]"):
        OpImpl(
            "experts",
            "x.y",
            "flagos",
            lambda x, activation="silu": x,
            supports={"activaton": ("silu",)},
        )


def test_an_op_without_supports_keeps_the_plain_trampoline():
    m, _ = build()
    reg = m.registry
    reg.register_impl(OpImpl("plain", "reference.torch", "reference", lambda x: x))
    assert m.call("plain", 3) == 3
    assert (
        m.binding("plain")._cells["_impl"].cell_contents is not m.binding("plain")._supported_call
    )
    m.call("experts", 1)
    assert (
        m.binding("experts")._cells["_impl"].cell_contents == m.binding("experts")._supported_call
    )


def test_explain_says_which_calls_an_impl_serves():
    m, _ = build()
    text = explain(m)
    assert "serves only calls with activation in ['silu'], bias None" in text
