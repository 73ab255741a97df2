"""The machinery of the generated parity tests (``vllm_fl.testing.parity``): the reference
checked alone fails where it breaks its declared contract; quantized, derived and float8 inputs;
float8 results compared in float32; the round trip of a quantized op; the reference and the seed
the generated conftest passes."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch

from codegen.dest.parity import SEED
from codegen.manifest import project_manifest
from vllm_fl.testing.parity import Parity

#: the reference impl of the repository's manifest
REFERENCE = project_manifest().reference.impl_id


class Fake(Parity):
    """``Parity`` with the reference replaced by ``fn`` and a stand-in for every layer."""

    fn = None

    def impl(self, op, impl_id):
        assert impl_id == self.reference
        return SimpleNamespace(fn=self.fn, impl_id=impl_id, available=None)

    def layer(self, path, init, dtype, device):
        if path is None:
            return None
        return SimpleNamespace(weight=torch.ones(8, dtype=dtype), eps=1e-6, undeclared=1)


@pytest.fixture(scope="module")
def parity():
    """A ``Parity`` as the repository's generated tests get it: the manifest's reference impl
    (replaced by ``parity.fn``) and the generator's seed."""
    return Fake(REFERENCE, SEED)


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


def test_the_seed_draws_the_inputs():
    spec = {
        "x": {"shape": (4, 8), "dtype": "$dtype"},
        "i": {"shape": (5,), "dtype": "int64", "high": 9},
    }
    first = Parity(REFERENCE, SEED).inputs(spec, torch.float32, "cpu")
    again = Parity(REFERENCE, SEED).inputs(spec, torch.float32, "cpu")
    other = Parity(REFERENCE, SEED + 2).inputs(spec, torch.float32, "cpu")
    assert all(torch.equal(first[k], again[k]) for k in spec)
    assert not torch.equal(first["x"], other["x"])


def test_the_reference_is_the_one_asked_for_and_named():
    mine = Fake("reference.mine", SEED)
    mine.fn = lambda x: None
    with pytest.raises(AssertionError, match=re.escape("reference.mine op returned None")):
        mine.check_reference("op", None, "float32", CASE, ["Tensor"])


@pytest.mark.parametrize(
    "path, found",
    [
        ("vllm.model_executor.layers.activation.NoSuchLayer", "no such class"),
        # a plain nn.Module, as vLLM 0.24's LayerNorm is
        ("torch.nn.LayerNorm", "not a CustomOp"),
    ],
)
def test_a_layer_this_vllm_has_no_custom_op_of_skips_the_test(path, found):
    with pytest.raises(pytest.skip.Exception, match=f"{re.escape(path)}: {found} in vLLM"):
        Parity(REFERENCE, SEED).layer(path, {}, torch.float32, "cpu")


def test_a_custom_op_layer_is_built():
    layer = Parity(REFERENCE, SEED).layer(
        "vllm.model_executor.layers.activation.GELU", {}, torch.float32, "cpu"
    )
    assert type(layer).__name__ == "GELU"


def test_a_case_an_impl_declares_it_does_not_serve_is_skipped():
    from vllm_fl.dispatch import OpImpl

    def fn(x, num_accepted_tokens=None):
        raise AssertionError("not to be called")

    impl = OpImpl(
        "op", "vendor.x", "vendor", fn, vendor="x", supports={"num_accepted_tokens": (None,)}
    )
    parity = Parity(REFERENCE, SEED)
    refused = {"x": torch.ones(2), "num_accepted_tokens": torch.ones(2)}
    with pytest.raises(pytest.skip.Exception, match="num_accepted_tokens=Tensor"):
        parity.require_served(impl, None, refused)
    parity.require_served(impl, None, {"x": torch.ones(2)})  # served: no skip
