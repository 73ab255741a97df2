"""Ascend wiring, tested with torch_npu STUBBED: torch_npu cannot run (or even be installed)
here, so a fake ``torch_npu`` module, written in plain PyTorch after the torch_npu/CANN docs,
is put into ``sys.modules``. The tests check that each Ascend impl calls the right torch_npu
function with the right arguments, returns the signature's form, leaves its inputs alone
(the fake rotary kernel works in place, like the real one) and, given kernels that do what
the docs say, agrees with the reference. They say nothing about the real kernels' numerics.
"""

import sys
import types

import pytest
import torch
import torch.nn.functional as F
from tests.support.ops_helpers import DTYPES, cos_sin_cache, TOLERANCES, assert_fresh, unchanged

from vllm_fl.backends.reference.impl import activation as ref_act
from vllm_fl.backends.reference.impl import normalization as ref_norm
from vllm_fl.backends.reference.impl import rotary as ref_rotary
from vllm_fl.backends.ascend.impl import activation, attention, normalization
from vllm_fl.backends.ascend.impl import rotary


class Layer:
    def __init__(self, **attrs):
        self.__dict__.update(attrs)


def _rms(x32, gamma, eps):
    rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return x32 * rstd * gamma.float(), rstd


class FakeTorchNpu(types.ModuleType):
    """The torch_npu functions vllm_fl calls, in plain PyTorch, recording their calls."""

    def __init__(self):
        super().__init__("torch_npu")
        self.calls = []

    def _record(self, name, *args, **kwargs):
        self.calls.append((name, args, kwargs))

    def npu_swiglu(self, x, dim=-1):
        self._record("npu_swiglu", x, dim=dim)
        a, b = x.chunk(2, dim=dim)
        return F.silu(a) * b

    def npu_geglu(self, x, dim=-1, approximate=1, activate_left=False):
        """out = gelu(A) * B with activate_left, else A * gelu(B) (aclnnGeGlu)."""
        self._record("npu_geglu", x, dim=dim, approximate=approximate, activate_left=activate_left)
        a, b = x.chunk(2, dim=dim)
        mode = {0: "none", 1: "tanh"}[approximate]
        if activate_left:
            gelu = F.gelu(a, approximate=mode)
            return gelu * b, gelu
        gelu = F.gelu(b, approximate=mode)
        return a * gelu, gelu

    def npu_rms_norm(self, x, gamma, epsilon=1e-6):
        self._record("npu_rms_norm", x, gamma, epsilon)
        assert gamma.dtype == x.dtype, "gamma in x's dtype"
        y, rstd = _rms(x.float(), gamma, epsilon)
        return y.to(x.dtype), rstd

    def npu_add_rms_norm(self, x1, x2, gamma, epsilon=1e-6):
        self._record("npu_add_rms_norm", x1, x2, gamma, epsilon)
        assert gamma.dtype == x1.dtype, "gamma in x's dtype"
        total = x1.float() + x2.float()
        y, rstd = _rms(total, gamma, epsilon)
        return y.to(x1.dtype), rstd, total.to(x1.dtype)

    def _npu_rotary_embedding(self, positions, query, key, head_size, cos_sin_cache, is_neox):
        """In place, like vLLM's kernel; rotary_dim is the cache's width."""
        self._record(
            "_npu_rotary_embedding", positions, query, key, head_size, cos_sin_cache, is_neox
        )
        assert key is not None, "the ATB kernel needs a key"
        assert query.is_contiguous() and key.is_contiguous()
        layer = Layer(
            cos_sin_cache=cos_sin_cache,
            head_size=head_size,
            rotary_dim=cos_sin_cache.shape[-1],
            is_neox_style=is_neox,
        )
        q, k = ref_rotary.rotary_embedding(layer, positions, query, key)
        query.copy_(q)
        key.copy_(k)


@pytest.fixture
def torch_npu(monkeypatch):
    fake = FakeTorchNpu()
    monkeypatch.setitem(sys.modules, "torch_npu", fake)
    return fake


