"""Strict vs fallback semantics and their log messages."""

import logging

import pytest

from vllm_fl.dispatch import (
    DispatchError,
    OpImpl,
    OpManager,
    OpRegistry,
    SelectionPolicy,
    dispatch_method,
    policy_context,
    set_global_policy,
)


class Boom(Exception):
    pass


def build(fail: dict):
    """norm impls flagos > cuda > reference; `fail[tag]` = number of calls that raise (or -1)."""
    calls = []

    def mk(tag):
        def norm(self, x, residual=None):
            calls.append(tag)
            n = fail.get(tag, 0)
            if n:
                if n > 0:
                    fail[tag] = n - 1
                raise Boom(f"{tag} broke")
            return tag

        return norm

    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl("rms_norm", "default.flagos", "flagos", mk("flagos")),
            OpImpl("rms_norm", "vendor.cuda", "vendor", mk("cuda"), vendor="cuda"),
            OpImpl("rms_norm", "reference.torch", "reference", mk("reference")),
        ]
    )
    m = OpManager(registry=reg)

    class Layer:
        forward_oot = dispatch_method("rms_norm", manager=m)

    return m, Layer(), calls


def test_first_use_logged_at_info(caplog_dispatch):
    m, layer, calls = build({})
    assert layer.forward_oot(1) == "flagos"
    assert layer.forward_oot(2) == "flagos"
    infos = [
        r
        for r in caplog_dispatch.records
        if r.levelno == logging.INFO and "using" in r.getMessage()
    ]
    assert [r.getMessage() for r in infos] == [
        "Op 'rms_norm' using 'default.flagos' (kind=flagos, vendor=None)"
    ]
    assert m.used_impls() == {"rms_norm": "default.flagos"}


def test_fallback_logs_warning_with_traceback_once_and_falls_back(caplog_dispatch):
    m, layer, calls = build({"flagos": -1})
    assert layer.forward_oot(1) == "cuda"
    assert layer.forward_oot(2) == "cuda"
    assert calls == ["flagos", "cuda", "cuda"]  # the failed impl is not retried
    msgs = [(r.levelno, r.getMessage()) for r in caplog_dispatch.records]
    assert (logging.INFO, "Op 'rms_norm' using 'default.flagos' (kind=flagos, vendor=None)") in msgs
    warns = [r for r in caplog_dispatch.records if r.levelno == logging.WARNING]
    assert len(warns) == 1
    assert (
        warns[0].getMessage()
        == "Implementation 'default.flagos' failed for op 'rms_norm': Boom: flagos broke"
    )
    assert warns[0].exc_info and warns[0].exc_info[0] is Boom
    assert (
        logging.INFO,
        "Op 'rms_norm' fallback to 'vendor.cuda' (kind=vendor, vendor=cuda)",
    ) in msgs
    assert m.used_impls() == {"rms_norm": "vendor.cuda"}
    assert m.failed_impls() == {"rms_norm": ["default.flagos"]}
    m.clear_failed_impls("rms_norm")
    assert m.get_selected_impl_id("rms_norm") == "default.flagos"


def test_impl_failing_on_a_later_call_falls_back(caplog_dispatch):
    fail = {}
    m, layer, calls = build(fail)
    bound = layer.forward_oot  # like vLLM's CustomOp._forward_method, bound before any failure
    assert layer.forward_oot(1) == "flagos"
    fail["flagos"] = -1  # the installed impl starts raising
    assert bound(2) == "cuda"
    assert layer.forward_oot(3) == "cuda"
    assert calls == ["flagos", "flagos", "cuda", "cuda"]
    assert (
        "Op 'rms_norm' fallback to 'vendor.cuda' (kind=vendor, vendor=cuda)" in caplog_dispatch.text
    )


class OtherBoom(Exception):
    pass


def test_all_fail_one_error_naming_every_impl_chained(caplog_dispatch, monkeypatch):
    m, layer, calls = build({"flagos": -1, "cuda": -1, "reference": -1})
    # Different exception types: no single original error to hand back.
    impl = m.registry.get_impl("rms_norm", "vendor.cuda")

    def cuda_other(self, x, residual=None):
        calls.append("cuda")
        raise OtherBoom("cuda broke differently")

    m.registry.unregister("rms_norm", "vendor.cuda")
    m.registry.register_impl(
        OpImpl("rms_norm", "vendor.cuda", "vendor", cuda_other, vendor=impl.vendor)
    )
    with pytest.raises(DispatchError) as ei:
        layer.forward_oot(1)
    msg = str(ei.value)
    assert isinstance(ei.value, RuntimeError)
    assert (
        "every implementation failed: tried 'default.flagos', 'vendor.cuda', 'reference.torch'"
        in msg
    )
    assert "'vendor.cuda': OtherBoom: cuda broke differently" in msg
    assert isinstance(ei.value.__cause__, Boom) and str(ei.value.__cause__) == "reference broke"
    assert len([r for r in caplog_dispatch.records if r.levelno == logging.WARNING]) == 3
    # all failing points at the inputs: nothing is excluded for later calls, no second warning
    assert m.failed_impls() == {}
    with pytest.raises(DispatchError):
        layer.forward_oot(2)
    assert len([r for r in caplog_dispatch.records if r.levelno == logging.WARNING]) == 3


def test_strict_raises_original_exception_unchanged():
    m, layer, calls = build({"flagos": -1})
    with policy_context(SelectionPolicy.from_dict(strict=True)):
        with pytest.raises(Boom) as ei:
            layer.forward_oot(1)
        assert str(ei.value) == "flagos broke" and ei.value.__cause__ is None
        assert calls == ["flagos"]
    # non-strict again (next call): falls back
    assert layer.forward_oot(1) == "cuda"


def test_strict_env(clean_dispatch_env):
    from vllm_fl.dispatch import reset_global_policy

    clean_dispatch_env.setenv("VLLM_FL_STRICT", "1")
    reset_global_policy()
    m, layer, calls = build({"flagos": -1})
    with pytest.raises(Boom):
        layer.forward_oot(1)
    with pytest.raises(Boom):
        m.call("rms_norm", object(), 1)


def test_call_op_paths_fall_back_too():
    m, layer, calls = build({"flagos": -1})
    assert m.call("rms_norm", layer, 1) == "cuda"
    assert m.call_as_method("rms_norm", layer, 1, residual=None) == "cuda"
    set_global_policy(SelectionPolicy.from_dict(prefer="reference"))
    assert m.call_as_method("rms_norm", layer, 1) == "reference"
