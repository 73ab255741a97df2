"""``python -m codegen vendor NAME --ops OP,...``: scaffolds a vendor backend for the ops asked for,
edits ops.yaml as text (comments and order intact), regenerates everything at once; without ops
it prints the usage and changes nothing; a second run is an error that changes nothing. The
backend's availability lives in ops.yaml only."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.codegen_trees import FIXTURES, REPO, registered

from vllm_fl.dispatch.runtime import registration

FIXTURE_OPS = (
    "silu_and_mul, gelu_tanh, rms_norm, pick_backend, all_reduce, send, recv, scale_into, scaled_mm"
)


def test_vendor_scaffolds_the_ops_asked_for_and_edits_manifest_in_place(generated, cli):
    rc, out, err = cli("vendor", "metax", "--ops", "rms_norm, pick_backend", "--root", generated)
    assert rc == 0, err
    assert "vendor 'metax' scaffolded" in out
    assert (generated / "ops.yaml").read_text() == (
        FIXTURES / "expected_vendor_ops.yaml"
    ).read_text()
    base = generated / "fxpkg/vendor/metax"
    init = (base / "__init__.py").read_text()
    assert "Probe" not in init and "torch_metax" not in init  # ops.yaml is the one place
    assert (base / "impl/__init__.py").exists()
    # stubs for the ops asked for only, in the module names of the reference (else first) impl
    assert (
        'NotImplementedError(\n        "metax rms_norm: write'
        in (base / "impl/norm.py").read_text()
    )
    assert (
        "def pick_backend(use_mla: bool = False) -> str:"
        in (base / "impl/attention.py").read_text()
    )
    assert not (base / "impl/act.py").exists()
    registry = registered(generated, "fxpkg.vendor.metax")
    assert [op for op in registry.list_operators() if registry.get_impl(op, "vendor.metax")] == [
        "pick_backend",
        "rms_norm",
    ]
    rms_norm = registry.get_impl("rms_norm", "vendor.metax")
    assert repr(rms_norm.available) == "Probe(requires=('torch_metax',), device=None)"
    assert rms_norm.fn.functional.__module__ == "fxpkg.vendor.metax.impl.norm"
    assert "vllm_fl::metax_rms_norm" in registration.defined()  # the vendor is opaque
    readme = (generated / "README.md").read_text()
    assert "| `rms_norm` | `RMSNorm` | ✓ | ✓ | ✓ | ✓ |" in readme
    assert "| `silu_and_mul` | `SiluAndMul` | ✓ | ✓ | – | – |" in readme
    assert cli("--root", generated, "--check")[0] == 0


def test_vendor_availability_is_edited_in_ops_yaml_only(generated, cli):
    assert cli("vendor", "metax", "--ops", "rms_norm", "--root", generated)[0] == 0
    init = (generated / "fxpkg/vendor/metax/__init__.py").read_text()
    manifest = generated / "ops.yaml"
    text = manifest.read_text()
    assert "    requires: [torch_metax]\n" in text
    manifest.write_text(
        text.replace("    requires: [torch_metax]\n", "    requires: [metax_rt]\n    device: npu\n")
    )
    rc, _, err = cli("--root", generated)
    assert rc == 0, err
    registry = registered(generated, "fxpkg.vendor.metax")
    available = registry.get_impl("rms_norm", "vendor.metax").available
    assert repr(available) == "Probe(requires=('metax_rt',), device='npu')"
    assert (generated / "fxpkg/vendor/metax/__init__.py").read_text() == init


def test_vendor_without_ops_prints_the_usage_and_changes_nothing(generated, cli, snapshot):
    before = snapshot(generated)
    for args in (("vendor", "metax"), ("vendor", "metax", "--ops", " "), ("vendor",)):
        rc, out, err = cli(*args, "--root", generated)
        assert rc == 2, args
        assert out == ""
        assert err.startswith("usage: make vendor NAME=<vendor> OPS=<op>[,<op>...]\n"), err
        assert f"  {FIXTURE_OPS}\n" in err
        assert "e.g. make vendor NAME=metax OPS=silu_and_mul,gelu_tanh\n" in err
        assert err.endswith("nothing was written\n")
    assert snapshot(generated) == before


def test_vendor_rejects_unknown_empty_and_repeated_ops(generated, cli, snapshot):
    before = snapshot(generated)
    allowed = "expected a comma-separated list of ops of ops.yaml: " + FIXTURE_OPS
    for ops, problem in (
        ("rms_norm,rms_nrom", "unknown op 'rms_nrom'"),
        ("rms_norm,,silu_and_mul", "'rms_norm,,silu_and_mul' has an empty op name"),
        ("rms_norm,rms_norm", "op 'rms_norm' is listed twice"),
    ):
        rc, _, err = cli("vendor", "metax", "--ops", ops, "--root", generated)
        assert rc == 1
        assert err == f"error: OPS: {problem}, {allowed}\nnothing was written\n"
    assert snapshot(generated) == before


def test_vendor_again_adds_ops_and_refuses_one_it_has(generated, cli, snapshot):
    assert cli("vendor", "metax", "--ops", "rms_norm", "--root", generated)[0] == 0
    norm = (generated / "fxpkg/vendor/metax/impl/norm.py").read_text()
    before = snapshot(generated)
    rc, _, err = cli("vendor", "metax", "--ops", "silu_and_mul,rms_norm", "--root", generated)
    assert rc == 1
    assert err.startswith(
        "error: OPS: vendor 'metax' implements 'rms_norm' already, expected ops it does not "
        "implement yet: silu_and_mul, gelu_tanh, pick_backend"
    )
    assert snapshot(generated) == before
    rc, _, err = cli("vendor", "metax", "--ops", "silu_and_mul", "--root", generated)
    assert rc == 0, err
    manifest = (generated / "ops.yaml").read_text()
    assert manifest.count("metax:") == 3  # the backend, rms_norm's impl, silu_and_mul's impl
    assert (generated / "fxpkg/vendor/metax/impl/norm.py").read_text() == norm
    assert "def silu_and_mul(" in (generated / "fxpkg/vendor/metax/impl/act.py").read_text()
    assert cli("--root", generated, "--check")[0] == 0


def test_vendor_with_the_name_of_another_backend_is_an_error(generated, cli, snapshot):
    before = snapshot(generated)
    rc, _, err = cli("vendor", "reference", "--ops", "rms_norm", "--root", generated)
    assert rc == 1
    assert "backend 'reference' already exists and is not vendor 'reference'" in err
    assert snapshot(generated) == before


def test_vendor_rejects_bad_names_and_existing_folders(generated, cli, snapshot):
    before = snapshot(generated)
    rc, _, err = cli("vendor", "Meta-X", "--ops", "rms_norm", "--root", generated)
    assert rc == 1 and "is not a lower-case identifier" in err
    rc, _, err = cli("vendor", "acme", "--ops", "rms_norm", "--root", generated)
    assert rc == 1 and "vendor 'acme' implements 'rms_norm' already" in err
    (generated / "fxpkg/vendor/ghost").mkdir()
    rc, _, err = cli("vendor", "ghost", "--ops", "rms_norm", "--root", generated)
    assert rc == 1 and "fxpkg/vendor/ghost: the vendor folder exists" in err
    (generated / "fxpkg/vendor/ghost").rmdir()
    assert snapshot(generated) == before


def _fresh_vendor_name(root: Path) -> str:
    """metax, or metax2, metax3, ... : the first that ops.yaml and the tree at ``root`` do not
    use (the README's own example, `make vendor NAME=metax`, may have run there)."""
    from codegen.manifest import load_manifest

    taken = set()
    for backend in load_manifest((root / "ops.yaml").read_text()).backends:
        taken |= {backend.name, backend.vendor}
    vendors = root / "vllm_fl/backends"
    for n in range(1, 100):
        name = "metax" if n == 1 else f"metax{n}"
        if name not in taken and not (vendors / name).exists():
            return name
    raise AssertionError("no free vendor name")


def _copy_of_repository(dest: Path) -> Path:
    dest.mkdir()
    for item in ("ops.yaml", "README.md", ".codegen-outputs"):
        shutil.copy(REPO / item, dest / item)
    for item in ("vllm_fl", "tests/generated", "docs"):
        shutil.copytree(REPO / item, dest / item, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_vendor_in_a_copy_of_the_repository(tmp_path):
    """The real manifest: the new backend registers through the real runtime, unavailable
    (with the reason) until ops.yaml's requires is edited, then available."""
    root = _copy_of_repository(tmp_path / "repo")
    name = _fresh_vendor_name(root)
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{REPO}")

    def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
        return subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd)

    codegen = (sys.executable, "-m", "codegen", "--root", str(root))
    done = run(*codegen, "--check")
    assert done.returncode == 0, done.stdout + done.stderr
    done = run(*codegen, "vendor", name, "--ops", "silu_and_mul,rms_norm")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"created  vllm_fl/backends/{name}/register_ops.py" in done.stdout
    manifest = (root / "ops.yaml").read_text().splitlines()
    original = (REPO / "ops.yaml").read_text().splitlines()
    block = [
        f"  {name}:",
        "    kind: vendor",
        f"    vendor: {name}",
        f"    package: vllm_fl.backends.{name}",
        "    priority: 100",
        f"    requires: [torch_{name}]",
        "    opaque: true",
    ]
    start = manifest.index(f"  {name}:")
    assert manifest[start : start + len(block)] == block
    rest = manifest[:start] + manifest[start + len(block) :]
    added = [line for line in rest if line.startswith(f"      {name}: ")]
    assert added == [
        f"      {name}: activation.silu_and_mul",
        f"      {name}: normalization.rms_norm",
    ]
    # nothing removed or changed: without the added lines, the manifest is the original
    assert [line for line in rest if line not in added] == original
    probe = (
        "import vllm_fl, sys\n"
        f"assert vllm_fl.__file__.startswith({str(root)!r}), vllm_fl.__file__\n"
        "from vllm_fl.dispatch import OpRegistry\n"
        f"from vllm_fl.backends.{name} import register_ops\n"
        "reg = OpRegistry()\n"
        "register_ops.register(reg)\n"
        f"impl = reg.get_impl('rms_norm', 'vendor.{name}')\n"
        "print(impl.kind.value, impl.vendor, impl.priority, impl.check_available())\n"
        f"print(sorted(op for op in reg.list_operators() if reg.get_impl(op, 'vendor.{name}')))\n"
        "from vllm_fl.dispatch.builtin_backends import BUILTIN_BACKENDS\n"
        "print(BUILTIN_BACKENDS[-1])\n"
    )
    done = run(sys.executable, "-c", probe, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"vendor {name} 100 (False, \"module 'torch_{name}' not importable")
    assert lines[1] == "['rms_norm', 'silu_and_mul']"
    assert lines[2] == f"vllm_fl.backends.{name}"
    # availability is edited in ops.yaml alone: regenerate, and the probe follows
    text = (root / "ops.yaml").read_text()
    (root / "ops.yaml").write_text(
        text.replace(f"    requires: [torch_{name}]\n", "    requires: [math]\n    device: cpu\n")
    )
    done = run(*codegen)
    assert done.returncode == 0, done.stdout + done.stderr
    done = run(sys.executable, "-c", probe, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"vendor {name} 100 (True, None)"
    done = run(*codegen, "--check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_package_typo_is_refused_naming_the_packages(generated, cli, snapshot):
    assert cli("vendor", "metax", "--ops", "rms_norm", "--root", generated)[0] == 0
    manifest = generated / "ops.yaml"
    manifest.write_text(manifest.read_text().replace("fxpkg.vendor.metax", "fxpkg.vendor.metx"))
    before = snapshot(generated)
    rc, _, err = cli("--root", generated)
    assert rc == 1
    assert err.startswith(
        "error: ops.yaml:22: package 'fxpkg.vendor.metx' of backend 'metax' does not exist, and "
        "package 'fxpkg.vendor.metax', whose impl/ the last generation registered, is no "
        "backend's now"
    ), err
    assert "expected one of the packages: " in err and "fxpkg.vendor.metax" in err
    assert snapshot(generated) == before
