"""Configuration: precedence, every variable of the reference, and clear errors."""

import json
import logging

import pytest

from vllm_fl.dispatch import ConfigError, SelectionPolicy, get_policy, load_config, oot_allowed
from vllm_fl.dispatch import config_loader, values
from vllm_fl.dispatch import policy as pol


def cfg(**env):
    return load_config({"VLLM_FL_PLATFORM": "cpu", **env})


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_defaults():
    c = cfg()
    p = c.policy
    assert (p.prefer, p.strict, dict(p.per_op_order), p.allow_vendors, p.deny_vendors) == (
        "flagos",
        False,
        {},
        None,
        frozenset(),
    )
    assert p.enabled and p.use_flaggems and p.oot_enabled
    assert all(src == "default" for src in p.sources.values())
    assert c.log_level == logging.INFO and not c.debug and c.plugin_modules == ()
    assert c.flaggems_enable_oplist_path == "/tmp/flaggems_enable_oplist.txt"
    assert c.flagcx_path is None and c.platform == "cpu"


def test_env_vars_set_policy_with_sources():
    c = cfg(
        VLLM_FL_PREFER="Vendor",
        VLLM_FL_STRICT="1",
        VLLM_FL_PER_OP="rms_norm=vendor|FLAGOS;silu=reference",
        VLLM_FL_ALLOW_VENDORS="cuda, ascend",
        VLLM_FL_DENY_VENDORS="ascend",
        USE_FLAGGEMS="false",
        VLLM_FL_FLAGOS_BLACKLIST="mm,zeros",
        VLLM_FL_OOT_ENABLED="0",
        VLLM_FL_OOT_BLACKLIST="RMSNorm",
        VLLM_FL_PREFER_ENABLED="false",
    )
    p = c.policy
    assert p.prefer == "vendor" and p.strict is True
    assert dict(p.per_op_order) == {"rms_norm": ("vendor", "flagos"), "silu": ("reference",)}
    assert p.allow_vendors == {"cuda", "ascend"} and p.deny_vendors == {"ascend"}
    assert not p.use_flaggems and p.flagos_blacklist == {"mm", "zeros"}
    assert not p.oot_enabled and p.oot_blacklist == {"rmsnorm"} and not p.enabled
    assert p.sources["prefer"] == "env VLLM_FL_PREFER"
    assert p.sources["per_op_order"] == "env VLLM_FL_PER_OP"
    assert p.sources["enabled"] == "env VLLM_FL_PREFER_ENABLED"


def test_platform_yaml_then_env_override(tmp_path, monkeypatch):
    monkeypatch.setattr(values, "CONFIG_DIR", tmp_path)
    write(
        tmp_path,
        "ascend.yaml",
        "prefer: vendor\nflagos_blacklist: [to_copy, zeros]\nstrict: true\n",
    )
    write(tmp_path, "cuda.yaml", "")
    p = load_config({"VLLM_FL_PLATFORM": "ASCEND"}).policy
    assert p.prefer == "vendor" and p.flagos_blacklist == {"to_copy", "zeros"} and p.strict
    assert p.sources["prefer"] == f"platform YAML {tmp_path / 'ascend.yaml'}"
    # env overrides one item, the rest stays from the platform file
    p = load_config({"VLLM_FL_PLATFORM": "ascend", "VLLM_FL_PREFER": "reference"}).policy
    assert p.prefer == "reference" and p.flagos_blacklist == {"to_copy", "zeros"}
    assert p.sources["prefer"] == "env VLLM_FL_PREFER"
    # an env list replaces the config list, never merges
    p = load_config({"VLLM_FL_PLATFORM": "ascend", "VLLM_FL_FLAGOS_BLACKLIST": "a,b"}).policy
    assert p.flagos_blacklist == {"a", "b"}
    # an env whitelist ignores every blacklist
    p = load_config({"VLLM_FL_PLATFORM": "ascend", "VLLM_FL_FLAGOS_WHITELIST": "rms_norm"}).policy
    assert p.flagos_whitelist == {"rms_norm"} and p.flagos_blacklist == frozenset()


