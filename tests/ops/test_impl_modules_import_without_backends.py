"""Every impl module ops.yaml names imports on a machine without flag_gems, torch_npu or vLLM's
kernels: those are imported inside the function bodies only."""

import json
import subprocess
import sys
from pathlib import Path

from codegen.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import importlib, json, sys
names = json.loads(sys.argv[1])
for name in names:
    importlib.import_module(name)
heavy = [m for m in ("flag_gems", "torch_npu", "vllm._custom_ops", "vllm._C", "vllm")
         if m in sys.modules]
print(json.dumps({"imported": names, "heavy": heavy}))
"""


def _impl_modules() -> list[str]:
    """Every backend package and impl module of ops.yaml (eager variants' modules included)."""
    manifest = load_manifest((ROOT / "ops.yaml").read_text())
    names = {backend.package for backend in manifest.backends}
    for op in manifest.ops:
        for impl in op.impls:
            package = manifest.backend(impl.backend).package
            names.add(f"{package}.impl.{impl.module}")
            if impl.eager is not None:
                names.add(f"{package}.impl.{impl.eager[0]}")
    return sorted(names)


def test_impl_modules_import_alone():
    modules = _impl_modules()
    assert any(".impl." in name for name in modules)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(modules)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["imported"] == modules
    assert result["heavy"] == [], f"imported at module level: {result['heavy']}"
