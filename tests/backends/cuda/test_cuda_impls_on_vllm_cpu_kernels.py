"""The CUDA vendor impls, run for real on vLLM's CPU build.

vLLM's CPU build registers most of the same ``torch.ops._C`` kernels as its CUDA build, with
the same signatures (``silu_and_mul(out, x)``, ``rms_norm(out, x, w, eps)``,
``rotary_embedding(positions, q, k, head_size, cache, is_neox)``, ...), so calling the CUDA
vendor impls on CPU tensors exercises their wiring end to end: argument order, output
allocation, the copies that keep in-place kernels functional. A kernel the CPU build lacks
(``mul_and_silu``) is skipped. CUDA numerics are the GPU parity tests' business.
"""

import pytest
import torch
from tests.support.ops_helpers import DTYPES, TOLERANCES, assert_fresh, unchanged

from vllm_fl.backends.reference.impl import activation as ref_act
from vllm_fl.backends.reference.impl import normalization as ref_norm
from vllm_fl.backends.reference.impl import rotary as ref_rotary
from vllm_fl.backends.cuda.impl import activation, normalization, rotary

KERNEL = {
    "silu_and_mul": "silu_and_mul",
    "mul_and_silu": "mul_and_silu",
    "gelu_new": "gelu_new",
    "gelu_fast": "gelu_fast",
    "quick_gelu": "gelu_quick",
}


class Layer:
    def __init__(self, **attrs):
        self.__dict__.update(attrs)


@pytest.fixture(autouse=True)
def _vllm_kernels():
    from vllm_fl import compat

    if not compat.is_cpu_build():
        pytest.skip(
            "runs vLLM's CPU kernels on CPU tensors; on vLLM's CUDA build the GPU parity tests run these impls"
        )
    from vllm.platforms import current_platform

    current_platform.import_kernels()


def _needs(kernel: str):
    if not hasattr(torch.ops._C, kernel):
        pytest.skip(f"vLLM's CPU build has no torch.ops._C.{kernel}")


