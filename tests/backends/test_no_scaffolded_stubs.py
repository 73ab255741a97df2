"""No impl named in ops.yaml is still the stub `make codegen` scaffolded.

A stub raises NotImplementedError; in a backend that cannot run on this machine (FlagGems, CUDA,
Ascend on a CPU-only host) its parity tests are skipped, so without this check a stub would pass
the suite. Every backend registers whether or not it can run here, so the check reads every
registered implementation (generated adapters lead it to the hand-written functions, eager
variants included) with the detector ``explain`` uses, ``vllm_fl.dispatch.stubs``.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from codegen.cli import main as codegen
from codegen.manifest import project_manifest
from tests.support.codegen_trees import FIXTURES, registered
from vllm_fl.dispatch import OpManager, get_default_manager
from vllm_fl.dispatch.explain import explain, explain_table
from vllm_fl.dispatch.stubs import is_stub, is_stub_node, stub_functions

ROOT = Path(__file__).resolve().parents[2]


def stubs_of(impl) -> list[str]:
    """``file:line: function`` of every scaffolded stub a registered implementation runs."""
    found = []
    for fn in stub_functions(impl.fn):
        path = Path(fn.__code__.co_filename)
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        found.append(f"{where}:{fn.__code__.co_firstlineno}: {fn.__name__}")
    return found


def _needs_the_generator() -> None:
    """``make codegen`` needs the dev requirements (a GPU machine's Python may lack them)."""
    for module in ("jinja2", "black"):
        pytest.importorskip(module, reason=f"the generator needs {module} (requirements-dev.txt)")


def _manifest_impls():
    manifest = project_manifest()
    for op in manifest.ops:
        for impl in op.impls:
            backend = manifest.backend(impl.backend)
            yield pytest.param(op.name, backend.impl_id, id=f"{op.name}-{backend.name}")


@pytest.mark.parametrize("op, impl_id", list(_manifest_impls()))
def test_impl_is_not_a_scaffolded_stub(op, impl_id):
    registered = get_default_manager().registry.get_implementations(op)
    impl = next((i for i in registered if i.impl_id == impl_id), None)
    assert impl is not None, f"{impl_id} is not registered for {op}: run `make codegen`"
    found = stubs_of(impl)
    assert not found, f"still the stub `make codegen` scaffolded, write the kernel: {found}"


def test_a_stub_where_its_backend_cannot_run_is_found_and_explained(tmp_path):
    """The fixture's vendor ``acme`` needs CUDA and a module that does not exist: it cannot run
    here. ``make codegen`` scaffolds its impls as stubs; the check above and ``explain`` see
    them anyway."""
    _needs_the_generator()
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "tree", tree)
    assert codegen(["--root", str(tree), "-q"]) == 0
    registry = registered(tree, "fxpkg.vendor.acme")
    pick = registry.get_impl("pick_backend", "vendor.acme")
    norm = registry.get_impl("rms_norm", "vendor.acme")
    assert not pick.is_available() and not norm.is_available()
    [found] = stubs_of(pick)
    assert found.endswith("/fxpkg/vendor/acme/impl/attention.py:11: pick_backend")
    assert [s.split(": ")[1] for s in stubs_of(norm)] == ["rms_norm", "rms_norm_inplace"]
    text = explain(OpManager(registry=registry))
    assert "; stub: fxpkg.vendor.acme.impl.attention.pick_backend is still the stub" in text
    assert "vendor.acme (stub)" in explain_table(OpManager(registry=registry))


LOOKALIKES = '''

def written(use_mla: bool = False) -> str:
    """Doc."""
    if use_mla:
        raise NotImplementedError("acme pick_backend: write the kernel here")
    return "x"


def unsupported(use_mla: bool = False) -> str:
    raise NotImplementedError("acme has no attention backend")
'''


def _stub_source(tmp_path) -> str:
    """A module holding a stub exactly as `make codegen` writes one, and look-alikes."""
    _needs_the_generator()
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "tree", tree)
    assert codegen(["--root", str(tree), "-q"]) == 0
    return (tree / "fxpkg/vendor/acme/impl/attention.py").read_text() + LOOKALIKES


def test_the_detector_recognises_the_generated_stub(tmp_path):
    source = _stub_source(tmp_path)
    fns = {n.name: n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
    assert is_stub_node(fns["pick_backend"])
    assert not is_stub_node(fns["written"])
    assert not is_stub_node(fns["unsupported"])
    module = tmp_path / "planted_stubs.py"
    module.write_text(source)
    namespace: dict = {}
    exec(compile(source, str(module), "exec"), namespace)
    assert is_stub(namespace["pick_backend"])
    assert not is_stub(namespace["written"]) and not is_stub(namespace["unsupported"])
    assert not is_stub(len) and not is_stub(lambda: None)
