"""The fork server: a forked run starts as a fresh interpreter would (environment, working
directory, path, command line, fds, output, exit status), a run leaves nothing behind for the
next one of the same server, and where no server can stand in the run goes to a fresh
interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vllm_fl.testing import zygotes
from vllm_fl.testing.launch import _with_package

PROBE = "tests.support.zygote_probe"
ARGV = [sys.executable, "-m", PROBE]


@pytest.fixture
def probe_preload(monkeypatch):
    """The probe's fork server imports `tests.support.zygote_preload`; every server the test
    starts is stopped after it."""
    monkeypatch.setitem(zygotes.PRELOADS, PROBE, ("tests.support.zygote_preload",))
    monkeypatch.setenv(zygotes.SWITCH_ENV, "1")
    yield
    zygotes.close_all()


def _env(**extra: str) -> dict[str, str]:
    return _with_package(
        {"PATH": "/usr/bin:/bin", **{f"ZYGOTE_TEST_{k}": v for k, v in extra.items()}}
    )


def _fresh(monkeypatch, *args, **kwargs):
    with monkeypatch.context() as patch:
        patch.setenv(zygotes.SWITCH_ENV, "0")
        return zygotes.run_child(*args, **kwargs)


def test_a_forked_run_starts_as_a_fresh_interpreter_does(probe_preload, monkeypatch, tmp_path):
    env = _env(RUN="one")
    forked = zygotes.run_child([*ARGV, "--flag"], env, timeout=120, cwd=tmp_path)
    fresh = _fresh(monkeypatch, [*ARGV, "--flag"], env, timeout=120, cwd=tmp_path)
    assert forked.ok and fresh.ok, (forked.output, fresh.output)
    assert forked.result.pop("preloaded") and not fresh.result.pop("preloaded")
    assert forked.result == fresh.result
    assert forked.result["env"] == {"ZYGOTE_TEST_RUN": "one"}
    assert forked.result["cwd"] == forked.result["path"][0] == str(tmp_path)
    assert forked.result["argv"] == ["--flag"] and forked.result["main"] == PROBE
    # the preload's output comes first in each run's output, as in a fresh interpreter
    assert (
        forked.output.splitlines()
        == fresh.output.splitlines()
        == [
            "preload output",
            "probe output",
        ]
    )


def test_a_run_leaves_nothing_for_the_next_one(probe_preload, tmp_path):
    env = _env()
    first = zygotes.run_child(ARGV, env, timeout=120, cwd=tmp_path)
    second = zygotes.run_child(ARGV, env, timeout=120, cwd=tmp_path)
    assert first.result["preloaded"] and second.result["preloaded"]  # one server, both forked
    # the first run wrote to the environment and to the preloaded module's state
    assert second.result["env"] == first.result["env"] == {}
    assert second.result["runs_in_preload"] == first.result["runs_in_preload"] == []


def test_another_environment_gets_a_server_of_its_own(probe_preload, tmp_path):
    one = zygotes.run_child(ARGV, _env(RUN="one"), timeout=120, cwd=tmp_path)
    two = zygotes.run_child(ARGV, _env(RUN="two"), timeout=120, cwd=tmp_path)
    assert one.result["preloaded"] and two.result["preloaded"]
    assert one.result["env"] == {"ZYGOTE_TEST_RUN": "one"}
    assert two.result["env"] == {"ZYGOTE_TEST_RUN": "two"}
    assert len(zygotes._servers) == 2


def test_a_failing_run_exits_and_reports_as_a_fresh_one(probe_preload, monkeypatch, tmp_path):
    argv = [*ARGV, "--fail"]
    forked = zygotes.run_child(argv, _env(), timeout=120, cwd=tmp_path)
    fresh = _fresh(monkeypatch, argv, _env(), timeout=120, cwd=tmp_path)
    assert forked.returncode == fresh.returncode == 1
    assert forked.result is fresh.result is None
    # stderr is not buffered, stdout is: their lines interleave alike, in no promised order
    assert (
        sorted(forked.output.splitlines())
        == sorted(fresh.output.splitlines())
        == [
            "failed on purpose",
            "preload output",
            "probe output",
        ]
    )


def test_a_run_past_its_timeout_is_killed(probe_preload, tmp_path):
    script = tmp_path / "sleeper.py"
    script.write_text("import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n")
    zygotes.PRELOADS["sleeper"] = ()
    try:
        with pytest.raises(subprocess.TimeoutExpired) as raised:
            zygotes.run_child([sys.executable, "-m", "sleeper"], _env(), timeout=3, cwd=tmp_path)
    finally:
        del zygotes.PRELOADS["sleeper"]
    assert "sleeping" in raised.value.output


def test_without_a_server_the_run_is_fresh(probe_preload, monkeypatch, tmp_path):
    # the switch
    off = _fresh(monkeypatch, ARGV, _env(), timeout=120, cwd=tmp_path)
    assert off.ok and not off.result["preloaded"]
    # a preload that fails: the server reports it, the run goes to a fresh interpreter
    monkeypatch.setitem(zygotes.PRELOADS, PROBE, ("tests.support.no_such_module",))
    failed = zygotes.run_child(ARGV, _env(), timeout=120, cwd=tmp_path)
    assert failed.ok and not failed.result["preloaded"]
    assert "No module named" in next(iter(zygotes._servers.values())).ready["why"]


def test_a_working_directory_that_shadows_a_preloaded_module_runs_fresh(probe_preload, tmp_path):
    (tmp_path / "tests").mkdir()  # `tests` would be this folder's, not the server's
    shadowed = zygotes.run_child(ARGV, _env(), timeout=120, cwd=tmp_path)
    assert not shadowed.result["preloaded"]


def test_only_python_m_with_a_preload_is_forked(probe_preload):
    assert zygotes.forkable([sys.executable, "-m", PROBE])
    assert not zygotes.forkable([sys.executable, "-m", "json.tool"])
    assert not zygotes.forkable([sys.executable, "-c", "pass"])
    assert not zygotes.forkable(["/usr/bin/env", "-m", PROBE])


def test_the_switch_takes_0_or_1(monkeypatch):
    monkeypatch.setenv(zygotes.SWITCH_ENV, "no")
    with pytest.raises(ValueError, match="VLLM_FL_TEST_FORK_SERVER='no'; allowed: 0"):
        zygotes.enabled()
