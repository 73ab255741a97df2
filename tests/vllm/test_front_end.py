"""Loading the plugin in vLLM's front-end (the process that will not run the model) imports no
kernel library, calls nothing of torch.cuda and resolves nothing: otherwise vLLM must spawn its
workers instead of forking them, and a user script without a main guard breaks. Checked in a
fresh interpreter (front_end_probe.py), the plugin's platform active or not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_fl.testing.launch import PLUGIN_NAME, vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")

PROBE = Path(__file__).with_name("front_end_probe.py")


def _probe(env: dict[str, str]) -> dict:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    full_env.update(env)
    proc = subprocess.run(
        [sys.executable, str(PROBE)], env=full_env, capture_output=True, text=True, timeout=300
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("FRONT_END ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(lines[-1][len("FRONT_END ") :])
    # The dispatch logs every selection ("Op 'rms_norm' using ..."): none may happen here.
    report["selection_log"] = [
        ln for ln in (proc.stdout + proc.stderr).splitlines() if "Op '" in ln and "using" in ln
    ]
    return report


@pytest.mark.parametrize(
    "env, platform",
    [
        ({"VLLM_PLUGINS": PLUGIN_NAME, "VLLM_FL_PLATFORM": "cpu"}, "PlatformFLCpu"),
        ({"VLLM_PLUGINS": PLUGIN_NAME}, "CpuPlatform"),  # auto: no GPU here
    ],
    ids=["cpu-host-platform", "auto"],
)
def test_front_end_stays_free_of_kernels_and_cuda(env, platform):
    report = _probe(env)
    assert report["platform"].endswith("." + platform), report
    assert report["imported_after_plugins"] == [], report
    assert report["imported_after_config"] == [], report
    assert report["cuda_calls"] == [] and not report["cuda_initialized"], report
    assert report["registered_oot"] == {}, report
    assert report["resolved_ops"] == [] and report["selection_log"] == [], report


def test_cpu_host_platform_picks_the_plugins_worker():
    report = _probe({"VLLM_PLUGINS": PLUGIN_NAME, "VLLM_FL_PLATFORM": "cpu"})
    assert report["worker_cls"] == "vllm_fl.worker.cpu.CPUWorkerFL"


def test_gpu_detection_asks_nvml_not_cuda(monkeypatch):
    """The auto platform check must not call into torch.cuda (that initialises the driver)."""
    import torch

    from vllm_fl import compat

    calls: list[str] = []
    for name in ("is_available", "device_count", "_lazy_init", "init"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name, **k: calls.append(_n))
    compat.cuda_device_present()
    assert calls == []
