"""The generated parity tests (``codegen.dest.parity``): the reference is never compared with
itself; every op with tests, a reference-only one included, gets a check of the reference alone
(``Parity.check_reference``) that fails where the reference breaks its declared contract."""

from __future__ import annotations

import ast
import importlib.util
import re
from types import SimpleNamespace

import pytest
import torch

from codegen_helpers import REPO


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


@pytest.fixture(scope="module")
def parity():
    """The repository's generated ``Parity`` with the reference replaced by ``parity.fn``."""
    path = REPO / "tests/generated/conftest.py"
    spec = importlib.util.spec_from_file_location("generated_parity_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Fake(module.Parity):
        fn = None

        def impl(self, op, impl_id):
            assert impl_id == module.REFERENCE
            return SimpleNamespace(fn=self.fn, impl_id=impl_id)

        def layer(self, path, init, dtype, device):
            if path is None:
                return None
            return SimpleNamespace(weight=torch.ones(8, dtype=dtype), eps=1e-6, undeclared=1)

    return Fake()


CASE = {"init": {}, "inputs": {"x": {"shape": (3, 8), "dtype": "$dtype"}}}


def _check(parity, fn, returns, case=CASE, mutates=()):
    parity.fn = fn  # an instance attribute: called unbound
    parity.check_reference("op", None, "float32", case, returns, mutates=mutates)


def test_reference_check_passes_a_reference_keeping_its_contract(parity):
    _check(parity, lambda x: x * 2, ["Tensor"])
    _check(parity, lambda x: (x + 1, None), ["Tensor", "(Tensor, Tensor?)"])
    _check(parity, lambda x: "path.Class", ["str"])


@pytest.mark.parametrize(
    "fn, returns, message",
    [
        (lambda x: (x * 2, x * 3), ["Tensor"], "returned (Tensor[(3, 8), torch.float32], "),
        (lambda x: x * 2, ["(Tensor, Tensor)"], "declared (Tensor, Tensor)"),
        (lambda x: None, ["Tensor"], "returned None, declared Tensor"),
        (lambda x: True, ["int"], "returned bool, declared int"),
        (lambda x: x / 0.0 * 0.0, ["Tensor"], "output 0 is not finite"),
        (lambda x: x, ["Tensor"], "returned its input 'x'"),
        (lambda x: x[:, :4], ["Tensor"], "output 0 shares memory with an input"),
        (lambda x: x.mul_(2), ["Tensor"], "mutated input 'x'"),
        (lambda x: (_ for _ in ()).throw(NotImplementedError("stub")), ["Tensor"], "stub"),
    ],
    ids=["tuple", "not-tuple", "none", "bool-for-int", "nan", "alias", "view", "mutates", "raises"],
)
def test_reference_check_fails_a_reference_breaking_its_contract(parity, fn, returns, message):
    with pytest.raises((AssertionError, NotImplementedError), match=re.escape(message)):
        _check(parity, fn, returns)


def test_reference_check_of_an_op_writing_into_its_outputs(parity):
    case = {
        "init": {},
        "inputs": {
            "x": {"shape": (3, 8), "dtype": "$dtype"},
            "dest": {"shape": (3, 8), "dtype": "$dtype"},
        },
    }

    def writes(x, dest):
        dest.copy_(x * 2)

    def returns(x, dest):
        dest.copy_(x * 2)
        return dest

    def writes_nan(x, dest):
        dest.fill_(float("nan"))

    _check(parity, writes, ["None"], case, mutates=["dest"])
    with pytest.raises(AssertionError, match="returned Tensor, not None"):
        _check(parity, returns, ["None"], case, mutates=["dest"])
    with pytest.raises(AssertionError, match="output 0 is not finite"):
        _check(parity, writes_nan, ["None"], case, mutates=["dest"])


def _check_layer(parity, fn, **options):
    parity.fn = fn
    parity.check_reference(
        "op", "a.Layer", "float16", CASE, ["Tensor"], ["weight", "eps"], **options
    )


def test_reference_check_gives_the_reference_only_the_attributes_it_declares(parity):
    _check_layer(parity, lambda self, x: x * self.weight + self.eps)
    _check_layer(parity, lambda self, x: (x * self.weight).half(), weight_dtype="float32")
    with pytest.raises(AttributeError, match="undeclared"):
        _check_layer(parity, lambda self, x: x * self.undeclared)


@pytest.mark.parametrize(
    "fn, message",
    [
        (lambda self, x: x * self.weight.mul_(2), "modified layer.weight"),
        (lambda self, x: setattr(self, "eps", 0.0) or x * 2, "rebound layer.eps"),
        (lambda self, x: self.weight, "returned an input"),
        (lambda self, x: self.weight[:4], "output 0 shares memory with an input"),
    ],
    ids=["modifies", "rebinds", "returns", "views"],
)
def test_reference_check_fails_a_reference_touching_the_layer(parity, fn, message):
    with pytest.raises(AssertionError, match=re.escape(message)):
        _check_layer(parity, fn)
