"""OpManager: the candidates of an op (why each other impl is not one), resolution and its log,
resolve_all, calling ops without ``self``."""

import logging

import pytest
from dispatch_helpers import fn, impl, manager, norm_layer as setup, order

import vllm_fl.dispatch as d
from vllm_fl.dispatch.backend import Backend
from vllm_fl.dispatch import (
    DispatchError,
    OpImpl,
    OpManager,
    OpRegistry,
    SelectionPolicy,
    policy_context,
)


def test_unavailable_skipped_with_reason():
    class P:
        reason = "no 'cuda' device"

        def __call__(self):
            return False

    m = manager(
        impl("default.flagos", "flagos", available=P()), impl("reference.torch", "reference")
    )
    assert order(m) == ["reference.torch"]
    _, rejected = m.evaluate("op")
    assert [(i.impl_id, why) for i, why in rejected] == [
        ("default.flagos", "unavailable: no 'cuda' device")
    ]


def test_no_candidates_error_names_every_reason():
    m = manager(
        impl("default.flagos", "flagos", available=lambda: False),
        impl("vendor.cuda", "vendor", "cuda"),
    )
    with policy_context(SelectionPolicy.from_dict(deny_vendors=["cuda"])):
        with pytest.raises(DispatchError) as ei:
            m.resolve("op")
    msg = str(ei.value)
    assert "Op 'op': no implementation can run" in msg
    assert "'default.flagos' unavailable: available() returned False" in msg
    assert "'vendor.cuda' excluded: vendor 'cuda' in deny_vendors" in msg
    with pytest.raises(
        DispatchError, match="no implementation registered for op 'nope'; registered ops: op"
    ):
        m.resolve("nope")


def test_manager_over_exactly_its_registry():
    m = manager(impl("reference.torch", "reference"))
    assert m.registry.list_operators() == ["op"]
    assert OpManager().registry.list_operators() == []
    assert m.resolve("op") is fn


def test_backend_selection_listeners_hear_every_installed_selection(caplog_dispatch):
    seen = []

    def broken(manager):
        raise RuntimeError("listener bug")

    def record(manager):
        seen.append([i.impl_id for i in manager.impls_in_use()])

    registry = OpRegistry()
    with registry.registering_for(Backend("fake", selection_listeners=(record, broken))):
        m, Layer, calls = setup(reg=registry)
    assert m.impls_in_use() == []
    assert Layer().forward_oot(1) == "flagos"  # a failing listener does not fail the call
    assert seen == [["default.flagos"]]  # once per installed selection (eager and traced)
    with policy_context(SelectionPolicy.from_dict(prefer="reference")):
        assert Layer().forward_oot(1) == "reference"
        assert seen[-1] == ["reference.torch"]
    assert seen[-1] == ["default.flagos"]  # re-selected after the block
    assert "selection listener" in caplog_dispatch.text and "listener bug" in caplog_dispatch.text


def test_resolve_all_and_used_impls():
    m, Layer, calls = setup()
    m.registry.register_impl(
        OpImpl("gpu_only", "default.flagos", "flagos", lambda: 1, available=lambda: False)
    )
    assert m.resolve_all() == {"gpu_only": None, "rms_norm": "default.flagos"}
    assert m.used_impls() == {"rms_norm": "default.flagos"}
    assert calls == []  # resolving runs nothing
    n = m.resolution_count
    Layer().forward_oot(1)
    assert m.resolution_count == n


def test_op_without_self_through_call():
    reg = OpRegistry()
    reg.register_impl(
        OpImpl(
            "attention_backend", "reference.x", "reference", lambda use_mla=False: f"mla={use_mla}"
        )
    )
    m = OpManager(registry=reg)
    assert m.call("attention_backend") == "mla=False"
    assert m.call("attention_backend", use_mla=True) == "mla=True"
    assert m.resolve("attention_backend")(True) == "mla=True"


def test_dispatch_debug_logs_resolution(clean_dispatch_env, caplog_dispatch):
    clean_dispatch_env.setenv("VLLM_FL_DISPATCH_DEBUG", "1")
    d.reset_global_policy()
    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl("op", "default.flagos", "flagos", fn, available=lambda: False),
            OpImpl("op", "reference.torch", "reference", fn),
        ]
    )
    d.OpManager(registry=reg).call("op", None, 1)
    rec = [r for r in caplog_dispatch.records if r.getMessage().startswith("Op 'op' resolved")]
    assert rec and rec[0].levelno == logging.INFO
    assert "candidates [reference.torch]" in rec[0].getMessage()
    assert "'default.flagos' unavailable: available() returned False" in rec[0].getMessage()