def test_platform_autodetected_and_unknown(monkeypatch):
    monkeypatch.setattr(config_loader, "detect_platform", lambda: "cuda")
    c = load_config({})
    assert c.platform == "cuda" and c.platform_file.endswith("config/cuda.yaml")
    assert c.sources["platform"] == "auto-detected"
    assert c.policy.deny_vendors == {"ascend"}  # from the shipped cuda.yaml
    with pytest.raises(
        ConfigError, match=r"VLLM_FL_PLATFORM='tpu': unknown platform; allowed: auto, ascend, cpu, cuda"
    ):
        load_config({"VLLM_FL_PLATFORM": "tpu"})


def test_user_config_file_is_complete_override(tmp_path, caplog):
    path = write(
        tmp_path,
        "my.yaml",
        "prefer: vendor\nstrict: true\nallow_vendors: [cuda]\ndeny_vendors: [ascend]\n"
        "op_backends:\n  rms_norm: [vendor, flagos]\n  silu_and_mul: [vendor:cuda, flagos, reference]\n"
        "flagos_blacklist: [to_copy]\noot_blacklist: [fused_moe]\nuse_flaggems: true\noot_enabled: true\n",
    )
    caplog.set_level(logging.WARNING, logger="vllm_fl.dispatch")
    c = cfg(VLLM_FL_CONFIG=path, VLLM_FL_PREFER="reference", VLLM_FL_FLAGOS_BLACKLIST="x")
    p = c.policy
    assert p.prefer == "vendor" and p.strict and p.allow_vendors == {"cuda"}
    assert dict(p.per_op_order) == {
        "rms_norm": ("vendor", "flagos"),
        "silu_and_mul": ("vendor:cuda", "flagos", "reference"),
    }
    assert p.flagos_blacklist == {"to_copy"} and p.oot_blacklist == {"fused_moe"}
    assert p.sources["prefer"] == f"config file {path}"
    assert c.platform_file is None
    assert c.overridden_env == ("VLLM_FL_PREFER", "VLLM_FL_FLAGOS_BLACKLIST")
    assert "ignoring VLLM_FL_PREFER, VLLM_FL_FLAGOS_BLACKLIST" in caplog.text


