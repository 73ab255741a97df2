"""Refresh the generator's golden files: ``.venv/bin/python tests/codegen/refresh_golden.py``.

Copies ``fixtures/tree`` to a temporary directory, runs the generator there and stores the
resulting tree as ``fixtures/expected``; also runs ``vendor metax --ops VENDOR_OPS`` on a copy
and stores the edited manifest as ``fixtures/expected_vendor_ops.yaml``. Review the diff before committing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
REPO = HERE.parent.parent

#: the ops the golden vendor implements: one with a reference impl, one without
VENDOR_OPS = "rms_norm,pick_backend"


def codegen(*args: str) -> bool:
    """``python -m codegen ARGS`` of this checkout (the generator is not an installed package);
    whether it succeeded."""
    return subprocess.run([sys.executable, "-m", "codegen", *args], cwd=REPO).returncode == 0


def generate(dest: Path) -> None:
    shutil.copytree(FIXTURES / "tree", dest)
    if not codegen("--root", str(dest), "-q"):
        raise SystemExit("codegen failed on the fixture tree")


def refresh() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tree"
        generate(out)
        shutil.rmtree(FIXTURES / "expected", ignore_errors=True)
        shutil.copytree(out, FIXTURES / "expected")
        if not codegen("vendor", "metax", "--ops", VENDOR_OPS, "--root", str(out), "-q"):
            raise SystemExit("vendor scaffolding failed on the fixture tree")
        shutil.copy(out / "ops.yaml", FIXTURES / "expected_vendor_ops.yaml")
    print(f"refreshed {FIXTURES / 'expected'} and expected_vendor_ops.yaml")


if __name__ == "__main__":
    refresh()
