"""The settings table: one row per setting, documented; the plugin's platform hook reads the
environment through it (``read_env``) like the dispatch does."""

import logging
import os
import subprocess
import sys

import pytest

import vllm_fl
from vllm_fl.dispatch import ConfigError, load_config


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
    assert vllm_fl.register_platform() == "vllm_fl.platform.cpu.PlatformFLCpu"
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

    from vllm_fl.dispatch.config import settings

    envs = [e.name for s in settings.SETTINGS for e in s.env]
    assert len(envs) == len(set(envs))
    keys = [s.file_key for s in settings.SETTINGS if s.file_key]
    assert len(keys) == len(set(keys))
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    section = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    for name in envs + keys:
        assert f"`{name}`" in section, f"{name} is not documented in README Configuration"


def _readme_defaults() -> dict[str, str]:
    """variable -> default column of the README's configuration table."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    section = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[2]
    return rows


def test_every_variable_has_its_default_in_the_readme():
    from vllm_fl.dispatch.config import settings

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
    """Variables read outside the settings table (os.environ / getenv with a literal name).
    ``vllm_fl.testing`` (the harness of the tests and benchmarks) reads vLLM's own variables of
    the engine it runs, which are not the plugin's settings."""
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    readme = (repo / "README.md").read_text()
    pattern = re.compile(r"(?:environ(?:\.get)?[\[(]|getenv\()\s*[\"']([A-Z][A-Z0-9_]+)[\"']")
    read = set()
    for folder in ("vllm_fl", "codegen"):
        for path in (repo / folder).rglob("*.py"):
            if path.is_relative_to(repo / "vllm_fl" / "testing"):
                continue
            read |= set(pattern.findall(path.read_text()))
    assert read, "the scan found no variable at all"
    missing = sorted(name for name in read if f"`{name}" not in readme)
    assert not missing, f"read by the code, not in README.md: {missing}"
