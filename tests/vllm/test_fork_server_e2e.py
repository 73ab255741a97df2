"""A vLLM run forked from the fork server (`vllm_fl.testing.zygotes`) reports what the same run
in a fresh interpreter reports: the tokens, the platform, the layers vLLM built and the methods
it bound, the attention backends and the dispatch's record; and its output holds the plugin's
log lines, those written while the server imported vLLM included."""

from __future__ import annotations

import pytest

from vllm_fl.testing import zygotes
from vllm_fl.testing.launch import PLUGIN_ON, run_vllm, vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

#: what differs between any two runs: timings and the threads' CPU seconds
MEASURED = ("import_s", "init_s", "generate_s", "generate_s_all", "tokens_per_s", "threads_cpu_s")


def _record(run) -> dict:
    return {key: value for key, value in run.result.items() if key not in MEASURED}


def _log(run) -> list[str]:
    """The plugin's lines of the run's output (vLLM's carry times and pids)."""
    return sorted(line.split("] ", 1)[-1] for line in run.output.splitlines() if "vllm_fl" in line)


def test_a_forked_run_reports_what_a_fresh_one_does(tiny_model, monkeypatch):
    monkeypatch.setenv(zygotes.SWITCH_ENV, "1")
    forked = run_vllm(tiny_model, PLUGIN_ON, max_tokens=8)
    monkeypatch.setenv(zygotes.SWITCH_ENV, "0")
    fresh = run_vllm(tiny_model, PLUGIN_ON, max_tokens=8)
    assert forked.forked and not fresh.forked
    assert _record(forked) == _record(fresh)
    assert forked.result["platform"].endswith(".PlatformFLCpu")
    assert _log(forked) == _log(fresh)
