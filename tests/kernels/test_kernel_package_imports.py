"""The kernel library stands on its own: no module of ``vllm_fl.kernels`` imports the dispatch,
and its host modules import neither Triton nor ``flag_gems`` (the front-end process imports them
through the flagos impls and must load no kernel library)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import vllm_fl.kernels

PACKAGE = Path(vllm_fl.kernels.__file__).parent
#: the modules that hold Triton kernels, imported on first use by the host modules
KERNEL_MODULES = {
    "norm_kernels",
    "rotary_kernels",
    "routing_kernels",
    "pointwise_kernels",
    "mla_kernels",
    "mamba_kernels",
    "ssd_kernels",
    "gdn_kernels",
}


def _modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_no_module_imports_the_dispatch():
    for path in PACKAGE.rglob("*.py"):
        dispatch = [name for name in _imported(path) if name.startswith("vllm_fl.dispatch")]
        assert dispatch == [], f"{path.relative_to(PACKAGE)} imports {dispatch}"


def test_the_host_modules_import_no_kernel_library():
    host = [name for name in _modules() if name.rpartition(".")[2] not in KERNEL_MODULES]
    assert "vllm_fl.kernels.moe.tune" in host and "vllm_fl.kernels.norm" in host
    script = (
        "import importlib, json, sys\n"
        "for name in json.loads(sys.argv[1]): importlib.import_module(name)\n"
        "print(json.dumps([m for m in ('triton', 'flag_gems') if m in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(host)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
