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
            return SimpleNamespace(fn=self.fn, impl_id=impl_id, available=None)

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


REFERENCE_QUANT = "vllm_fl.backends.reference.impl.quant"
#: int8_scaled_mm's asymmetric case of ops.yaml: a per token with zero points, b per channel
QUANTIZED_CASE = {
    "init": {},
    "inputs": {
        "a": {
            "quantize": (5, 64),
            "scheme": "int8_token_asym",
            "scales": "scale_a",
            "zeros": "azp",
        },
        "b": {
            "quantize": (24, 64),
            "scheme": "int8_channel",
            "scales": "scale_b",
            "transpose": True,
        },
        "out_dtype": {"value": "bfloat16"},
        "bias": {"shape": (24,), "dtype": "$dtype"},
        "azp_adj": {"derive": f"{REFERENCE_QUANT}:int8_scaled_mm_azp_adj"},
    },
}


def test_a_quantized_input_assigns_values_scales_and_zero_points(parity):
    values, originals = parity.build(QUANTIZED_CASE["inputs"], torch.bfloat16, "cpu")
    a, b = values["a"], values["b"]
    assert a.dtype == torch.int8 and a.shape == (5, 64)
    assert b.dtype == torch.int8 and b.shape == (64, 24) and b.stride() == (1, 64)  # w.t()
    # scales and zero points keep their scheme's dtypes, whatever the dtype under test
    assert values["scale_a"].dtype == torch.float32 and values["scale_a"].shape == (5, 1)
    assert values["scale_b"].dtype == torch.float32 and values["scale_b"].shape == (24, 1)
    assert values["azp"].dtype == torch.int32 and values["azp"].shape == (5, 1)
    assert values["bias"].dtype == torch.bfloat16
    assert sorted(originals) == ["a", "b"]
    assert originals["a"].dtype == torch.float32 and originals["b"].shape == (64, 24)
    dequantised_a = (a.float() - values["azp"].float()) * values["scale_a"]
    assert ((dequantised_a - originals["a"]).abs() <= values["scale_a"] * 0.501).all()
    dequantised_b = b.float() * values["scale_b"].reshape(1, -1)
    assert (
        (dequantised_b - originals["b"]).abs() <= values["scale_b"].reshape(1, -1) * 0.501
    ).all()
    # derived from the other arguments: the weight's column sums
    assert torch.equal(values["azp_adj"], b.to(torch.int64).sum(0, keepdim=True).to(torch.int32))
    again, _ = parity.build(QUANTIZED_CASE["inputs"], torch.bfloat16, "cpu")
    assert all(torch.equal(values[k], again[k]) for k in values if k != "out_dtype")


def test_a_float8_tensor_input_holds_normal_values_cast(parity):
    spec = {"x": {"shape": (4, 8), "dtype": "float8_e4m3fn", "scale": 2.0}}
    x = parity.inputs(spec, torch.bfloat16, "cpu")["x"]
    assert x.dtype == torch.float8_e4m3fn
    assert x.float().abs().max() > 0 and torch.isfinite(x.float()).all()


def test_float8_results_are_compared_in_float32(parity):
    x = torch.linspace(-4, 4, 16).to(torch.float8_e4m3fn)
    tolerance = {"atol": 0.0, "rtol": 0.0}
    parity.compare(x.clone(), x, tolerance)
    with pytest.raises(AssertionError, match="Mismatched elements"):
        parity.compare((x.float() * 2).to(torch.float8_e4m3fn), x, tolerance)
    with pytest.raises(AssertionError, match="torch.bfloat16, expected torch.float8_e4m3fn"):
        parity.compare(x.to(torch.bfloat16), x, tolerance)


def test_reference_check_accepts_a_float8_result(parity):
    case = {"init": {}, "inputs": {"x": {"shape": (3, 8), "dtype": "$dtype"}}}
    _check(parity, lambda x: x.to(torch.float8_e4m3fn), ["Tensor"], case)


def _round_trip(parity, fn):
    from vllm_fl.backends.reference.impl import quant

    parity.fn = fn or quant.int8_scaled_mm
    parity.check_round_trip(
        "int8_scaled_mm",
        None,
        "reference.torch",
        "cpu",
        "bfloat16",
        QUANTIZED_CASE,
        f"{REFERENCE_QUANT}:int8_scaled_mm_round_trip",
        {"atol": 0.75, "rtol": 0.05},
    )


def test_round_trip_passes_the_reference_gemm_of_quantized_inputs(parity):
    _round_trip(parity, None)


def test_round_trip_fails_a_gemm_that_drops_the_zero_points(parity):
    from vllm_fl.backends.reference.impl import quant

    def no_zero_points(a, b, scale_a, scale_b, out_dtype, bias=None, azp_adj=None, azp=None):
        return quant.int8_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)

    with pytest.raises(AssertionError, match="Mismatched elements"):
        _round_trip(parity, no_zero_points)
