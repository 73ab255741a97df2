"""The generated parity tests (``codegen.dest.parity``): the reference is never compared with
itself; every op with tests, a reference-only one included, gets a check of the reference alone
(``Parity.check_reference``, tested in tests/testing/test_parity.py); their conftest gives them
``vllm_fl.testing.parity.Parity`` with the manifest's reference impl and the generator's seed."""

from __future__ import annotations

import ast
import importlib.util

import pytest

from codegen.dest.parity import SEED
from codegen.generate import read_manifest
from tests.support.codegen_trees import REPO
from vllm_fl.testing import parity


def _assigned(module: ast.Module, name: str) -> ast.expr | None:
    for node in module.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return node.value
    return None


def _tests(module: ast.Module) -> set[str]:
    return {n.name for n in module.body if isinstance(n, ast.FunctionDef)}


def _param_ids(value: ast.expr) -> list[str]:
    """The first argument of each ``pytest.param(...)`` of a BACKENDS list."""
    assert isinstance(value, ast.List)
    return [ast.literal_eval(item.args[0]) for item in value.elts if isinstance(item, ast.Call)]


@pytest.mark.parametrize("root", ["fixture", "repository"])
def test_no_backend_list_holds_the_reference(root, generated):
    folder = (generated if root == "fixture" else REPO) / "tests/generated"
    modules = sorted(folder.glob("test_parity_*.py"))
    assert modules
    for path in modules:
        module = ast.parse(path.read_text())
        for name in ("BACKENDS", "EAGER_BACKENDS"):
            value = _assigned(module, name)
            if value is not None:
                assert "reference.torch" not in _param_ids(value), f"{path.name}: {name}"
        assert "test_reference_contract" in _tests(module), path.name


def test_a_reference_only_op_gets_the_reference_check_and_no_parity_test(generated, cli):
    manifest = generated / "ops.yaml"
    text = manifest.read_text()
    assert text.count("      fast: act.scale_into\n") == 1
    manifest.write_text(text.replace("      fast: act.scale_into\n", ""))
    rc, out, err = cli("--root", generated)
    assert rc == 0, err
    module = ast.parse((generated / "tests/generated/test_parity_scale_into.py").read_text())
    assert _assigned(module, "BACKENDS") is None
    assert _tests(module) == {"test_reference_contract"}
    assert ast.literal_eval(_assigned(module, "RETURNS")) == ["None"]
    assert ast.literal_eval(_assigned(module, "MUTATES")) == ["dest"]


@pytest.mark.parametrize("root", ["fixture", "repository"])
def test_the_conftest_gives_the_parity_of_the_manifests_reference_and_seed(root, generated):
    tree = generated if root == "fixture" else REPO
    path = tree / "tests/generated/conftest.py"
    spec = importlib.util.spec_from_file_location("generated_parity_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.Parity is parity.Parity
    assert module.REFERENCE == read_manifest(tree / "ops.yaml", tree).reference.impl_id
    assert module.SEED == SEED


@pytest.mark.parametrize("root", ["fixture", "repository"])
def test_the_collectives_are_tested_in_one_module_holding_the_manifests_spec(root, generated):
    tree = generated if root == "fixture" else REPO
    manifest = read_manifest(tree / "ops.yaml", tree)
    collectives = [op for op in manifest.ops if op.collective is not None and op.tests]
    assert collectives
    folder = tree / "tests/generated"
    assert not [op.name for op in collectives if (folder / f"test_parity_{op.name}.py").exists()]
    module = ast.parse((folder / "test_collectives.py").read_text())
    spec = ast.literal_eval(_assigned(module, "SPEC"))
    assert list(spec) == [op.name for op in collectives]
    for op in collectives:
        entry = spec[op.name]
        assert entry["method"] == op.collective
        ids = [manifest.backend(impl.backend).impl_id for impl in op.impls]
        assert sorted(entry["impls"]) == sorted(ids) and entry["impls"][0] == "reference.torch"
        assert list(entry["tolerances"]) == list(op.tests.dtypes)
        assert len(entry["cases"]) == len(op.tests.cases)
        # every argument given, in signature order
        assert all(list(c["args"]) == list(op.schema.arg_names) for c in entry["cases"])
        assert ("receiver" in entry) == (op.collective == "send")
    assert ast.literal_eval(_assigned(module, "SEED")) == SEED
