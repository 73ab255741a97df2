"""Selection order: allow/deny -> availability -> per-op tokens or prefer's order -> priority."""

import pytest

from vllm_fl.dispatch import (
    DispatchError,
    OpImpl,
    OpManager,
    OpRegistry,
    SelectionPolicy,
    policy_context,
    set_global_policy,
)


def fn(self, x):
    return x


def impl(impl_id, kind, vendor=None, priority=None, available=None, op="op"):
    return OpImpl(op, impl_id, kind, fn, vendor=vendor, priority=priority, available=available)


def manager(*impls):
    reg = OpRegistry()
    reg.register_many(impls)
    return OpManager(registry=reg)


ALL = lambda: [  # noqa: E731
    impl("default.flagos", "flagos"),
    impl("vendor.cuda", "vendor", "cuda"),
    impl("vendor.ascend", "vendor", "ascend"),
    impl("reference.torch", "reference"),
]


def order(m, op="op"):
    return [i.impl_id for i in m.resolve_candidates(op)]


@pytest.mark.parametrize(
    "prefer, expected",
    [
        ("flagos", ["default.flagos", "vendor.cuda", "vendor.ascend", "reference.torch"]),
        ("vendor", ["vendor.cuda", "vendor.ascend", "default.flagos", "reference.torch"]),
        ("reference", ["reference.torch", "default.flagos", "vendor.cuda", "vendor.ascend"]),
    ],
)
def test_prefer_default_orders(prefer, expected):
    m = manager(*ALL())
    with policy_context(SelectionPolicy.from_dict(prefer=prefer)):
        assert order(m) == expected
        assert m.get_selected_impl_id("op") == expected[0]


def test_prefer_is_order_not_exclusivity():
    m = manager(impl("default.flagos", "flagos"), impl("reference.torch", "reference"))
    with policy_context(SelectionPolicy.from_dict(prefer="vendor")):
        assert order(m) == ["default.flagos", "reference.torch"]


def test_priority_within_a_token_group():
    m = manager(
        impl("vendor.a", "vendor", "a", priority=90),
        impl("vendor.b", "vendor", "b", priority=120),
        impl("reference.torch", "reference"),
        impl("reference.fast", "reference", priority=60),
    )
    with policy_context(SelectionPolicy.from_dict(prefer="vendor")):
        assert order(m) == ["vendor.b", "vendor.a", "reference.fast", "reference.torch"]


def test_per_op_tokens_restrict_and_are_case_insensitive():
    m = manager(*ALL())
    p = SelectionPolicy.from_dict(per_op_order={"op": ["Vendor:ASCEND", "REFERENCE"]})
    with policy_context(p):
        assert order(m) == ["vendor.ascend", "reference.torch"]
    with policy_context(SelectionPolicy.from_dict(per_op_order={"op": ["impl:VENDOR.CUDA"]})):
        assert order(m) == ["vendor.cuda"]
    with policy_context(SelectionPolicy.from_dict(per_op_order={"other": ["reference"]})):
        assert order(m)[0] == "default.flagos"  # other ops keep the default order
    _, rejected = m.evaluate("op", p)
    assert any("not in op_backends[op]=vendor:ascend|reference" in why for _, why in rejected)


def test_per_op_env(clean_dispatch_env):
    from vllm_fl.dispatch import reset_global_policy

    clean_dispatch_env.setenv("VLLM_FL_PER_OP", "op=reference|vendor")
    reset_global_policy()
    assert order(manager(*ALL())) == ["reference.torch", "vendor.cuda", "vendor.ascend"]


def test_vendor_allow_and_deny():
    m = manager(*ALL())
    with policy_context(SelectionPolicy.from_dict(allow_vendors=["ascend"])):
        assert order(m) == ["default.flagos", "vendor.ascend", "reference.torch"]
    with policy_context(SelectionPolicy.from_dict(deny_vendors=["ascend"])):
        assert order(m) == ["default.flagos", "vendor.cuda", "reference.torch"]
    with policy_context(SelectionPolicy.from_dict(allow_vendors=["cuda"], deny_vendors=["cuda"])):
        assert order(m) == ["default.flagos", "reference.torch"]


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


def test_flagos_blacklist_whitelist_and_use_flaggems(clean_dispatch_env):
    from vllm_fl.dispatch import reset_global_policy

    m = manager(*ALL())
    for env, expect_flagos in [
        ({"VLLM_FL_FLAGOS_BLACKLIST": "op,mm"}, False),
        ({"VLLM_FL_FLAGOS_BLACKLIST": "mm"}, True),
        ({"VLLM_FL_FLAGOS_WHITELIST": "mm"}, False),
        ({"VLLM_FL_FLAGOS_WHITELIST": "op"}, True),
        ({"USE_FLAGGEMS": "0"}, False),
        ({"VLLM_FL_PREFER_ENABLED": "0"}, False),
    ]:
        for var in (
            "VLLM_FL_FLAGOS_BLACKLIST",
            "VLLM_FL_FLAGOS_WHITELIST",
            "USE_FLAGGEMS",
            "VLLM_FL_PREFER_ENABLED",
        ):
            clean_dispatch_env.delenv(var, raising=False)
        for k, v in env.items():
            clean_dispatch_env.setenv(k, v)
        reset_global_policy()
        assert ("default.flagos" in order(m)) is expect_flagos, env
        assert "reference.torch" in order(m)


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


def test_set_global_policy_returns_previous():
    p = SelectionPolicy.from_dict(prefer="reference")
    old = set_global_policy(p)
    try:
        assert order(manager(*ALL()))[0] == "reference.torch"
    finally:
        set_global_policy(old)
