"""Where settings come from: precedence (VLLM_FL_CONFIG > environment > platform YAML > defaults),
every variable of the reference, and clear errors."""

import json
import logging

import pytest
from dispatch_helpers import cfg, user_file, write

from vllm_fl.dispatch import ConfigError, load_config
from vllm_fl.dispatch.config import loader as config_loader, values


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


@pytest.mark.parametrize(
    "op",
    [
        "per_token_group_quant_fp8",
        "w8a8_block_fp8_matmul",
        "fp8_scaled_mm",
        "scaled_int8_quant",
        "int8_scaled_mm",
        "wna16_gemm",
        "fused_experts_quant",
    ],
)
def test_cuda_keeps_the_quantized_ops_on_the_vendor_under_compile(op):
    """compile_prefer's reference would make Inductor dequantise every weight on every step: the
    shipped cuda.yaml lists the quantized layers' ops, and a per-op list holds while traced too."""
    policy = load_config({"VLLM_FL_PLATFORM": "cuda"}).policy
    assert policy.prefer_for(traced=True) == "reference"
    assert policy.order_for(op, traced=True) == (("vendor", "flagos", "reference"), True)


def test_cuda_traces_the_fp8_per_tensor_quantiser_under_compile():
    """vanilla vLLM runs its FP8 per-tensor / per-token quantiser from its PyTorch formula under
    compile, for Inductor to fuse it into the norm or activation before it: the shipped policy
    takes the vendor's kernel in eager and the traced reference under compile."""
    policy = load_config({"VLLM_FL_PLATFORM": "cuda"}).policy
    assert policy.order_for("scaled_fp8_quant", traced=False)[0][0] == "vendor"
    assert policy.order_for("scaled_fp8_quant", traced=True)[0][0] == "reference"


def test_platform_autodetected_and_unknown(monkeypatch):
    monkeypatch.setattr(config_loader, "detect_platform", lambda: "cuda")
    c = load_config({})
    assert c.platform == "cuda" and c.platform_file.endswith("config/cuda.yaml")
    assert c.sources["platform"] == "auto-detected"
    assert c.policy.deny_vendors == {"ascend"}  # from the shipped cuda.yaml
    with pytest.raises(
        ConfigError,
        match=r"VLLM_FL_PLATFORM='tpu': unknown platform; allowed: auto, ascend, cpu, cuda",
    ):
        load_config({"VLLM_FL_PLATFORM": "tpu"})


def test_platform_auto_accepted_by_the_dispatch_as_by_the_plugin(monkeypatch):
    from vllm_fl.dispatch.config import loader as config_loader

    monkeypatch.setattr(config_loader, "detect_platform", lambda: "cpu")
    c = load_config({"VLLM_FL_PLATFORM": "AUTO"})
    assert c.platform == "cpu" and c.sources["platform"] == "auto-detected"


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


def test_user_config_missing():
    with pytest.raises(ConfigError, match="VLLM_FL_CONFIG='/nonexistent/x.yaml': file not found"):
        cfg(VLLM_FL_CONFIG="/nonexistent/x.yaml")


@pytest.mark.parametrize(
    "name, text, match",
    [
        ("bad.yaml", "prefer: [unclosed\n", "invalid YAML"),
        (
            "u.yaml",
            "prefer: flagos\nprefered: vendor\n",
            r"u.yaml:prefered: unknown key; allowed keys: prefer, compile_prefer, strict",
        ),
        (
            "v.yaml",
            "prefer: gpu\n",
            r"v.yaml:prefer='gpu': invalid preference; allowed: flagos, vendor, reference",
        ),
        (
            "t.yaml",
            "op_backends:\n  rms_norm: [vendor, triton]\n",
            r"t.yaml:op_backends.rms_norm: invalid token 'triton'; allowed: flagos, reference, "
            r"vendor, vendor:<name>, impl:<impl_id>",
        ),
        (
            "b.yaml",
            "flagos_whitelist: [a]\nflagos_blacklist: [b]\n",
            "flagos_whitelist and flagos_blacklist are mutually exclusive",
        ),
        ("s.yaml", "strict: maybe\n", r"s.yaml:strict='maybe': invalid boolean"),
    ],
    ids=["syntax", "unknown-key", "bad-value", "bad-token", "white-and-black", "bad-bool"],
)
def test_user_config_bad(tmp_path, name, text, match):
    with pytest.raises(ConfigError, match=match):
        user_file(tmp_path, text, name)


def test_explicit_empty_mapping_means_built_in_defaults(tmp_path):
    p = user_file(tmp_path, "{}\n").policy
    assert p.prefer == "flagos" and p.sources["prefer"] == "default"


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


def test_the_moe_warm_up_is_on_unless_the_environment_turns_it_off():
    assert cfg().moe_warm_up and cfg().sources["moe_warm_up"] == "default"
    off = cfg(VLLM_FL_MOE_WARMUP="off")
    assert not off.moe_warm_up and off.sources["moe_warm_up"] == "env VLLM_FL_MOE_WARMUP"
    with pytest.raises(ConfigError, match="VLLM_FL_MOE_WARMUP"):
        cfg(VLLM_FL_MOE_WARMUP="maybe")


# --------------------------------------------------------------------------- compile_prefer


def test_compile_prefer_defaults_to_prefer_and_is_read_from_env_and_files(tmp_path):
    p = cfg().policy
    assert p.compile_prefer is None and not p.splits_traced
    assert p.order_for("op", traced=True) == p.order_for("op")
    p = cfg(VLLM_FL_PREFER="vendor", VLLM_FL_COMPILE_PREFER="Reference").policy
    assert (p.prefer, p.compile_prefer, p.splits_traced) == ("vendor", "reference", True)
    assert p.order_for("op", traced=True)[0][0] == "reference"
    assert p.sources["compile_prefer"] == "env VLLM_FL_COMPILE_PREFER"
    f = tmp_path / "c.yaml"
    f.write_text("prefer: flagos\ncompile_prefer: vendor\n")
    p = cfg(VLLM_FL_CONFIG=str(f)).policy
    assert (p.prefer, p.compile_prefer) == ("flagos", "vendor")


def test_env_prefer_applies_under_compile_unless_compile_prefer_is_set_too():
    shipped = cfg(VLLM_FL_PLATFORM="cuda").policy
    assert (shipped.prefer, shipped.compile_prefer) == ("vendor", "reference")
    p = cfg(VLLM_FL_PLATFORM="cuda", VLLM_FL_PREFER="flagos").policy
    assert (p.prefer, p.compile_prefer, p.splits_traced) == ("flagos", None, False)
    assert p.sources["compile_prefer"] == "env VLLM_FL_PREFER"
    p = cfg(VLLM_FL_PLATFORM="cuda", VLLM_FL_PREFER="flagos", VLLM_FL_COMPILE_PREFER="vendor")
    assert (p.policy.prefer, p.policy.compile_prefer) == ("flagos", "vendor")


@pytest.mark.parametrize(
    "env, message",
    [
        ({"VLLM_FL_COMPILE_PREFER": "inductor"}, "VLLM_FL_COMPILE_PREFER='inductor': invalid"),
    ],
)
def test_invalid_compile_prefer_names_source_value_and_choices(env, message):
    with pytest.raises(ConfigError, match=message) as info:
        cfg(**env)
    assert "flagos, vendor, reference" in str(info.value)


def test_invalid_compile_prefer_in_file_names_file_and_key(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("compile_prefer: fastest\n")
    with pytest.raises(ConfigError, match=r"c.yaml:compile_prefer='fastest': invalid"):
        cfg(VLLM_FL_CONFIG=str(f))
