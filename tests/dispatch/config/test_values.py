"""Value parsers: what each kind of setting accepts, and the errors naming source, value and what
is allowed."""

import pytest
from dispatch_helpers import cfg, user_file

from vllm_fl.dispatch import ConfigError, SelectionPolicy, load_config


@pytest.mark.parametrize(
    "env, match",
    [
        (
            {"VLLM_FL_PREFER": "gpu"},
            r"VLLM_FL_PREFER='gpu': invalid preference; allowed: flagos, vendor, reference",
        ),
        (
            {"VLLM_FL_STRICT": "maybe"},
            r"VLLM_FL_STRICT='maybe': invalid boolean; allowed: 1/0, true/false",
        ),
        ({"VLLM_FL_STRICT": "2"}, r"VLLM_FL_STRICT='2'"),
        ({"VLLM_FL_PER_OP": "rms_norm"}, r"VLLM_FL_PER_OP='rms_norm': malformed entry 'rms_norm'"),
        ({"VLLM_FL_PER_OP": "rms_norm="}, r"malformed entry"),
        (
            {"VLLM_FL_PER_OP": "rms_norm=vendor|cuda"},
            r"VLLM_FL_PER_OP.rms_norm: invalid token 'cuda'; allowed:",
        ),
        ({"VLLM_FL_PER_OP": "a=flagos;a=vendor"}, r"op 'a' is listed twice"),
        ({"VLLM_FL_PER_OP": "a=flagos||vendor"}, r"invalid token ''"),
        ({"VLLM_FL_FLAGOS_WHITELIST": "a", "VLLM_FL_FLAGOS_BLACKLIST": "b"}, "mutually exclusive"),
        (
            {"VLLM_FL_OOT_WHITELIST": "a", "VLLM_FL_OOT_BLACKLIST": "b"},
            "VLLM_FL_OOT_WHITELIST='a' and VLLM_FL_OOT_BLACKLIST='b' are mutually exclusive",
        ),
        (
            {"USE_FLAGGEMS": "maybe"},
            r"USE_FLAGGEMS='maybe': invalid boolean; allowed: 1/0, true/false",
        ),
        ({"VLLM_FL_PREFER_ENABLED": "nah"}, r"VLLM_FL_PREFER_ENABLED='nah'"),
        ({"VLLM_FL_OOT_ENABLED": "x"}, r"VLLM_FL_OOT_ENABLED='x'"),
        ({"VLLM_FL_DISPATCH_DEBUG": "x"}, r"VLLM_FL_DISPATCH_DEBUG='x'"),
        (
            {"VLLM_FL_LOG_LEVEL": "LOUD"},
            r"VLLM_FL_LOG_LEVEL='LOUD': invalid log level; allowed: DEBUG, INFO, WARNING, ERROR",
        ),
        ({"VLLM_FL_ALLOW_VENDORS": "cu da"}, r"VLLM_FL_ALLOW_VENDORS: invalid vendor name 'cu da'"),
        (
            {"VLLM_FL_PLUGIN_MODULES": "good.mod,bad-mod"},
            r"VLLM_FL_PLUGIN_MODULES='good.mod,bad-mod': 'bad-mod' is not a module name",
        ),
        (
            {"VLLM_FL_OP_CONFIG": "/nonexistent.json"},
            r"VLLM_FL_OP_CONFIG='/nonexistent.json': file not found",
        ),
        (
            {"FLAGCX_PATH": "/nonexistent/flagcx"},
            r"FLAGCX_PATH='/nonexistent/flagcx': not an existing directory",
        ),
        (
            {"FLAGGEMS_ENABLE_OPLIST_PATH": "/nonexistent/dir/ops.txt"},
            r"FLAGGEMS_ENABLE_OPLIST_PATH='/nonexistent/dir/ops.txt': directory '/nonexistent/dir' does not exist",
        ),
    ],
)
def test_bad_env_values_name_source_value_and_allowed(env, match):
    with pytest.raises(ConfigError, match=match):
        cfg(**env)


@pytest.mark.parametrize(
    "raw, expected", [("yes", True), ("On", True), ("0", False), ("false", False)]
)
def test_boolean_spelled_alike_everywhere(tmp_path, raw, expected):
    """VLLM_FL_STRICT, the file key ``strict`` and the constructor read one boolean syntax."""
    assert load_config({"VLLM_FL_PLATFORM": "cpu", "VLLM_FL_STRICT": raw}).policy.strict is expected
    path = tmp_path / "c.yaml"
    path.write_text(f"strict: '{raw}'\n")
    env = {"VLLM_FL_PLATFORM": "cpu", "VLLM_FL_CONFIG": str(path)}
    assert load_config(env).policy.strict is expected
    assert SelectionPolicy(strict=raw).strict is expected


@pytest.mark.parametrize(
    "var",
    [
        "VLLM_FL_ALLOW_VENDORS",
        "VLLM_FL_DENY_VENDORS",
        "VLLM_FL_FLAGOS_BLACKLIST",
        "VLLM_FL_FLAGOS_WHITELIST",
        "VLLM_FL_OOT_BLACKLIST",
        "VLLM_FL_OOT_WHITELIST",
        "VLLM_FL_PLUGIN_MODULES",
    ],
)
@pytest.mark.parametrize("value", [",", " , ,"])
def test_list_of_only_separators_is_an_error(var, value):
    with pytest.raises(ConfigError, match=rf"{var}={value!r}: no names, only separators"):
        cfg(**{var: value})


def test_per_op_of_only_separators_is_an_error():
    with pytest.raises(ConfigError, match=r"VLLM_FL_PER_OP=';;': no 'op=tokens' entry"):
        cfg(VLLM_FL_PER_OP=";;")


def test_empty_yaml_whitelist_allows_nothing(tmp_path):
    p = user_file(tmp_path, "allow_vendors: []\n").policy
    assert p.allow_vendors == frozenset()


def test_oplist_path_that_is_a_directory(tmp_path):
    with pytest.raises(
        ConfigError, match=r"FLAGGEMS_ENABLE_OPLIST_PATH='.*': is a directory; expected a file path"
    ):
        cfg(FLAGGEMS_ENABLE_OPLIST_PATH=str(tmp_path))
