"""Fixtures of the generator's tests: a temporary copy of the fixture tree and a CLI runner."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from codegen.cli import main
from tests.support.codegen_trees import FIXTURES, snapshot_of

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
