"""Every impl module ops.yaml names imports without the modules its backends require (flag_gems,
torch_npu, vLLM's kernels, ... as ops.yaml's ``requires`` lists them, and vLLM itself): those are
imported inside the function bodies only."""

import json
import subprocess
import sys

from codegen.manifest import PROJECT_MANIFEST, project_manifest

SCRIPT = r"""
import importlib, json, sys
names, required = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for name in names:
    importlib.import_module(name)
heavy = [m for m in required if m in sys.modules]
print(json.dumps({"imported": names, "heavy": heavy}))
"""


def _impl_modules() -> list[str]:
    """Every backend package and impl module of ops.yaml (eager variants' modules included)."""
    manifest = project_manifest()
    names = {backend.package for backend in manifest.backends}
    for op in manifest.ops:
        for impl in op.impls:
            package = manifest.backend(impl.backend).package
            names.add(f"{package}.impl.{impl.module}")
            if impl.eager is not None:
                names.add(f"{package}.impl.{impl.eager[0]}")
    return sorted(names)


def _required_modules() -> list[str]:
    """What backends and impls require (outside vllm_fl), with their top-level packages (vLLM
    for ``vllm._custom_ops``)."""
    manifest = project_manifest()
    names = {module for backend in manifest.backends for module in backend.requires}
    names |= {module for op in manifest.ops for impl in op.impls for module in impl.requires}
    names = {name for name in names if name.split(".")[0] != "vllm_fl"}
    return sorted(names | {name.split(".")[0] for name in names})


def test_impl_modules_import_alone():
    modules = _impl_modules()
    required = _required_modules()
    assert any(".impl." in name for name in modules)
    assert required, "ops.yaml names no module a backend requires"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(modules), json.dumps(required)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_MANIFEST.parent,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["imported"] == modules
    assert result["heavy"] == [], f"imported at module level: {result['heavy']}"
