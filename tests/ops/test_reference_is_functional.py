"""Reference impls never modify their inputs and never return (views of) them."""

import pytest
import torch
from ops_helpers import DTYPES, cos_sin_cache, assert_fresh, unchanged

from vllm_fl.dispatch.backends.reference.impl import activation, normalization, rotary


class Layer:
    """Just the attributes the impls read (contract: any object with the ``reads``)."""

    def __init__(self, **attrs):
        self.__dict__.update(attrs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "op", ["silu_and_mul", "mul_and_silu", "gelu_new", "gelu_fast", "quick_gelu", "gelu_and_mul"]
)
def test_activations(op, dtype):
    x = torch.randn(5, 64, dtype=dtype)
    with unchanged(x):
        out = getattr(activation, op)(Layer(approximate="tanh"), x)
    assert_fresh(out, x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["rms_norm", "gemma_rms_norm"])
@pytest.mark.parametrize("weight_dtype", ["same", torch.float32])
@pytest.mark.parametrize("with_residual", [False, True], ids=["x", "x+residual"])
def test_rms_norms(op, dtype, weight_dtype, with_residual):
    weight = torch.randn(64, dtype=dtype if weight_dtype == "same" else weight_dtype)
    layer = Layer(weight=weight, variance_epsilon=1e-6)
    x = torch.randn(5, 64, dtype=dtype)
    residual = torch.randn(5, 64, dtype=dtype) if with_residual else None
    with unchanged(x, residual, weight):
        out = getattr(normalization, op)(layer, x, residual)
    assert isinstance(out, tuple) == with_residual
    assert_fresh(out, x, residual, weight)
    if with_residual:
        assert out[0].untyped_storage().data_ptr() != out[1].untyped_storage().data_ptr()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rotary_dim", [32, 32 * 2])
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("with_key", [True, False])
def test_rotary_embedding(dtype, rotary_dim, is_neox, with_key):
    cache = cos_sin_cache(16, rotary_dim)
    layer = Layer(cos_sin_cache=cache, head_size=64, rotary_dim=rotary_dim, is_neox_style=is_neox)
    positions = torch.randint(0, 16, (5,))
    query = torch.randn(5, 128, dtype=dtype)
    key = torch.randn(5, 64, dtype=dtype) if with_key else None
    with unchanged(positions, query, key, cache):
        out = rotary.rotary_embedding(layer, positions, query, key)
    assert layer.cos_sin_cache is cache
    assert_fresh(out, positions, query, key, cache)
    assert (out[1] is None) == (key is None)
