"""Paths and helpers shared by the generator's tests (imported as ``codegen_helpers``)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_fl.dispatch import OpRegistry

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPO = FIXTURES.parent.parent.parent


def snapshot_of(root: Path) -> dict[str, str]:
    """Every file under ``root`` -> sha256 of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def _modules_of(package: str) -> dict[str, object]:
    return {n: m for n, m in sys.modules.items() if n == package or n.startswith(f"{package}.")}


@contextlib.contextmanager
def importing(root: Path, package: str = "fxpkg") -> Iterator[None]:
    """Make the backend packages of a generated tree (``package``) importable for the block,
    imported afresh; afterwards the modules of that name are those of before the block."""
    outer = _modules_of(package)
    for name in outer:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        sys.path.remove(str(root))
        for name in _modules_of(package):
            del sys.modules[name]
        sys.modules.update(outer)


def registered(root: Path, module: str) -> OpRegistry:
    """A fresh registry holding what ``<module>.register_ops`` of a generated tree registers."""
    from vllm_fl.dispatch import OpRegistry

    with importing(root, module.split(".", 1)[0]):
        register_ops = importlib.import_module(f"{module}.register_ops")
        registry = OpRegistry()
        register_ops.register(registry)
    return registry
