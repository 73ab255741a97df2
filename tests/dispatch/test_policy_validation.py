"""One validated policy whatever the entry point: the constructor, ``dataclasses.replace``, every
``with_*`` helper and ``policy_context`` parse and normalise each setting exactly like the
environment, the YAML files and ``from_dict`` do."""

import dataclasses
import logging
import os
import subprocess
import sys

import pytest

import vllm_fl
from vllm_fl.dispatch import (
    ConfigError,
    OpImpl,
    OpManager,
    OpRegistry,
    SelectionPolicy,
    get_policy,
    load_config,
    policy_context,
    with_allowed_vendors,
    with_denied_vendors,
    with_preference,
    with_strict_mode,
)


def fn(x):
    return x


def vendor_manager(*vendors):
    reg = OpRegistry()
    reg.register_many(
        [OpImpl("op", f"vendor.{v}", "vendor", fn, vendor=v) for v in vendors]
        + [OpImpl("op", "reference.torch", "reference", fn)]
    )
    return OpManager(registry=reg)


def candidates(manager):
    return [i.impl_id for i in manager.evaluate("op")[0]]


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


def test_policy_context_accepts_validated_changes():
    with policy_context(prefer="VENDOR", strict="true") as p:
        assert get_policy() is p and (p.prefer, p.strict) == ("vendor", True)
        assert p.sources["prefer"] == "policy_context"
    with pytest.raises(ConfigError, match=r"policy_context:prefer='nope'"):
        policy_context(prefer="nope")
    with pytest.raises(TypeError, match="expected SelectionPolicy"):
        policy_context({"prefer": "vendor"})


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


# --------------------------------------------------------------------------- one parser per setting


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


def test_platform_auto_accepted_by_the_dispatch_as_by_the_plugin(monkeypatch):
    from vllm_fl.dispatch import config_loader

    monkeypatch.setattr(config_loader, "detect_platform", lambda: "cpu")
    c = load_config({"VLLM_FL_PLATFORM": "AUTO"})
    assert c.platform == "cpu" and c.sources["platform"] == "auto-detected"


def test_plugin_switch_maybe_is_an_error_for_the_platform_hook(monkeypatch, caplog):
    monkeypatch.setenv("VLLM_FL_PLATFORM", "cpu")
    monkeypatch.setenv("VLLM_FL_PREFER_ENABLED", "maybe")
    caplog.set_level(logging.ERROR, logger="vllm_fl.vllm")
    assert vllm_fl.register_platform() is None
    assert "VLLM_FL_PREFER_ENABLED='maybe': invalid boolean" in caplog.text
    with pytest.raises(ConfigError, match="VLLM_FL_PREFER_ENABLED='maybe'"):
        load_config({"VLLM_FL_PLATFORM": "cpu", "VLLM_FL_PREFER_ENABLED": "maybe"})


def test_plugin_platform_hook_parses_like_the_dispatch(monkeypatch, caplog):
    monkeypatch.setenv("VLLM_FL_PREFER_ENABLED", " On ")
    monkeypatch.setenv("VLLM_FL_PLATFORM", " CPU ")
    assert vllm_fl.register_platform() == "vllm_fl.platform.PlatformFLCpu"
    monkeypatch.setenv("VLLM_FL_PLATFORM", "tpu")
    caplog.set_level(logging.ERROR, logger="vllm_fl.vllm")
    assert vllm_fl.register_platform() is None
    assert (
        "VLLM_FL_PLATFORM='tpu': unknown platform; allowed: auto, ascend, cpu, cuda" in caplog.text
    )


def test_platform_hook_parsers_import_neither_torch_nor_vllm():
    code = (
        "import sys, vllm_fl\n"
        "assert vllm_fl.register_platform() is None\n"
        "bad = [m for m in ('torch', 'vllm') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    env = {**os.environ, "VLLM_FL_PLATFORM": "ascend", "VLLM_FL_PREFER_ENABLED": "yes"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_every_setting_has_one_row_and_is_documented():
    from pathlib import Path

    from vllm_fl.dispatch import settings

    envs = [e.name for s in settings.SETTINGS for e in s.env]
    assert len(envs) == len(set(envs))
    keys = [s.file_key for s in settings.SETTINGS if s.file_key]
    assert len(keys) == len(set(keys))
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    for name in envs + keys:
        assert f"`{name}`" in section, f"{name} is not documented in README Configuration"


def _readme_defaults() -> dict[str, str]:
    """variable -> default column of the README's configuration table."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[2]
    return rows


def test_every_variable_has_its_default_in_the_readme():
    from vllm_fl.dispatch import settings

    rows = _readme_defaults()
    for setting in settings.SETTINGS:
        for env in setting.env:
            cell = rows.get(env.name)
            assert cell not in (None, "", "–", "-"), f"{env.name}: no default in README ({cell!r})"
            default = setting.default
            if isinstance(default, bool):
                spelled = ("`true`", "`1`") if default else ("`false`", "`0`")
                assert cell.startswith(
                    spelled
                ), f"{env.name}: README says {cell!r}, default {default}"
            elif isinstance(default, str):
                assert (
                    f"`{default}`" in cell
                ), f"{env.name}: README says {cell!r}, default {default!r}"


def test_every_variable_the_code_reads_is_in_the_readme():
    """Variables read outside the settings table (os.environ / getenv with a literal name)."""
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    readme = (repo / "README.md").read_text()
    pattern = re.compile(r"(?:environ(?:\.get)?[\[(]|getenv\()\s*[\"']([A-Z][A-Z0-9_]+)[\"']")
    read = set()
    for folder in ("vllm_fl", "codegen"):
        for path in (repo / folder).rglob("*.py"):
            read |= set(pattern.findall(path.read_text()))
    assert read, "the scan found no variable at all"
    missing = sorted(name for name in read if f"`{name}" not in readme)
    assert not missing, f"read by the code, not in README.md: {missing}"
