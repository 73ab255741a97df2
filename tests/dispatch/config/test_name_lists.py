"""The white/black list rules, on their own: which names pass, which pairs exclude each other,
and which list a higher source replaces."""

import pytest

from vllm_fl.dispatch import ConfigError
from vllm_fl.dispatch.config.lists import check_exclusive, displaced, verdict
from vllm_fl.dispatch.config.lists import LIST_FAMILIES


def test_exclusive_pairs_come_from_the_settings_table():
    assert dict(LIST_FAMILIES) == {
        "flagos": ("flagos_whitelist", "flagos_blacklist"),
        "oot": ("oot_whitelist", "oot_blacklist"),
    }


@pytest.mark.parametrize(
    "names, whitelist, blacklist, expected",
    [
        (["cuda"], None, frozenset(), None),  # no lists: everything passes
        (["cuda"], frozenset({"cuda"}), frozenset(), None),
        (["cuda"], frozenset({"ascend"}), frozenset(), "whitelist"),
        (["cuda"], frozenset(), frozenset(), "whitelist"),  # an empty whitelist allows nothing
        (["cuda"], None, frozenset({"cuda"}), "blacklist"),
        (["cuda"], frozenset({"cuda"}), frozenset({"cuda"}), "blacklist"),  # both: denied
        (["rmsnorm", "rms_norm"], frozenset({"rms_norm"}), frozenset(), None),  # any alias
        (["rmsnorm", "rms_norm"], None, frozenset({"rmsnorm"}), "blacklist"),
    ],
)
def test_verdict(names, whitelist, blacklist, expected):
    assert verdict(names, whitelist, blacklist) == expected


def test_check_exclusive_names_the_pair_as_the_source_shows_it():
    check_exclusive({"flagos_whitelist", "oot_blacklist", "allow_vendors"}.__contains__)
    with pytest.raises(
        ConfigError, match=r"^c.yaml: oot_whitelist and oot_blacklist are mutually exclusive"
    ):
        check_exclusive({"oot_whitelist", "oot_blacklist"}.__contains__, "c.yaml: ")
    with pytest.raises(ConfigError, match=r"^A='x' and B='y' are mutually exclusive; set only one"):
        check_exclusive(
            {"flagos_whitelist", "flagos_blacklist"}.__contains__,
            label={"flagos_whitelist": "A='x'", "flagos_blacklist": "B='y'"}.get,
        )
    # vendors may be combined: allow_vendors and deny_vendors are no exclusive pair
    check_exclusive({"allow_vendors", "deny_vendors"}.__contains__)


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"oot_whitelist": frozenset({"rmsnorm"})}, {"oot_blacklist"}),
        ({"oot_whitelist": None}, set()),  # no whitelist replaces nothing
        ({"flagos_blacklist": frozenset()}, {"flagos_whitelist"}),
        ({"flagos_whitelist": frozenset(), "flagos_blacklist": frozenset()}, set()),
        ({"deny_vendors": frozenset({"cuda"}), "prefer": "vendor"}, set()),
    ],
)
def test_displaced(changes, expected):
    assert displaced(changes) == expected
