"""``python -m codegen vendor NAME``: scaffolds a vendor backend, edits ops.yaml as text (comments
and order intact), regenerates everything at once; a second run is an error that changes
nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from codegen_helpers import FIXTURES, REPO


def test_vendor_scaffolds_backend_and_edits_manifest_in_place(generated, cli):
    rc, out, err = cli("vendor", "metax", "--root", generated)
    assert rc == 0, err
    assert "vendor 'metax' scaffolded" in out
    assert (generated / "ops.yaml").read_text() == (
        FIXTURES / "expected_vendor_ops.yaml"
    ).read_text()
    base = generated / "fxpkg/vendor/metax"
    assert 'available = Probe(requires=("torch_metax",))' in (base / "__init__.py").read_text()
    assert (base / "impl/__init__.py").exists()
    # stubs for every op the reference implements, in the reference's module names
    assert "def silu_and_mul(self, x: torch.Tensor)" in (base / "impl/act.py").read_text()
    assert (
        'NotImplementedError(\n        "metax rms_norm: write'
        in (base / "impl/norm.py").read_text()
    )
    assert not (base / "impl/attention.py").exists()  # pick_backend has no reference impl
    register_ops = (base / "register_ops.py").read_text()
    assert "from fxpkg.vendor.metax import available as _backend_probe" in register_ops
    assert '_opaque.define("vllm_fl::metax_rms_norm", _rms_norm_kernel, _rms_norm_fake)' in (
        register_ops
    )
    assert "| `rms_norm` | `RMSNorm` | ✓ | ✓ | ✓ | ✓ |" in (generated / "README.md").read_text()
    assert cli("--root", generated, "--check")[0] == 0


def test_vendor_twice_is_an_error_that_changes_nothing(generated, cli, snapshot):
    assert cli("vendor", "metax", "--root", generated)[0] == 0
    before = snapshot(generated)
    rc, _, err = cli("vendor", "metax", "--root", generated)
    assert rc == 1
    assert (
        "error: ops.yaml:22: backend 'metax' already exists, expected a vendor name not in" in err
    )
    assert snapshot(generated) == before


def test_vendor_rejects_bad_names_and_existing_folders(generated, cli, snapshot):
    before = snapshot(generated)
    rc, _, err = cli("vendor", "Meta-X", "--root", generated)
    assert rc == 1 and "is not a lower-case identifier" in err
    rc, _, err = cli("vendor", "acme", "--root", generated)
    assert rc == 1 and "backend 'acme' already exists" in err
    (generated / "fxpkg/vendor/ghost").mkdir()
    rc, _, err = cli("vendor", "ghost", "--root", generated)
    assert rc == 1 and "fxpkg/vendor/ghost: the vendor folder exists" in err
    (generated / "fxpkg/vendor/ghost").rmdir()
    assert snapshot(generated) == before


def _fresh_vendor_name() -> str:
    """metax, or metax2, metax3, ... : the first the repository's ops.yaml and tree do not use."""
    from codegen.manifest import load_manifest

    taken = {b.name for b in load_manifest((REPO / "ops.yaml").read_text()).backends}
    vendors = REPO / "vllm_fl/dispatch/backends/vendor"
    for n in range(1, 100):
        name = "metax" if n == 1 else f"metax{n}"
        if name not in taken and not (vendors / name).exists():
            return name
    raise AssertionError("no free vendor name")


def test_vendor_in_a_copy_of_the_repository(tmp_path):
    """The real manifest: the new backend registers through the real runtime, unavailable
    (with the reason) until its probe is edited. The vendor's name is one the repository does not
    have yet (the README's own example, `make vendor NAME=metax`, may have run here)."""
    name = _fresh_vendor_name()
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("ops.yaml", "README.md", ".codegen-outputs"):
        shutil.copy(REPO / name, root / name)
    for name in ("vllm_fl", "tests/generated", "docs"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{REPO}")
    cmd = [sys.executable, "-m", "codegen", "--root", str(root)]
    done = subprocess.run(cmd + ["--check"], capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run(
        cmd + ["vendor", name], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"created  vllm_fl/dispatch/backends/vendor/{name}/register_ops.py" in done.stdout
    manifest = (root / "ops.yaml").read_text().splitlines()
    original = (REPO / "ops.yaml").read_text().splitlines()
    block = [
        f"  {name}:",
        "    kind: vendor",
        f"    vendor: {name}",
        f"    package: vllm_fl.dispatch.backends.vendor.{name}",
        "    priority: 100",
        "    probe: available",
        "    opaque: true",
    ]
    start = manifest.index(f"  {name}:")
    assert manifest[start : start + len(block)] == block
    added = block + [line for line in manifest if line.startswith(f"      {name}: ")]
    # nothing removed or changed: without the added lines, the manifest is the original
    rest = manifest[:start] + manifest[start + len(block) :]
    assert [line for line in rest if not line.startswith(f"      {name}: ")] == original
    assert f"      {name}: activation.silu_and_mul" in added
    probe = (
        "import vllm_fl, sys\n"
        f"assert vllm_fl.__file__.startswith({str(root)!r}), vllm_fl.__file__\n"
        "from vllm_fl.dispatch import OpRegistry\n"
        f"from vllm_fl.dispatch.backends.vendor.{name} import register_ops\n"
        "reg = OpRegistry()\n"
        "register_ops.register(reg)\n"
        f"impl = reg.get_impl('rms_norm', 'vendor.{name}')\n"
        "print(impl.kind.value, impl.vendor, impl.priority, impl.check_available())\n"
        "from vllm_fl.dispatch.backends import BUILTIN_BACKENDS\n"
        "print(BUILTIN_BACKENDS[-1])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert f"vendor {name} 100 (False, \"module 'torch_{name}' not importable" in done.stdout
    assert done.stdout.splitlines()[-1] == f"vllm_fl.dispatch.backends.vendor.{name}"
    done = subprocess.run(cmd + ["--check"], capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
