"""The reference backend equals vLLM's in-tree ``forward_native`` where single ops promise more
than their test cases show: GELU's approximation, rotary styles and caches. The comparison is
exact: the reference does the same operations in the same dtypes, so it must agree bit for bit.

Every test case of ops.yaml is checked against ``forward_native`` by the generated parity tests
(``tests/generated``), with the reference's contract (functional, reads only what ops.yaml
declares).
"""

import pytest
import torch
from tests.support.ops_helpers import DTYPES

from vllm_fl.backends.reference.impl import activation, rotary


def _exact(actual, expected):
    torch.testing.assert_close(actual, expected, atol=0, rtol=0)


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
