"""SelectionPolicy: validated whatever the entry point, and the order it gives: allow/deny ->
availability -> per-op tokens or prefer's order -> priority."""

import dataclasses

import pytest
from dispatch_helpers import ALL, candidates, cfg, impl, manager, order, vendor_manager

from vllm_fl.dispatch import ConfigError, SelectionPolicy, policy_context


def test_constructor_rejects_invalid_preference():
    with pytest.raises(
        ConfigError,
        match=r"SelectionPolicy:prefer='invalid': invalid preference; allowed: flagos, vendor, "
        r"reference",
    ):
        SelectionPolicy(prefer="invalid")
    with pytest.raises(ConfigError, match=r"SelectionPolicy:compile_prefer='gpu'"):
        SelectionPolicy(compile_prefer="gpu")


def test_constructor_parses_booleans_like_the_environment():
    assert SelectionPolicy(strict="false").strict is False
    assert SelectionPolicy(strict="1").strict is True
    assert SelectionPolicy(use_flaggems="off").use_flaggems is False
    with pytest.raises(ConfigError, match=r"SelectionPolicy:strict='maybe': invalid boolean"):
        SelectionPolicy(strict="maybe")
    with pytest.raises(ConfigError, match=r"SelectionPolicy:enabled=2"):
        SelectionPolicy(enabled=2)


def test_constructor_lower_cases_vendor_names_so_they_match():
    p = SelectionPolicy(deny_vendors={"AMD"})
    assert p.deny_vendors == frozenset({"amd"})
    m = vendor_manager("amd", "cuda")
    with policy_context(p):
        assert candidates(m) == ["vendor.cuda", "reference.torch"]
    with policy_context(SelectionPolicy(allow_vendors=["CUDA"])):
        assert candidates(m) == ["vendor.cuda", "reference.torch"]


def test_constructor_normalises_lists_tokens_and_rejects_conflicts():
    p = SelectionPolicy(per_op_order={"op": "Vendor:CUDA|Reference"}, flagos_blacklist="MM, zeros")
    assert dict(p.per_op_order) == {"op": ("vendor:cuda", "reference")}
    assert p.flagos_blacklist == frozenset({"mm", "zeros"})
    with pytest.raises(ConfigError, match=r"SelectionPolicy:per_op_order.op: invalid token 'gpu'"):
        SelectionPolicy(per_op_order={"op": ["gpu"]})
    with pytest.raises(ConfigError, match="flagos_whitelist and flagos_blacklist are mutually"):
        SelectionPolicy(flagos_whitelist=["a"], flagos_blacklist=["b"])
    with pytest.raises(ConfigError, match=r"SelectionPolicy:deny_vendors: invalid vendor name"):
        SelectionPolicy(deny_vendors=["cu da"])


def test_replace_and_dataclasses_replace_validate():
    p = SelectionPolicy()
    with pytest.raises(ConfigError, match="prefer='bogus'"):
        dataclasses.replace(p, prefer="bogus")
    with pytest.raises(ConfigError, match="prefer='bogus'"):
        p.replace(prefer="bogus")
    assert p.replace(strict="yes").strict is True


def test_selection_policy_from_dict_validates():
    with pytest.raises(ConfigError, match=r"SelectionPolicy.from_dict:prefer='x'"):
        SelectionPolicy.from_dict(prefer="x")
    with pytest.raises(ConfigError, match=r"per_op_order.op: invalid token 'bogus'"):
        SelectionPolicy.from_dict(per_op_order={"op": ["bogus"]})
    with pytest.raises(ConfigError, match="unknown setting"):
        SelectionPolicy.from_dict(prefered="vendor")
    p = SelectionPolicy.from_dict(per_op_order={"op": "Vendor:CUDA|impl:My.Impl"})
    assert p.per_op_order["op"] == ("vendor:cuda", "impl:my.impl")
    q = p.replace(strict=True)
    assert q.strict and q.per_op_order == p.per_op_order and q.sources["strict"] == "runtime"


# --------------------------------------------------------------------------- order


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


# --------------------------------------------------------------------------- OOT classes


def test_oot_allowed():
    assert cfg().policy.oot_allowed("RMSNorm", "rms_norm")
    p = cfg(VLLM_FL_OOT_BLACKLIST="rms_norm").policy
    assert not p.oot_allowed("RMSNorm", "rms_norm") and p.oot_allowed("SiluAndMul", "silu_and_mul")
    p = cfg(VLLM_FL_OOT_WHITELIST="SiluAndMul").policy
    assert p.oot_allowed("SiluAndMul") and not p.oot_allowed("RMSNorm", "rms_norm")
    assert not cfg(VLLM_FL_OOT_ENABLED="0").policy.oot_allowed("RMSNorm")
    assert not cfg(VLLM_FL_PREFER_ENABLED="false").policy.oot_allowed("RMSNorm")
