"""OpImpl: validation, default priorities and availability (also upstream's ``fn._is_available``)."""

import pytest

from vllm_fl.dispatch import BackendImplKind, OpImpl, OpManager, OpRegistry


def f(self, x):
    return x


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


# --------------------------------------------------------------------------- upstream vllm-plugin-FL


def test_fn_is_available_false_makes_the_impl_unavailable():
    def flagos(x):
        return "flagos"

    def ref(x):
        return "reference"

    flagos._is_available = lambda: False
    reg = OpRegistry()
    reg.register_many(
        [
            OpImpl("op", "default.flagos", "flagos", flagos),
            OpImpl("op", "reference.torch", "reference", ref),
        ]
    )
    m = OpManager(reg)
    assert m.call("op", 1) == "reference"
    ok, why = reg.get_impl("op", "default.flagos").check_available()
    assert not ok and why == "fn._is_available() returned False"


def test_fn_is_available_is_read_at_each_check_and_may_raise():
    def flagos(x):
        return "flagos"

    impl = OpImpl("op", "default.flagos", "flagos", flagos)
    assert impl.is_available()
    flagos._is_available = lambda: True  # attached after the OpImpl was built
    assert impl.is_available()

    def broken():
        raise RuntimeError("no device")

    flagos._is_available = broken
    assert impl.check_available() == (
        False,
        "fn._is_available() raised RuntimeError: no device",
    )
    flagos._is_available = "yes"
    ok, why = impl.check_available()
    assert not ok and "not a zero-argument callable" in why


def test_available_and_fn_is_available_must_both_agree():
    def flagos(x):
        return "flagos"

    flagos._is_available = lambda: False
    impl = OpImpl("op", "default.flagos", "flagos", flagos, available=lambda: True)
    assert not impl.is_available()
    flagos._is_available = lambda: True
    assert impl.is_available()
    assert not OpImpl(
        "op", "default.flagos", "flagos", flagos, available=lambda: False
    ).is_available()


def test_bound_method_impl_carries_its_function_attribute():
    class Backend:
        def rms(self, x):
            return "backend"

    Backend.rms._is_available = lambda: False
    impl = OpImpl("op", "vendor.x", "vendor", Backend().rms, vendor="x")
    assert not impl.is_available()
