"""The generator under attack: every manifest of ``hostile_cases.CASES`` is either rejected with
one ``ops.yaml:<line>`` error — without a traceback, writing nothing — or accepted with
generated code in which the hostile text stays inert data. Nothing a manifest says ever runs.

Each case runs ``python -m codegen`` in a child process, as ``make codegen`` does, under a memory
and CPU-time cap: a crash, a hang or a blow-up (an alias bomb, 60 000-deep nesting) kills the
child and fails the case, instead of being inherited by the test run.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import resource
import sys
from pathlib import Path

import pytest

from tests.support.codegen_trees import FIXTURES, REPO, snapshot_of
from hostile_cases import CASES, PAYLOAD, Hostile

#: what one generation may use: far above a real manifest's needs, far below an expanded bomb's
MEMORY_CAP_BYTES = 2 << 30
CPU_CAP_S = 60
ERROR = re.compile(r"error: ops\.yaml:(\d+): (.+)")


@pytest.fixture(scope="module")
def generated_once(tmp_path_factory) -> Path:
    """The fixture tree after one generation, shared read-only: each case copies it."""
    dest = tmp_path_factory.mktemp("hostile") / "tree"
    shutil.copytree(FIXTURES / "tree", dest)
    assert _codegen(dest).returncode == 0
    return dest


def _cap_resources() -> None:
    """In the child: an address-space and CPU-time cap (the kernel kills it past either)."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_CAP_S, CPU_CAP_S))


def _codegen(root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(
        [sys.executable, "-m", "codegen", "--root", str(root), "-q", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_cap_resources,
    )


def test_the_corpus_is_large_and_varied():
    assert len(CASES) >= 60
    assert len({case.id for case in CASES}) == len(CASES)
    assert sum(case.accepted for case in CASES) >= 10
    assert sum(not case.accepted for case in CASES) >= 60


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_manifest(case: Hostile, generated_once: Path, tmp_path: Path):
    tree = tmp_path / "tree"
    shutil.copytree(generated_once, tree)
    canary = tmp_path / "canary"
    (tree / "ops.yaml").write_bytes(case.data.replace(b"CANARY", str(canary).encode()))
    before = snapshot_of(tree)

    result = _codegen(tree)

    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert not canary.exists(), "a payload of the manifest ran during generation"
    if case.accepted:
        assert result.returncode == 0, result.stderr
        _assert_inert(tree, canary)
        return
    assert result.returncode == 1, (result.stdout, result.stderr)
    first = result.stderr.splitlines()[0]
    match = ERROR.match(first)
    assert match, first
    assert int(match.group(1)) == case.error_line(), first
    assert case.message in match.group(2), first
    assert ", expected " in match.group(2), first
    assert "nothing was written" in result.stderr
    assert snapshot_of(tree) == before, "a rejected manifest changed the tree"


def _assert_inert(tree: Path, canary: Path) -> None:
    """Generated Python parses, runs no manifest text as code, and the modules importable
    without vLLM import (running their top level) without touching the canary."""
    sources = sorted(p for p in tree.rglob("*.py") if "__pycache__" not in p.parts)
    for path in sources:
        tree_ast = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree_ast):
            if isinstance(node, ast.Name):
                assert node.id not in ("__import__", "os", "exec", "eval"), (path, node.id)
            if isinstance(node, ast.Attribute):
                assert node.attr != "system", path
    # torch only annotates the stubs: a stand-in keeps this fast and torch-free
    code = (
        "import runpy, sys, types\n"
        "sys.modules['torch'] = types.ModuleType('torch')\n"
        "sys.modules['torch'].Tensor = type('Tensor', (), {})\n"
        "sys.modules['torch'].dtype = type('dtype', (), {})\n"
        "for path in sys.argv[1:]:\n"
        "    runpy.run_path(path)\n"
    )
    modules = [tree / "vllm_fl/dispatch/spec.py", tree / "vllm_fl/ops/__init__.py"]
    modules += sorted((tree / "tests/generated").glob("test_parity_*.py"))
    result = subprocess.run(
        [sys.executable, "-c", code, *map(str, modules)],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert not canary.exists(), "importing generated code ran a payload of the manifest"


def test_payload_text_survives_verbatim_in_docstrings(generated_once: Path, tmp_path: Path):
    """Escaping keeps the text: the docstring of the generated method holds the signature."""
    tree = tmp_path / "tree"
    shutil.copytree(generated_once, tree)
    case = next(c for c in CASES if c.id == "sig-default-triple-quotes")
    (tree / "ops.yaml").write_bytes(case.data)
    assert _codegen(tree).returncode == 0
    module = ast.parse((tree / "vllm_fl/dispatch/spec.py").read_text())
    base = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "FLBackendBase")
    method = next(n for n in base.body if isinstance(n, ast.FunctionDef) and n.name == "relu2")
    assert PAYLOAD.replace("CANARY", "") in (ast.get_docstring(method) or "").replace("CANARY", "")
