"""``vllm-fl``: one table of subcommands, working from any directory; the wheel carries the
generator inside the plugin (``vllm_fl._codegen`` with its templates and the plugin's ops.yaml)
and no generic top-level package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from codegen.resources import PROJECT_MANIFEST
from vllm_fl import cli

REPO = PROJECT_MANIFEST.parent


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vllm_fl.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_console_script_is_the_cli():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"vllm-fl": "vllm_fl.cli:main"}


def test_without_a_command_it_lists_every_command(capsys):
    assert cli.main([]) == 2
    out = capsys.readouterr().out
    for name in ("generate", "vendor", "explain", "verify"):
        assert f"\n  {name}" in out
    assert cli.main(["genrate"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "vllm-fl: unknown command 'genrate', expected one of generate, vendor, explain, verify, coverage\n"
    )


def test_a_subcommand_is_one_row(monkeypatch, capsys):
    monkeypatch.setitem(
        cli.COMMANDS, "hello", cli.Command("say hello", "tests.codegen.test_cli_and_wheel:hello")
    )
    assert cli.main(["hello", "x"]) == 7
    assert capsys.readouterr().out.endswith("vllm-fl hello ['x']\n")


def hello(argv: list[str], prog: str) -> int:
    print(prog, argv)
    return 7


def test_generate_check_works_from_any_directory(tmp_path):
    done = _run("codegen", "--check", cwd=tmp_path)  # codegen: generate's other name
    assert done.returncode == 0, done.stdout + done.stderr
    assert "generated files are up to date" in done.stdout
    done = _run("generate", "--check", cwd=REPO / "vllm_fl" / "dispatch")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("build")
    leftover = REPO / "build"  # setuptools builds in the tree: leave it as it was
    had_build = leftover.exists()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TMPDIR": str(build)},
    )
    if not had_build:
        shutil.rmtree(leftover, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    (path,) = out.glob("*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_carries_the_generator_inside_the_plugin(wheel):
    names = wheel.namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"vllm_fl", "vllm_plugin_fl-0.1.0.dist-info"}, tops
    for name in (
        "vllm_fl/cli.py",
        "vllm_fl/_codegen/cli.py",
        "vllm_fl/_codegen/manifest/__init__.py",
        "vllm_fl/_codegen/ops.yaml",
        "vllm_fl/_codegen/templates/register_ops.py.j2",
        "vllm_fl/_codegen/templates/vendor_package/vendor.yaml.j2",
    ):
        assert name in names, name
    assert wheel.read("vllm_fl/_codegen/ops.yaml") == PROJECT_MANIFEST.read_bytes()
    entry_points = wheel.read("vllm_plugin_fl-0.1.0.dist-info/entry_points.txt").decode()
    assert "[console_scripts]\nvllm-fl = vllm_fl.cli:main" in entry_points
