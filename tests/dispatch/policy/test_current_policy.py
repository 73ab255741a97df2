"""The current policy and the ways to change it: set_global_policy, reset_global_policy,
policy_context and the with_* helpers (validated like every other source)."""

import logging

import pytest
from dispatch_helpers import ALL, candidates, manager, order, vendor_manager

from vllm_fl.dispatch import (
    ConfigError,
    OpImpl,
    OpManager,
    OpRegistry,
    SelectionPolicy,
    get_policy,
    oot_allowed,
    policy_context,
    set_global_policy,
    with_allowed_vendors,
    with_denied_vendors,
    with_preference,
    with_strict_mode,
)
from vllm_fl.dispatch.policy import current as pol


def test_set_global_policy_returns_previous():
    p = SelectionPolicy.from_dict(prefer="reference")
    old = set_global_policy(p)
    try:
        assert order(manager(*ALL()))[0] == "reference.torch"
    finally:
        set_global_policy(old)


def test_global_oot_allowed_and_reset_rereads_env(clean_dispatch_env):
    assert oot_allowed("RMSNorm")
    clean_dispatch_env.setenv("VLLM_FL_OOT_BLACKLIST", "RMSNorm")
    assert oot_allowed("RMSNorm")  # read once
    pol.reset_global_policy()
    assert (
        not oot_allowed("RMSNorm")
        and get_policy().sources["oot_blacklist"] == "env VLLM_FL_OOT_BLACKLIST"
    )


def test_log_level_applies_to_dispatch_logger(clean_dispatch_env):
    clean_dispatch_env.setenv("VLLM_FL_LOG_LEVEL", "ERROR")
    pol.reset_global_policy()
    assert logging.getLogger("vllm_fl.dispatch").level == logging.ERROR
    clean_dispatch_env.setenv("VLLM_FL_LOG_LEVEL", "bogus")
    with pytest.raises(ConfigError, match="VLLM_FL_LOG_LEVEL='bogus'"):
        pol.reset_global_policy()


def test_policy_context_accepts_validated_changes():
    with policy_context(prefer="VENDOR", strict="true") as p:
        assert get_policy() is p and (p.prefer, p.strict) == ("vendor", True)
        assert p.sources["prefer"] == "policy_context"
    with pytest.raises(ConfigError, match=r"policy_context:prefer='nope'"):
        policy_context(prefer="nope")
    with pytest.raises(TypeError, match="expected SelectionPolicy"):
        policy_context({"prefer": "vendor"})


def test_with_helpers_validate_and_normalise():
    with pytest.raises(ConfigError, match=r"with_preference:prefer='invalid'"):
        with_preference("invalid")
    with with_strict_mode("false"):
        assert get_policy().strict is False
    with with_strict_mode():
        assert get_policy().strict is True
    with with_denied_vendors("AMD"):
        assert get_policy().deny_vendors == frozenset({"amd"})
    with pytest.raises(ConfigError, match=r"with_allowed_vendors:allow_vendors: invalid vendor"):
        with_allowed_vendors("cu da")


def test_with_helpers():
    from vllm_fl.dispatch import with_allowed_vendors, with_denied_vendors, with_preference

    m = manager(*ALL())
    with with_preference("reference"):
        assert order(m)[0] == "reference.torch"
        with with_denied_vendors("cuda"):
            assert order(m) == ["reference.torch", "default.flagos", "vendor.ascend"]
    with with_allowed_vendors("cuda"):
        assert "vendor.ascend" not in order(m)
    assert order(m)[0] == "default.flagos"


def test_with_strict_mode_context():
    from vllm_fl.dispatch import get_policy, with_strict_mode

    reg = OpRegistry()

    def broken(self, x, residual=None):
        raise KeyError("k")

    reg.register_many(
        [
            OpImpl("op", "default.flagos", "flagos", broken),
            OpImpl("op", "reference.torch", "reference", lambda self, x, residual=None: "ref"),
        ]
    )
    m = OpManager(registry=reg)
    with with_strict_mode():
        assert get_policy().strict and get_policy().sources["strict"] == "with_strict_mode"
        with pytest.raises(KeyError):
            m.call("op", None, 1)
    assert not get_policy().strict
    assert m.call("op", None, 1) == "ref"


def test_nested_denied_vendors_add_up():
    m = vendor_manager("a", "b", "c")
    with with_denied_vendors("a"):
        with with_denied_vendors("b"):
            assert get_policy().deny_vendors == frozenset({"a", "b"})
            assert candidates(m) == ["vendor.c", "reference.torch"]
        assert candidates(m) == ["vendor.b", "vendor.c", "reference.torch"]


def test_nested_allowed_vendors_narrow():
    m = vendor_manager("a", "b", "c")
    with with_allowed_vendors("a", "b"):
        with with_allowed_vendors("b", "c"):
            assert get_policy().allow_vendors == frozenset({"b"})
            assert candidates(m) == ["vendor.b", "reference.torch"]
        with with_allowed_vendors("c"):
            assert get_policy().allow_vendors == frozenset()  # nothing left: no vendor runs
            assert candidates(m) == ["reference.torch"]
        assert candidates(m) == ["vendor.a", "vendor.b", "reference.torch"]