def _close(actual, expected):
    torch.testing.assert_close(actual, expected, **TOLERANCES[expected.dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(KERNEL))
def test_activation(op, dtype):
    _needs(KERNEL[op])
    x = torch.randn(7, 256, dtype=dtype)
    with unchanged(x):
        out = getattr(activation, op)(None, x)
    assert_fresh(out, x)
    _close(out, getattr(ref_act, op)(None, x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_mul(approximate, dtype):
    _needs("gelu_tanh_and_mul" if approximate == "tanh" else "gelu_and_mul")
    layer = Layer(approximate=approximate)
    x = torch.randn(7, 256, dtype=dtype)
    with unchanged(x):
        out = activation.gelu_and_mul(layer, x)
    _close(out, ref_act.gelu_and_mul(layer, x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["rms_norm", "gemma_rms_norm"])
@pytest.mark.parametrize("weight_dtype", ["same", torch.float32])
@pytest.mark.parametrize("with_residual", [False, True], ids=["x", "x+residual"])
def test_rms_norms(op, dtype, weight_dtype, with_residual):
    _needs("rms_norm")
    weight = torch.randn(256, dtype=dtype if weight_dtype == "same" else weight_dtype) * 0.5
    layer = Layer(weight=weight, variance_epsilon=1e-5)
    x = torch.randn(7, 256, dtype=dtype)
    residual = torch.randn(7, 256, dtype=dtype) if with_residual else None
    with unchanged(x, residual, weight):
        out = getattr(normalization, op)(layer, x, residual)
    assert isinstance(out, tuple) == with_residual
    assert_fresh(out, x, residual, weight)
    expected = getattr(ref_norm, op)(layer, x, residual)
    for a, b in zip(out, expected) if with_residual else [(out, expected)]:
        _close(a, b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("rotary_dim", [64, 32])
@pytest.mark.parametrize("with_key", [True, False], ids=["key", "key=None"])
def test_rotary_embedding(vllm_config, dtype, is_neox, rotary_dim, with_key):
    _needs("rotary_embedding")
    from vllm.model_executor.layers.rotary_embedding import RotaryEmbedding

    layer = RotaryEmbedding(64, rotary_dim, 512, 10000.0, is_neox, torch.float32)
    positions = torch.randint(0, 512, (7,))
    query = torch.randn(7, 256, dtype=dtype)
    key = torch.randn(7, 128, dtype=dtype) if with_key else None
    with unchanged(positions, query, key):
        out = rotary.rotary_embedding(layer, positions, query, key)
    assert layer.cos_sin_cache.dtype == torch.float32, "the layer is left alone"
    assert_fresh(out, positions, query, key)
    expected = ref_rotary.rotary_embedding(layer, positions, query, key)
    _close(out[0], expected[0])
    if with_key:
        _close(out[1], expected[1])
    else:
        assert out[1] is None


# -- the in-place eager variants (ops.yaml `eager`), run outside torch.compile ---------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weight_dtype", ["same", torch.float32])
@pytest.mark.parametrize("with_residual", [False, True], ids=["x", "x+residual"])
def test_rms_norm_inplace(dtype, weight_dtype, with_residual):
    _needs("fused_add_rms_norm")
    weight = torch.randn(256, dtype=dtype if weight_dtype == "same" else weight_dtype) * 0.5
    layer = Layer(weight=weight, variance_epsilon=1e-5)
    x = torch.randn(7, 256, dtype=dtype)
    residual = torch.randn(7, 256, dtype=dtype) if with_residual else None
    expected = ref_norm.rms_norm(layer, x, residual)
    x0 = x.clone()
    with unchanged(weight):
        out = normalization.rms_norm_inplace(layer, x, residual)
    assert isinstance(out, tuple) == with_residual
    if with_residual and weight.dtype == dtype:
        # vLLM's fused_add_rms_norm: x <- rms_norm(x + r), r <- x + r, both returned
        assert out[0] is x and out[1] is residual
    else:  # the functional path: nothing overwritten
        assert torch.equal(x, x0)
        assert_fresh(out, x, residual, weight)
    for a, b in zip(out, expected) if with_residual else [(out, expected)]:
        _close(a, b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("rotary_dim", [64, 32])
@pytest.mark.parametrize("with_key", [True, False], ids=["key", "key=None"])
def test_rotary_embedding_inplace(vllm_config, dtype, is_neox, rotary_dim, with_key):
    _needs("rotary_embedding")
    from vllm.model_executor.layers.rotary_embedding import RotaryEmbedding

    layer = RotaryEmbedding(64, rotary_dim, 512, 10000.0, is_neox, torch.float32)
    positions = torch.randint(0, 512, (7,))
    query = torch.randn(7, 256, dtype=dtype)
    key = torch.randn(7, 128, dtype=dtype) if with_key else None
    expected = ref_rotary.rotary_embedding(layer, positions, query, key)
    with unchanged(positions, layer.cos_sin_cache):
        out = rotary.rotary_embedding_inplace(layer, positions, query, key)
    assert out[0] is query and out[1] is key  # rotated in place, key=None passed through
    _close(query, expected[0])
    if with_key:
        _close(key, expected[1])


def test_adapters_run_the_eager_variants_outside_a_trace():
    """The generated adapters of backend cuda call the in-place variants in eager mode."""
    _needs("fused_add_rms_norm")
    from vllm_fl.backends.cuda import register_ops

    assert register_ops.rms_norm.eager is normalization.rms_norm_inplace
    assert register_ops.rms_norm.functional is normalization.rms_norm
    assert register_ops.rotary_embedding.eager is rotary.rotary_embedding_inplace
    layer = Layer(weight=torch.randn(256), variance_epsilon=1e-5)
    x, residual = torch.randn(7, 256), torch.randn(7, 256)
    out = register_ops.rms_norm(layer, x, residual)
    assert out[0] is x and out[1] is residual
