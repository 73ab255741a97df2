import threading

import pytest

import vllm_fl.dispatch as d
from vllm_fl.dispatch import BackendImplKind, BackendPriority, OpImpl, OpRegistry

PUBLIC = [
    "OpImpl",
    "BackendImplKind",
    "BackendPriority",
    "OpRegistry",
    "SelectionPolicy",
    "get_policy",
    "set_global_policy",
    "reset_global_policy",
    "policy_context",
    "with_strict_mode",
    "with_preference",
    "with_allowed_vendors",
    "with_denied_vendors",
    "OpManager",
    "get_default_manager",
    "reset_default_manager",
    "call_op",
    "resolve_op",
    "call_method_op",
    "dispatch_method",
    "Probe",
    "oot_allowed",
    "used_impls",
]


def f(self, x):
    return x


def test_public_api_names():
    for name in PUBLIC:
        assert hasattr(d, name), name
        assert name in d.__all__
    assert BackendImplKind.DEFAULT.value == "flagos"
    assert BackendImplKind.VENDOR.value == "vendor"
    assert BackendImplKind.REFERENCE.value == "reference"
    assert (BackendPriority.DEFAULT, BackendPriority.VENDOR, BackendPriority.REFERENCE) == (
        150,
        100,
        50,
    )
    sp = d.SelectionPolicy.from_dict(
        prefer="vendor",
        strict=True,
        per_op_order={"x": ["reference"]},
        deny_vendors=["ascend"],
        allow_vendors=["cuda"],
    )
    assert sp.prefer == "vendor" and sp.strict and sp.per_op_order["x"] == ("reference",)
    assert sp.deny_vendors == {"ascend"} and sp.allow_vendors == {"cuda"}


def test_opimpl_defaults_priority_by_kind():
    assert OpImpl("a", "default.flagos", "flagos", f).priority == 150
    assert OpImpl("a", "vendor.cuda", BackendImplKind.VENDOR, f, vendor="CUDA").priority == 100
    assert OpImpl("a", "vendor.cuda", BackendImplKind.VENDOR, f, vendor="CUDA").vendor == "cuda"
    assert OpImpl("a", "reference.torch", "reference", f).priority == 50
    assert OpImpl("a", "reference.torch", "reference", f, priority=7).priority == 7
    assert OpImpl("a", "r", "reference", f).kind is BackendImplKind.REFERENCE


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(kind="vendor"), "requires vendor"),
        (dict(kind="gpu"), "invalid kind 'gpu'"),
        (dict(kind="reference", vendor="cuda"), "only meaningful with kind=vendor"),
        (dict(kind="reference", fn=3), "not callable"),
        (dict(kind="reference", priority="high"), "priority must be an int"),
        (dict(kind="reference", available=True), "available must be"),
        (dict(kind="reference", op_name=""), "invalid op_name"),
        (dict(kind="reference", impl_id="a b"), "invalid impl_id"),
    ],
)
def test_opimpl_validation(kwargs, match):
    args = dict(op_name="op", impl_id="i", fn=f)
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        OpImpl(**args)


def test_opimpl_availability_reason():
    def boom():
        raise OSError("driver gone")

    assert OpImpl("a", "r", "reference", f).check_available() == (True, None)
    assert OpImpl("a", "r", "reference", f, available=lambda: False).check_available() == (
        False,
        "available() returned False",
    )
    ok, why = OpImpl("a", "r", "reference", f, available=boom).check_available()
    assert not ok and "OSError: driver gone" in why


def test_registry_register_query_and_duplicate_names_both():
    reg = OpRegistry()
    a = OpImpl("rms_norm", "default.flagos", "flagos", f)
    reg.register_impl(a)
    reg.register_many([OpImpl("silu", "reference.torch", "reference", f)])
    assert reg.list_operators() == ["rms_norm", "silu"]
    assert reg.get_implementations("rms_norm") == [a]
    assert reg.get_implementations("nope") == []

    def other(self, x):
        return x

    with pytest.raises(ValueError) as ei:
        reg.register_impl(OpImpl("rms_norm", "default.flagos", "flagos", other))
    msg = str(ei.value)
    assert "duplicate implementation 'default.flagos' for op 'rms_norm'" in msg
    assert (
        "test_api.f" in msg
        and "test_api.test_registry_register_query_and_duplicate_names_both.<locals>.other" in msg
    )


def test_registry_register_many_is_atomic():
    reg = OpRegistry()
    good = OpImpl("a", "x", "reference", f)
    with pytest.raises(ValueError, match="duplicate"):
        reg.register_many([good, OpImpl("a", "x", "reference", f)])
    assert reg.get_implementations("a") == []


def test_registry_thread_safe():
    reg = OpRegistry()
    barrier = threading.Barrier(8)

    def work(t):
        barrier.wait()
        for i in range(200):
            reg.register_impl(OpImpl(f"op{i % 10}", f"impl{t}_{i}", "reference", f))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(reg) == 8 * 200
    assert len(reg.list_operators()) == 10
