"""The reference backend equals vLLM's in-tree ``forward_native`` for the same layer.

vLLM's native paths run on clones (its fused add + RMSNorm may work in place); ours runs on
the originals. The comparison is exact: the reference does the same operations in the same
dtypes, so it must agree bit for bit, which the parity tolerances would hide.

Every layer op of ops.yaml with a reference impl, on each of its test cases and dtypes (a layer
with a ``weight`` also with a float32 weight under half-precision inputs); ops with a
``residual`` argument also return the sum they normalised. Then what single ops promise beyond
their test cases (GELU's approximation, rotary styles and caches).
"""

import pytest
import torch
from ops_helpers import DTYPES, case_inputs, case_layer, reference_cases, reference_fn

from vllm_fl.dispatch.backends.reference.impl import activation, rotary


def _exact(actual, expected):
    torch.testing.assert_close(actual, expected, atol=0, rtol=0)


def _layered(op) -> bool:
    return op.layer is not None


def _reads_weight(op) -> bool:
    return op.layer is not None and any(attr.name == "weight" for attr in op.reads)


def _takes_residual(op) -> bool:
    return op.layer is not None and op.schema.argument("residual") is not None


def _clones(inputs: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _matches_forward_native(op, case, dtype, weight_dtype=None):
    layer = case_layer(op, case, dtype)
    if weight_dtype is not None:
        layer.weight = torch.nn.Parameter(layer.weight.detach().to(weight_dtype), False)
    inputs = case_inputs(case, dtype)
    expected = layer.forward_native(**_clones(inputs))
    actual = reference_fn(op)(layer, **inputs)
    _exact(actual, expected)
    return layer, inputs, actual


@pytest.mark.parametrize("op, case, dtype", list(reference_cases(_layered)))
def test_reference_matches_forward_native(vllm_config, op, case, dtype):
    _matches_forward_native(op, case, dtype)


@pytest.mark.parametrize(
    "op, case, dtype", [p for p in reference_cases(_reads_weight) if p.values[2] != torch.float32]
)
def test_reference_matches_forward_native_with_a_float32_weight(vllm_config, op, case, dtype):
    _matches_forward_native(op, case, dtype, weight_dtype=torch.float32)


@pytest.mark.parametrize(
    "op, case, dtype",
    [p for p in reference_cases(_takes_residual) if dict(p.values[1].inputs).get("residual")],
)
def test_with_a_residual_the_reference_returns_normed_and_sum(vllm_config, op, case, dtype):
    layer, inputs, out = _matches_forward_native(op, case, dtype)
    assert isinstance(out, tuple) and len(out) == 2
    normed, new_residual = out
    x, residual = inputs["x"], inputs["residual"]
    # The second result is x + residual (summed in float32, rounded once) ...
    _exact(new_residual, (x.float() + residual.float()).to(dtype))
    # ... and the first is the normalisation of that sum.
    alone = reference_fn(op)(layer, **{**inputs, "x": new_residual, "residual": None})
    assert torch.allclose(normed.float(), alone.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_mul_honours_approximate(vllm_config, approximate, dtype):
    from vllm.model_executor.layers.activation import GeluAndMul

    layer = GeluAndMul(approximate)
    x = torch.randn(7, 256, dtype=dtype)
    out = activation.gelu_and_mul(layer, x)
    _exact(out, layer.forward_native(x.clone()))
    other = GeluAndMul("tanh" if approximate == "none" else "none")
    assert not torch.equal(out, other.forward_native(x.clone())), "approximate ignored"


def _rope(head_size, rotary_dim, is_neox, cache_dtype):
    from vllm.model_executor.layers.rotary_embedding import RotaryEmbedding

    return RotaryEmbedding(head_size, rotary_dim, 512, 10000.0, is_neox, cache_dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("rotary_dim", [64, 32])
@pytest.mark.parametrize("with_key", [True, False], ids=["key", "key=None"])
def test_rotary_embedding(vllm_config, dtype, is_neox, rotary_dim, with_key):
    layer = _rope(64, rotary_dim, is_neox, dtype)
    positions = torch.randint(0, 512, (7,))
    query = torch.randn(7, 4 * 64, dtype=dtype)
    key = torch.randn(7, 2 * 64, dtype=dtype) if with_key else None
    q, k = rotary.rotary_embedding(layer, positions, query, key)
    eq, ek = layer.forward_native(positions, query.clone(), None if key is None else key.clone())
    _exact(q, eq)
    if key is None:
        assert k is None and ek is None
    else:
        _exact(k, ek)
    # Only the first rotary_dim features of each head move.
    heads = q.view(7, 4, 64)
    assert torch.equal(heads[..., rotary_dim:], query.view(7, 4, 64)[..., rotary_dim:])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rotary_embedding_casts_the_cache_to_the_query_dtype(vllm_config, dtype):
    """A float32 cache with half-precision queries: vLLM casts the cache to the query's dtype
    first (and stores the cast on the layer); we cast too, and leave the layer alone."""
    layer = _rope(64, 64, True, torch.float32)
    cache = layer.cos_sin_cache
    positions = torch.randint(0, 512, (5,))
    query = torch.randn(5, 128, dtype=dtype)
    key = torch.randn(5, 64, dtype=dtype)
    q, k = rotary.rotary_embedding(layer, positions, query, key)
    assert layer.cos_sin_cache is cache and cache.dtype == torch.float32
    eq, ek = layer.forward_native(positions, query.clone(), key.clone())
    _exact(q, eq)
    _exact(k, ek)


def test_gptj_and_neox_differ(vllm_config):
    """The two styles pair different features; a mix-up would not go unnoticed."""
    positions = torch.arange(1, 6)
    query = torch.randn(5, 128)
    neox, _ = rotary.rotary_embedding(_rope(64, 64, True, torch.float32), positions, query)
    gptj, _ = rotary.rotary_embedding(_rope(64, 64, False, torch.float32), positions, query)
    assert not torch.allclose(neox, gptj)
