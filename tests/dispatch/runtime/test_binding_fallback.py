"""Binding's slow paths: strict mode raises the first failure; otherwise a failing impl is logged
once and left out, and the next candidate runs. When every impl rejects the call with the same
exception type, the caller gets that exception, not a DispatchError."""

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
    wrap_selections,
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


# --------------------------------------------------------------------------- the caller's own mistakes


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


def test_a_selection_wrappers_function_is_called_and_its_failure_blamed_on_the_impl():
    """``wrap_selections``: eager calls get what the wrapper makes of the selected impl; a failure
    inside it is the impl's (marked failed, the next candidate runs, wrapped too); None gives
    the impls themselves back."""
    seen = []

    def wrapper(op, impl, registry):
        fn = impl.fn

        def wrapped(*args, **kwargs):
            seen.append((op, impl.impl_id))
            return fn(*args, **kwargs)

        return wrapped

    m, layer, calls = build({"flagos": -1})
    old = wrap_selections(wrapper)
    try:
        assert layer.forward_oot(1) == "cuda"
        assert layer.forward_oot(2) == "cuda"
    finally:
        wrap_selections(old)
    assert calls == ["flagos", "cuda", "cuda"]
    assert seen[0] == ("rms_norm", "default.flagos") and seen[-1] == ("rms_norm", "vendor.cuda")
    assert m.failed_impls() == {"rms_norm": ["default.flagos"]}
    count = len(seen)
    assert layer.forward_oot(3) == "cuda"
    assert len(seen) == count


def test_a_selection_wrapper_that_gives_no_function_is_refused_naming_the_op():
    m, layer, calls = build({})
    old = wrap_selections(lambda op, impl, registry: len)  # a builtin takes no attributes
    try:
        with pytest.raises(TypeError, match="op 'rms_norm'"):
            layer.forward_oot(1)
    finally:
        wrap_selections(old)
    assert layer.forward_oot(2) == "flagos"
