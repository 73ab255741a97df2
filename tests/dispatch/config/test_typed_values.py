"""The two typed values of the configuration, ``DispatchConfig`` and ``SelectionPolicy``: one
written-out field per row of the settings table, and values parsed once, where they are read."""

import dataclasses
import typing

import pytest
from dispatch_helpers import cfg

from vllm_fl.dispatch import ConfigError, DispatchConfig, SelectionPolicy
from vllm_fl.dispatch.config import selection, settings


def test_dispatch_config_has_one_field_per_process_setting_in_table_order():
    names = [f.name for f in dataclasses.fields(DispatchConfig)]
    assert names == [
        "policy",
        *(s.name for s in settings.PROCESS_SETTINGS),
        "platform_file",
        "op_config_file",
        "sources",
        "overridden_env",
    ]


def test_the_typed_values_name_their_types():
    hints = typing.get_type_hints(DispatchConfig)
    assert hints["policy"] is SelectionPolicy and hints["log_level"] is int
    assert hints["plugin_modules"] == tuple[str, ...]
    assert typing.get_type_hints(SelectionPolicy)["allow_vendors"] == frozenset[str] | None


def test_selection_policy_has_one_field_per_policy_setting_with_its_default():
    fields = [f.name for f in dataclasses.fields(SelectionPolicy) if f.name != "sources"]
    assert sorted(fields) == sorted(s.name for s in settings.POLICY_SETTINGS)
    default = SelectionPolicy()
    for setting in settings.POLICY_SETTINGS:
        assert getattr(default, setting.name) == setting.default, setting.name
    assert list(selection.POLICY_FIELDS) == fields


def test_every_process_setting_is_a_config_field_and_every_other_a_policy_field():
    config = cfg()
    for setting in settings.SETTINGS:
        owner = config.policy if setting.in_policy else config
        assert hasattr(owner, setting.name), setting.name


@pytest.mark.parametrize(
    "setting, spellings",
    [
        ("prefer", ["flagos", "Vendor", " reference ", "gpu", None, 1]),
        ("compile_prefer", [None, "vendor", "VENDOR", "x"]),
        ("strict", [True, False, "false", "1", 1, 0, 2, "maybe"]),
        ("deny_vendors", [frozenset({"cuda"}), frozenset({"CUDA"}), {"amd"}, ["a", "b"], "a, B"]),
        ("allow_vendors", [None, frozenset(), frozenset({"a.b-c_1"}), frozenset({" a"})]),
        (
            "per_op_order",
            [
                {},
                {"op": ("vendor", "flagos")},
                {"op": ("vendor:cuda", "impl:my.impl")},
                {"op": ("Vendor",)},
                {"op": ["vendor"]},
                {" op": ("vendor",)},
                {"op": ("vendor", "vendor")},
                {"op": ()},
                {"op": ("vendor: cuda",)},
                {"op": "vendor|flagos"},
            ],
        ),
    ],
)
def test_a_check_holds_exactly_for_what_its_parser_returns(setting, spellings):
    """What ``SelectionPolicy`` takes as it is, its parser would have returned unchanged; and
    everything the parser returns is taken as it is."""
    row = settings.BY_NAME[setting]
    for value in spellings:
        try:
            parsed = row.parse(value, setting)
        except ConfigError:
            assert not row.holds(value), value
            continue
        assert row.holds(parsed), (value, parsed)
        if row.holds(value):
            assert parsed == value and type(parsed) is type(value), value


def test_a_parsed_value_is_taken_as_it_is():
    names = frozenset({"cuda"})
    tokens = ("vendor:cuda", "reference")
    policy = SelectionPolicy(deny_vendors=names, per_op_order={"op": tokens})
    assert policy.deny_vendors is names and policy.per_op_order["op"] is tokens


def test_the_configuration_parses_each_value_once(monkeypatch):
    """The loader parses every variable with its row's parser; the policy it builds parses
    nothing again."""

    def parsed_again(value, source):
        raise AssertionError(f"{source}={value!r} parsed again")

    monkeypatch.setattr(
        selection,
        "POLICY_FIELDS",
        {
            name: dataclasses.replace(row, parse=parsed_again)
            for name, row in selection.POLICY_FIELDS.items()
        },
    )
    config = cfg(
        VLLM_FL_PREFER="Vendor",
        VLLM_FL_COMPILE_PREFER="REFERENCE",
        VLLM_FL_STRICT="yes",
        VLLM_FL_PER_OP="rms_norm=Vendor:CUDA|flagos",
        VLLM_FL_ALLOW_VENDORS="CUDA, ascend",
        VLLM_FL_FLAGOS_BLACKLIST="MM",
        VLLM_FL_OOT_WHITELIST="RMSNorm",
        VLLM_FL_PREFER_ENABLED="on",
    )
    policy = config.policy
    assert (policy.prefer, policy.compile_prefer, policy.strict) == ("vendor", "reference", True)
    assert dict(policy.per_op_order) == {"rms_norm": ("vendor:cuda", "flagos")}
    assert policy.allow_vendors == {"cuda", "ascend"} and policy.oot_whitelist == {"rmsnorm"}
    with pytest.raises(AssertionError, match="strict='false' parsed again"):
        SelectionPolicy(strict="false")
