"""Every impl module imports on a machine without flag_gems, torch_npu or vLLM's kernels:
those are imported inside the function bodies only."""

import json
import subprocess
import sys
from pathlib import Path

BACKENDS = Path(__file__).resolve().parents[2] / "vllm_fl" / "dispatch" / "backends"

SCRIPT = r"""
import importlib, json, pkgutil, sys
import vllm_fl.dispatch.backends as root
names = []
for info in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
    if ".impl" in info.name or info.name.endswith((".reference", ".flaggems", ".vendor",
                                                   ".cuda", ".ascend")):
        importlib.import_module(info.name)
        names.append(info.name)
heavy = [m for m in ("flag_gems", "torch_npu", "vllm._custom_ops", "vllm._C", "vllm")
         if m in sys.modules]
print(json.dumps({"imported": names, "heavy": heavy}))
"""


def test_impl_modules_import_alone():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    expected = {
        f"vllm_fl.dispatch.backends.{b}.impl.{m}"
        for b in ("reference", "flaggems", "vendor.cuda", "vendor.ascend")
        for m in ("activation", "normalization", "rotary")
    } | {
        f"vllm_fl.dispatch.backends.{b}.impl.attention"
        for b in ("flaggems", "vendor.cuda", "vendor.ascend")
    }
    assert expected <= set(result["imported"])
    assert result["heavy"] == [], f"imported at module level: {result['heavy']}"