def test_user_config_missing_or_bad(tmp_path):
    with pytest.raises(ConfigError, match="VLLM_FL_CONFIG='/nonexistent/x.yaml': file not found"):
        cfg(VLLM_FL_CONFIG="/nonexistent/x.yaml")
    bad = write(tmp_path, "bad.yaml", "prefer: [unclosed\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        cfg(VLLM_FL_CONFIG=bad)
    unknown = write(tmp_path, "u.yaml", "prefer: flagos\nprefered: vendor\n")
    with pytest.raises(
        ConfigError, match=r"u.yaml:prefered: unknown key; allowed keys: prefer, compile_prefer, strict"
    ):
        cfg(VLLM_FL_CONFIG=unknown)
    badval = write(tmp_path, "v.yaml", "prefer: gpu\n")
    with pytest.raises(
        ConfigError,
        match=r"v.yaml:prefer='gpu': invalid preference; allowed: flagos, vendor, reference",
    ):
        cfg(VLLM_FL_CONFIG=badval)
    badtok = write(tmp_path, "t.yaml", "op_backends:\n  rms_norm: [vendor, triton]\n")
    with pytest.raises(
        ConfigError,
        match=r"t.yaml:op_backends.rms_norm: invalid token 'triton'; allowed: flagos, reference, vendor, vendor:<name>, impl:<impl_id>",
    ):
        cfg(VLLM_FL_CONFIG=badtok)
    both = write(tmp_path, "b.yaml", "flagos_whitelist: [a]\nflagos_blacklist: [b]\n")
    with pytest.raises(
        ConfigError, match="flagos_whitelist and flagos_blacklist are mutually exclusive"
    ):
        cfg(VLLM_FL_CONFIG=both)
    strict = write(tmp_path, "s.yaml", "strict: maybe\n")
    with pytest.raises(ConfigError, match=r"s.yaml:strict='maybe': invalid boolean"):
        cfg(VLLM_FL_CONFIG=strict)


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


def test_op_config_json(tmp_path, caplog):
    path = write(
        tmp_path, "ops.json", json.dumps({"op_backends": {"rms_norm": ["reference", "flagos"]}})
    )
    p = cfg(VLLM_FL_OP_CONFIG=path).policy
    assert dict(p.per_op_order) == {"rms_norm": ("reference", "flagos")}
    assert p.sources["per_op_order"] == f"env VLLM_FL_OP_CONFIG ({path})"
    caplog.set_level(logging.WARNING, logger="vllm_fl.dispatch")
    p = cfg(VLLM_FL_OP_CONFIG=path, VLLM_FL_PER_OP="rms_norm=vendor").policy
    assert dict(p.per_op_order) == {"rms_norm": ("vendor",)}
    assert "VLLM_FL_OP_CONFIG" in caplog.text and "overridden by VLLM_FL_PER_OP" in caplog.text
    wrong = write(tmp_path, "w.json", json.dumps({"rms_norm": ["reference"]}))
    with pytest.raises(ConfigError, match="exactly the key 'op_backends'"):
        cfg(VLLM_FL_OP_CONFIG=wrong)


def test_process_settings(tmp_path):
    c = cfg(
        VLLM_FL_LOG_LEVEL="warning",
        VLLM_FL_DISPATCH_DEBUG="1",
        VLLM_FL_PLUGIN_MODULES="a.b, c",
        FLAGCX_PATH=str(tmp_path),
        FLAGGEMS_ENABLE_OPLIST_PATH=str(tmp_path / "ops.txt"),
    )
    assert c.log_level == logging.WARNING and c.debug
    assert c.plugin_modules == ("a.b", "c")
    assert c.flagcx_path == str(tmp_path) and c.sources["flagcx_path"] == "env FLAGCX_PATH"
    assert c.flaggems_enable_oplist_path == str(tmp_path / "ops.txt")
    assert cfg(VLLM_FL_DISPATCH_DEBUG="1").log_level == logging.DEBUG


def test_log_level_applies_to_dispatch_logger(clean_dispatch_env):
    clean_dispatch_env.setenv("VLLM_FL_LOG_LEVEL", "ERROR")
    pol.reset_global_policy()
    assert logging.getLogger("vllm_fl.dispatch").level == logging.ERROR
    clean_dispatch_env.setenv("VLLM_FL_LOG_LEVEL", "bogus")
    with pytest.raises(ConfigError, match="VLLM_FL_LOG_LEVEL='bogus'"):
        pol.reset_global_policy()


def test_oot_allowed():
    assert cfg().policy.oot_allowed("RMSNorm", "rms_norm")
    p = cfg(VLLM_FL_OOT_BLACKLIST="rms_norm").policy
    assert not p.oot_allowed("RMSNorm", "rms_norm") and p.oot_allowed("SiluAndMul", "silu_and_mul")
    p = cfg(VLLM_FL_OOT_WHITELIST="SiluAndMul").policy
    assert p.oot_allowed("SiluAndMul") and not p.oot_allowed("RMSNorm", "rms_norm")
    assert not cfg(VLLM_FL_OOT_ENABLED="0").policy.oot_allowed("RMSNorm")
    assert not cfg(VLLM_FL_PREFER_ENABLED="false").policy.oot_allowed("RMSNorm")


def test_global_oot_allowed_and_reset_rereads_env(clean_dispatch_env):
    assert oot_allowed("RMSNorm")
    clean_dispatch_env.setenv("VLLM_FL_OOT_BLACKLIST", "RMSNorm")
    assert oot_allowed("RMSNorm")  # read once
    pol.reset_global_policy()
    assert (
        not oot_allowed("RMSNorm")
        and get_policy().sources["oot_blacklist"] == "env VLLM_FL_OOT_BLACKLIST"
    )


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
