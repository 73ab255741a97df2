"""Real vLLM on NVIDIA GPUs the way its users run it: ``user_script_no_guard.py`` (no main guard,
V1 multiprocessing on, the plugin found through its entry points and its platform auto-detected)
runs with VLLM_PLUGINS=none and with the plugin, in eager and compile mode and with
``tensor_parallel_size=2`` where two GPUs are present.

Both runs exit 0 without the "bootstrapping phase" error a spawned child raises when the parent
script has no guard (the plugin must not initialise CUDA in the front-end process, which would
force vLLM to spawn); they generate the same greedy tokens; the plugin's run is on PlatformFL and
a worker process logs the layers it replaced.

Marked ``gpu``: skipped without an NVIDIA GPU or vLLM's CUDA build; `make test-gpu` runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_fl.testing.models import build_tiny_llama
from tests.support.plugin_env import checkout_plugin_env
from vllm_fl.testing.launch import PLUGIN_NAME

pytestmark = pytest.mark.gpu("vllm")

SCRIPT = Path(__file__).with_name("user_script_no_guard.py")
RESULT = "USER_SCRIPT_RESULT "
#: variables a user does not set; the test's own environment must not leak them in
NOT_A_USERS = ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_WORKER_MULTIPROC_METHOD", "VLLM_FL_PLATFORM")
LAYOUTS = [(1, "eager"), (1, "compile"), (2, "eager")]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama-user"), hidden_size=128)


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    return checkout_plugin_env(tmp_path_factory.mktemp("plugin-dist"))


def _run_script(env: dict[str, str]) -> tuple[subprocess.CompletedProcess, dict | None]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=540,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    return proc, (json.loads(lines[-1][len(RESULT) :]) if lines else None)


@pytest.mark.parametrize(("tp", "mode"), LAYOUTS, ids=[f"tp{tp}-{mode}" for tp, mode in LAYOUTS])
def test_users_script_without_guard(model, plugin_env, tp, mode):
    import torch

    if torch.cuda.device_count() < tp:
        pytest.skip(f"needs {tp} GPUs (torch sees {torch.cuda.device_count()})")
    base = {k: v for k, v in os.environ.items() if k not in NOT_A_USERS}
    base.update(
        USER_SCRIPT_MODEL=str(model),
        USER_SCRIPT_TP=str(tp),
        USER_SCRIPT_MODE=mode,
        VLLM_USE_FLASHINFER_SAMPLER="0",
    )
    vanilla, vanilla_result = _run_script({**base, "VLLM_PLUGINS": "none"})
    plugin, plugin_result = _run_script({**base, **plugin_env, "VLLM_PLUGINS": PLUGIN_NAME})
    for proc in (vanilla, plugin):
        tail = "\n".join(proc.stdout.splitlines()[-40:])
        assert proc.returncode == 0, tail
        assert "bootstrapping phase" not in proc.stdout, tail
    assert not vanilla_result["platform"].startswith("vllm_fl."), vanilla_result
    assert plugin_result["platform"] == "vllm_fl.platform.cuda.PlatformFL", plugin_result
    assert len(plugin_result["tokens"][0]) == 16
    assert plugin_result["tokens"] == vanilla_result["tokens"]
    replaced = [line for line in plugin.stdout.splitlines() if "replaced vLLM layers" in line]
    assert replaced, [line for line in plugin.stdout.splitlines() if "vllm_fl" in line]
    assert all("RMSNorm" in line for line in replaced), replaced
