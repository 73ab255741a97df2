"""The generator's fixture trees and what the tests do with a generated tree: a snapshot of its
files, its packages imported afresh for a block, what a backend of it registers."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.plugin_env import REPO

if TYPE_CHECKING:
    from vllm_fl.dispatch import OpRegistry

FIXTURES = REPO / "tests/codegen/fixtures"


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
    """Make the backend packages of a generated tree (``package``, a folder of ``root``)
    importable for the block, imported afresh; afterwards the modules of that name are those of
    before the block. Only ``package`` is imported from ``root``: its subpackages are found
    through its ``__path__``, nothing else of the tree can shadow a module."""
    outer = _modules_of(package)
    for name in outer:
        del sys.modules[name]
    folder = root / package
    spec = importlib.util.spec_from_file_location(
        package, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None, f"{folder} is not a package"
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = module
    try:
        spec.loader.exec_module(module)
        yield
    finally:
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
