"""Fixtures of the generator's tests: a temporary copy of the fixture tree and a CLI runner."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from codegen_helpers import FIXTURES, REPO, snapshot_of

# The generator is not an installed package: make the repository's ``codegen`` importable (and
# win over this ``tests/codegen`` folder, which would otherwise be a namespace package).
if sys.path[:1] != [str(REPO)]:
    sys.path.insert(0, str(REPO))
_cached = sys.modules.get("codegen")
if _cached is not None and getattr(_cached, "__file__", None) is None:
    del sys.modules["codegen"]  # the namespace package made of this folder, not the generator

from codegen.cli import main  # noqa: E402

# The fixture trees hold generated tests and packages: they are data, never collected.
collect_ignore_glob = ["fixtures/*"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A fresh copy of ``fixtures/tree`` (the input tree, before codegen)."""
    dest = tmp_path / "tree"
    shutil.copytree(FIXTURES / "tree", dest)
    return dest


@pytest.fixture
def generated(tree: Path) -> Path:
    """The fixture tree after one successful ``python -m codegen``."""
    assert main(["--root", str(tree), "-q"]) == 0
    return tree


@pytest.fixture
def snapshot():
    return snapshot_of


@pytest.fixture
def cli(capsys):
    """``cli(*args) -> (exit code, stdout, stderr)`` of ``python -m codegen``."""

    def run(*args: str) -> tuple[int, str, str]:
        rc = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return rc, out, err

    return run
