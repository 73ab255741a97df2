"""``fused_experts_quant`` of the flagos and cuda backends against the reference on a GPU, for every
format the op takes, on the shapes of Qwen3-30B-A3B-FP8 (128 experts, hidden 2048, intermediate
768, top 8) and smaller ones: decode (1 token), a ragged batch and a prefill chunk.

The weights are quantised by ``tests.support.moe_quant`` (independently of the impls); the
reference quantises the W8A8 activations as the kernels do, so the kernels meet it within the
rounding of the bfloat16 intermediates (a value on an FP8/INT8 rounding boundary may land one
step apart). Each impl must return a fresh tensor and leave its inputs alone.

Marked ``gpu``: flagos needs flag_gems, cuda vLLM's CUDA build; `make test-gpu` runs them.
"""

from __future__ import annotations

import pytest
import torch
from tests.support import moe_quant
from tests.support.ops_helpers import assert_fresh

from vllm_fl.backends.reference.impl.moe_quant import (
    fused_experts_quant as reference,
)

DEVICE = "cuda"
BACKENDS = [
    pytest.param("flagos", marks=pytest.mark.gpu("flag_gems"), id="flagos"),
    pytest.param("cuda", marks=pytest.mark.gpu("vllm"), id="cuda"),
]
#: relative Frobenius error allowed against the reference
W8A8_TOLERANCE = 3e-2
#: vLLM's CUDA experts on 128x128 FP8 blocks: measured 0.062-0.065 on the H100 at every shape and
#: token count (its activation quantisation is not the scheme's exact per-group scale), FlagGems'
#: under 0.03
FP8_BLOCK_TOLERANCE = {"flagos": W8A8_TOLERANCE, "cuda": 8e-2}
WEIGHT_ONLY_TOLERANCE = 1e-2


def _impl(backend: str):
    if backend == "flagos":
        from vllm_fl.backends.flaggems.impl.moe_quant import fused_experts_quant
    else:
        from vllm_fl.backends.cuda.impl.moe_quant import fused_experts_quant
    return fused_experts_quant


def _problem(experts, hidden, inter, tokens, top_k, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen)
    w1 = torch.randn(experts, 2 * inter, hidden, generator=gen) * 0.02
    w2 = torch.randn(experts, hidden, inter, generator=gen) * 0.02
    weights, ids = moe_quant.routing(tokens, experts, top_k, gen)
    return x, w1, w2, weights, ids


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes, comparable with torch.equal for every dtype (float8 too)."""
    return t.contiguous().view(torch.uint8)


def _check(backend, arguments, tolerance):
    on_gpu = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in arguments.items()}
    on_gpu["hidden_states"] = on_gpu["hidden_states"].to(torch.bfloat16)
    if on_gpu["quant_type"] in ("int8_w8a16", "int4_w4a16"):
        # vLLM's WNA16 MoE layers hold their scales in the activations' dtype (its CUDA WNA16
        # kernel reads them so)
        for name in ("w1_scale", "w2_scale"):
            on_gpu[name] = on_gpu[name].to(torch.bfloat16)
    tensors = [v for v in on_gpu.values() if isinstance(v, torch.Tensor)]
    before = [_bits(t).clone() for t in tensors]
    got = _impl(backend)(**on_gpu)
    assert all(torch.equal(_bits(t), b) for t, b in zip(tensors, before)), "an input changed"
    expected = reference(**on_gpu)
    assert_fresh(got, *tensors)
    assert (got.shape, got.dtype) == (expected.shape, expected.dtype)
    error = moe_quant.relative_error(got, expected)
    assert error < tolerance, error


SHAPES = [(128, 2048, 768, 8), (8, 512, 256, 2)]
TOKENS = [1, 33, 512]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "E{}-H{}-I{}-k{}".format(*s))
def test_fp8_block(backend, shape, tokens):
    experts, hidden, inter, top_k = shape
    x, w1, w2, weights, ids = _problem(experts, hidden, inter, tokens, top_k)
    q1, q2 = moe_quant.fp8_blocks(w1), moe_quant.fp8_blocks(w2)
    arguments = dict(
        hidden_states=x, w1=q1.weight, w2=q2.weight, topk_weights=weights, topk_ids=ids,
        quant_type="fp8_w8a8", w1_scale=q1.scale, w2_scale=q2.scale, block_n=128, block_k=128,
    )  # fmt: skip
    _check(backend, arguments, FP8_BLOCK_TOLERANCE[backend])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("per_act_token", [False, True], ids=["tensor-act", "token-act"])
def test_fp8_expert_scales(backend, per_act_token, tokens):
    x, w1, w2, weights, ids = _problem(8, 512, 256, tokens, 2, seed=1)
    q1, q2 = moe_quant.fp8_experts(w1), moe_quant.fp8_experts(w2)
    arguments = dict(
        hidden_states=x, w1=q1.weight, w2=q2.weight, topk_weights=weights, topk_ids=ids,
        quant_type="fp8_w8a8", w1_scale=q1.scale, w2_scale=q2.scale, per_act_token=per_act_token,
    )  # fmt: skip
    _check(backend, arguments, W8A8_TOLERANCE)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tokens", TOKENS)
def test_int8_channels_with_token_activations(backend, tokens):
    x, w1, w2, weights, ids = _problem(8, 512, 256, tokens, 2, seed=2)
    q1, q2 = moe_quant.int8_channels(w1), moe_quant.int8_channels(w2)
    arguments = dict(
        hidden_states=x, w1=q1.weight, w2=q2.weight, topk_weights=weights, topk_ids=ids,
        quant_type="int8_w8a8", w1_scale=q1.scale, w2_scale=q2.scale, per_act_token=True,
    )  # fmt: skip
    _check(backend, arguments, W8A8_TOLERANCE)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tokens", TOKENS)
def test_int8_weight_only_channels(backend, tokens):
    x, w1, w2, weights, ids = _problem(8, 512, 256, tokens, 2, seed=3)
    q1, q2 = moe_quant.int8_channels(w1), moe_quant.int8_channels(w2)
    arguments = dict(
        hidden_states=x, w1=q1.weight, w2=q2.weight, topk_weights=weights, topk_ids=ids,
        quant_type="int8_w8a16", w1_scale=q1.scale, w2_scale=q2.scale,
    )  # fmt: skip
    _check(backend, arguments, WEIGHT_ONLY_TOLERANCE)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tokens", [1, 64, 512])
@pytest.mark.parametrize("zero_points", [False, True], ids=["sym", "zp"])
@pytest.mark.parametrize("quant_type, bits", [("int4_w4a16", 4), ("int8_w8a16", 8)])
def test_weight_only_groups(backend, quant_type, bits, zero_points, tokens):
    """Group size 128 (vLLM's WNA16 layout); 1 token over 16 experts takes vLLM's CUDA WNA16
    kernel in the cuda impl, more tokens its Triton kernel."""
    x, w1, w2, weights, ids = _problem(16, 1024, 512, tokens, 2, seed=4)
    q1 = moe_quant.groups(w1, 128, bits, zero_points)
    q2 = moe_quant.groups(w2, 128, bits, zero_points)
    arguments = dict(
        hidden_states=x, w1=q1.weight, w2=q2.weight, topk_weights=weights, topk_ids=ids,
        quant_type=quant_type, w1_scale=q1.scale, w2_scale=q2.scale, w1_zp=q1.zero_point,
        w2_zp=q2.zero_point, block_k=128,
    )  # fmt: skip
    _check(backend, arguments, WEIGHT_ONLY_TOLERANCE)
