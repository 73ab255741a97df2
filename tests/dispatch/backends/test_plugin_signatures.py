"""A plugin's implementations are checked against their op's signature when it registers them
(``vllm_fl.dispatch.signatures``): a mismatch is never a candidate that fails at its first call."""

from __future__ import annotations

import pytest

from vllm_fl.dispatch import OpImpl, OpRegistry
from vllm_fl.dispatch.discovery import load_plugin_module
from vllm_fl.dispatch.policy.current import with_strict_mode
from vllm_fl.dispatch.signatures import ImplSignatureError, mismatch


def silu_right(layer, x):  # unannotated, the layer under another name: both allowed
    return x


def silu_wrong(self, y):
    return y


def rms_wrong_default(self, x, residual=0):
    return x


def rms_right(self, x, residual=None):
    return x


def _plugin(plugin_module, *impls):
    def register(registry):
        registry.register_many(
            [OpImpl(op, f"vendor.{name}", "vendor", fn, vendor=name) for op, name, fn in impls]
        )

    return plugin_module("chip_plugin", register=register)


def test_a_mismatch_is_a_warning_naming_impl_op_plugin_and_expected_and_is_not_registered(
    plugin_module, caplog_dispatch
):
    registry = OpRegistry()
    name = _plugin(
        plugin_module,
        ("silu_and_mul", "good", silu_right),
        ("silu_and_mul", "bad", silu_wrong),
        ("rms_norm", "bad", rms_wrong_default),
        ("rms_norm", "good", rms_right),
    )
    assert load_plugin_module(registry, name)
    ids = {
        op: [i.impl_id for i in registry.get_implementations(op)]
        for op in ("silu_and_mul", "rms_norm")
    }
    assert ids == {"silu_and_mul": ["vendor.good"], "rms_norm": ["vendor.good"]}
    warnings = [r.getMessage() for r in caplog_dispatch.records if r.levelname == "WARNING"]
    assert warnings == [
        "implementation 'vendor.bad' of op 'silu_and_mul' (from module 'chip_plugin'): "
        f"{__name__}.silu_wrong takes (y) after the layer; expected def silu_and_mul(self, x); "
        "it is not registered",
        "implementation 'vendor.bad' of op 'rms_norm' (from module 'chip_plugin'): "
        f"{__name__}.rms_wrong_default gives 'residual' default 0; expected def rms_norm(self, x, "
        "residual=None); it is not registered",
    ]
    assert registry.origin_of(registry.get_implementations("rms_norm")[0]) == "module 'chip_plugin'"


def test_in_strict_mode_a_mismatch_raises(plugin_module):
    registry = OpRegistry()
    name = _plugin(plugin_module, ("silu_and_mul", "bad", silu_wrong))
    with with_strict_mode(), pytest.raises(ImplSignatureError) as info:
        load_plugin_module(registry, name)
    assert "'vendor.bad' of op 'silu_and_mul'" in str(info.value)
    assert "expected def silu_and_mul(self, x)" in str(info.value)
    assert registry.get_implementations("silu_and_mul") == []


@pytest.mark.parametrize(
    "fn, problem",
    [
        (lambda *args, **kwargs: None, "takes no layer as its first parameter"),
        (lambda self, *xs: None, "has the variadic positional parameter 'xs'"),
        (lambda self, x, *, residual=None: None, "has the keyword-only parameter 'residual'"),
        (lambda self, x: None, "takes (x) after the layer"),
    ],
)
def test_the_rule(fn, problem):
    assert problem in mismatch("rms_norm", fn)


def test_ops_outside_the_contract_and_direct_registrations_are_not_checked():
    assert mismatch("my_own_op", silu_wrong) is None
    registry = OpRegistry()
    registry.register_impl(OpImpl("silu_and_mul", "vendor.x", "vendor", silu_wrong, vendor="x"))
    assert len(registry.get_implementations("silu_and_mul")) == 1
