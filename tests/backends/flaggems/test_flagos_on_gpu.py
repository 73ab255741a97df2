"""Every flagos impl against the reference impl on a GPU with the real FlagGems, per dtype, with
the manifest's tolerances. Beyond the generated parity tests' cases it covers strided inputs,
hidden sizes past FlagGems' single-block rms_norm kernel (8192), weights in float32 under half
inputs, and q/k as views of one qkv tensor. Each impl must leave its inputs unchanged and return
fresh tensors.

Marked ``gpu``: skipped without an NVIDIA GPU or flag_gems; `make test-gpu` runs it.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from tests.support.ops_helpers import DTYPES, TOLERANCES, assert_fresh, cos_sin_cache, unchanged

from vllm_fl.backends.flaggems.impl import activation as flagos_act
from vllm_fl.backends.flaggems.impl import normalization as flagos_norm
from vllm_fl.backends.flaggems.impl import rotary as flagos_rotary
from vllm_fl.backends.reference.impl import activation as ref_act
from vllm_fl.backends.reference.impl import normalization as ref_norm
from vllm_fl.backends.reference.impl import rotary as ref_rotary

pytestmark = pytest.mark.gpu("flag_gems")

DEVICE = "cuda"
ACTIVATIONS = [
    "silu_and_mul",
    "mul_and_silu",
    "gelu_new",
    "gelu_fast",
    "quick_gelu",
    "gelu",
    "gelu_tanh",
    "relu_squared",
]
SHAPES = [(7, 256), (2, 3, 128), (1, 2 * 11008), (4096, 2 * 1408)]
DTYPE_IDS = [str(d).rsplit(".", 1)[-1] for d in DTYPES]
#: head_size, rotary_dim, neox style, with key, query heads, key heads, tokens
ROTARY_CASES = [
    (64, 64, True, True, 4, 2, 7),
    (64, 64, False, True, 4, 2, 7),
    (64, 32, True, False, 4, 2, 7),
    (128, 128, True, True, 32, 8, 300),
    (128, 64, False, True, 8, 8, 33),
    (64, 64, False, False, 4, 2, 7),
]


def _layer(**attrs) -> SimpleNamespace:
    """The stand-in ``self`` an impl reads layer attributes from."""
    return SimpleNamespace(**attrs)


def _assert_matches(got, expected, dtype: torch.dtype, *inputs: torch.Tensor | None) -> None:
    got_t = got if isinstance(got, tuple) else (got,)
    expected_t = expected if isinstance(expected, tuple) else (expected,)
    assert len(got_t) == len(expected_t)
    assert_fresh(got, *inputs)
    for g, e in zip(got_t, expected_t):
        if e is None:
            assert g is None
            continue
        assert (g.shape, g.dtype) == (e.shape, e.dtype)
        torch.testing.assert_close(g.float(), e.float(), **TOLERANCES[dtype])


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("op", ACTIVATIONS)
def test_activation(op, dtype, shape):
    x = torch.randn(shape, dtype=dtype, device=DEVICE)
    with unchanged(x):
        got = getattr(flagos_act, op)(None, x)
    _assert_matches(got, getattr(ref_act, op)(None, x), dtype, x)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_mul(approximate, dtype, shape):
    x = torch.randn(shape, dtype=dtype, device=DEVICE)
    layer = _layer(approximate=approximate)
    with unchanged(x):
        got = flagos_act.gelu_and_mul(layer, x)
    _assert_matches(got, ref_act.gelu_and_mul(layer, x), dtype, x)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_activation_of_a_strided_view(dtype):
    big = torch.randn(7, 1024, dtype=dtype, device=DEVICE)
    x = big[:, :512]  # a column slice: not contiguous
    with unchanged(big):
        got = flagos_act.silu_and_mul(None, x)
    _assert_matches(got, ref_act.silu_and_mul(None, x), dtype, big)


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("weight_dtype", ["input", "float32"])
@pytest.mark.parametrize("hidden", [256, 4096, 8192])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("op", ["rms_norm", "gemma_rms_norm"])
def test_norm(op, dtype, hidden, weight_dtype, residual):
    wdt = dtype if weight_dtype == "input" else torch.float32
    weight = (torch.randn(hidden, device=DEVICE) * 0.5).to(wdt)
    layer = _layer(weight=weight, variance_epsilon=1e-6)
    x = torch.randn(7, hidden, dtype=dtype, device=DEVICE)
    r = torch.randn(7, hidden, dtype=dtype, device=DEVICE) if residual else None
    with unchanged(x, r, weight):
        got = getattr(flagos_norm, op)(layer, x, r)
    _assert_matches(got, getattr(ref_norm, op)(layer, x, r), dtype, x, r, weight)


# vLLM 0.24's LayerNorm is a plain module (the generated parity tests skip there): a stand-in
# layer holds what ops.yaml says the op reads
@pytest.mark.parametrize("affine", ["weight+bias", "weight", "none"])
@pytest.mark.parametrize("weight_dtype", ["input", "float32"])
@pytest.mark.parametrize("hidden", [96, 4096])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_layer_norm(dtype, hidden, weight_dtype, affine):
    wdt = dtype if weight_dtype == "input" else torch.float32
    weight = None if affine == "none" else (1 + 0.5 * torch.randn(hidden, device=DEVICE)).to(wdt)
    bias = (torch.randn(hidden, device=DEVICE) * 0.5).to(wdt) if affine == "weight+bias" else None
    layer = _layer(normalized_shape=(hidden,), weight=weight, bias=bias, eps=1e-5)
    x = 2 * torch.randn(7, hidden, dtype=dtype, device=DEVICE) + 0.5
    with unchanged(x, weight, bias):
        got = flagos_norm.layer_norm(layer, x)
    _assert_matches(got, ref_norm.layer_norm(layer, x), dtype, x, weight, bias)


@pytest.mark.parametrize("case", ROTARY_CASES, ids=lambda c: "h{}-rd{}-neox{}-key{}".format(*c))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rotary_embedding(dtype, case):
    head, rotary_dim, neox, with_key, n_q, n_k, tokens = case
    layer = _layer(
        cos_sin_cache=cos_sin_cache(4096, rotary_dim).to(DEVICE),
        head_size=head,
        rotary_dim=rotary_dim,
        is_neox_style=neox,
    )
    positions = torch.randint(0, 4096, (tokens,), device=DEVICE)
    q = torch.randn(tokens, n_q * head, dtype=dtype, device=DEVICE)
    k = torch.randn(tokens, n_k * head, dtype=dtype, device=DEVICE) if with_key else None
    with unchanged(positions, q, k):
        got = flagos_rotary.rotary_embedding(layer, positions, q, k)
    expected = ref_rotary.rotary_embedding(layer, positions, q, k)
    _assert_matches(got, expected, dtype, q, k, positions)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rotary_embedding_of_qkv_views(dtype):
    """q and k as strided views of one qkv tensor, as vLLM's attention layers pass them."""
    head = 128
    qkv = torch.randn(9, (8 + 2 + 2) * head, dtype=dtype, device=DEVICE)
    q, k, _ = qkv.split([8 * head, 2 * head, 2 * head], dim=-1)
    layer = _layer(
        cos_sin_cache=cos_sin_cache(4096, head).to(DEVICE),
        head_size=head,
        rotary_dim=head,
        is_neox_style=True,
    )
    positions = torch.randint(0, 4096, (9,), device=DEVICE)
    with unchanged(qkv):
        got = flagos_rotary.rotary_embedding(layer, positions, q, k)
    _assert_matches(got, ref_rotary.rotary_embedding(layer, positions, q, k), dtype, qkv)