def _close(actual, expected):
    torch.testing.assert_close(actual, expected, **TOLERANCES[expected.dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul_calls_npu_swiglu_stubbed(torch_npu, dtype):
    x = torch.randn(7, 256, dtype=dtype)
    with unchanged(x):
        out = activation.silu_and_mul(None, x)
    assert [c[0] for c in torch_npu.calls] == ["npu_swiglu"]
    assert torch_npu.calls[0][1][0] is x
    assert_fresh(out, x)
    _close(out, ref_act.silu_and_mul(None, x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate,code", [("none", 0), ("tanh", 1)])
def test_gelu_and_mul_calls_npu_geglu_gating_the_left_half_stubbed(
    torch_npu, approximate, code, dtype
):
    layer = Layer(approximate=approximate)
    x = torch.randn(7, 256, dtype=dtype)
    with unchanged(x):
        out = activation.gelu_and_mul(layer, x)
    ((name, args, kwargs),) = torch_npu.calls
    assert name == "npu_geglu" and args[0] is x
    assert kwargs == dict(dim=-1, approximate=code, activate_left=True)
    assert isinstance(out, torch.Tensor) and out.shape == (7, 128)
    _close(out, ref_act.gelu_and_mul(layer, x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weight_dtype", ["same", torch.float32])
def test_rms_norm_calls_npu_rms_norm_stubbed(torch_npu, dtype, weight_dtype):
    weight = torch.randn(256, dtype=dtype if weight_dtype == "same" else weight_dtype)
    layer = Layer(weight=weight, variance_epsilon=1e-5)
    x = torch.randn(7, 256, dtype=dtype)
    with unchanged(x, weight):
        out = normalization.rms_norm(layer, x)
    ((name, args, _),) = torch_npu.calls
    assert name == "npu_rms_norm" and args[0] is x and args[2] == 1e-5
    assert isinstance(out, torch.Tensor)
    assert_fresh(out, x, weight)
    _close(out, ref_norm.rms_norm(Layer(weight=args[1], variance_epsilon=1e-5), x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_with_residual_calls_npu_add_rms_norm_stubbed(torch_npu, dtype):
    weight = torch.randn(256, dtype=dtype)
    layer = Layer(weight=weight, variance_epsilon=1e-6)
    x = torch.randn(7, 256, dtype=dtype)
    residual = torch.randn(7, 256, dtype=dtype)
    with unchanged(x, residual, weight):
        out = normalization.rms_norm(layer, x, residual)
    ((name, args, _),) = torch_npu.calls
    assert name == "npu_add_rms_norm"
    assert args[0] is x and args[1] is residual and args[3] == 1e-6
    assert args[2].data_ptr() == weight.data_ptr(), "the layer's weight, uncopied"
    assert isinstance(out, tuple) and len(out) == 2
    assert_fresh(out, x, residual, weight)
    expected = ref_norm.rms_norm(layer, x, residual)
    _close(out[0], expected[0])
    _close(out[1], expected[1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("with_key", [True, False], ids=["key", "key=None"])
def test_rotary_embedding_calls_npu_rotary_embedding_on_copies_stubbed(
    torch_npu, dtype, is_neox, with_key
):
    cache = cos_sin_cache(512, 64)
    layer = Layer(cos_sin_cache=cache, head_size=64, rotary_dim=64, is_neox_style=is_neox)
    positions = torch.randint(0, 512, (7,))
    query = torch.randn(7, 256, dtype=dtype)
    key = torch.randn(7, 128, dtype=dtype) if with_key else None
    with unchanged(positions, query, key, cache):
        out = rotary.rotary_embedding(layer, positions, query, key)
    ((name, args, _),) = torch_npu.calls
    assert name == "_npu_rotary_embedding"
    assert args[0] is positions and args[3] == 64 and args[5] is is_neox
    assert args[4].dtype == dtype, "the cache is cast to the query's dtype"
    assert isinstance(out, tuple) and len(out) == 2 and (out[1] is None) == (key is None)
    assert_fresh(out, positions, query, key, cache)
    expected = ref_rotary.rotary_embedding(layer, positions, query, key)
    _close(out[0], expected[0])
    if key is not None:
        _close(out[1], expected[1])


def test_attention_backend_is_vllm_ascends():
    assert attention.attention_backend() == (
        "vllm_ascend.attention.attention_v1.AscendAttentionBackend"
    )
    assert attention.attention_backend(use_mla=True) == (
        "vllm_ascend.attention.mla_v1.AscendMLABackend"
    )
