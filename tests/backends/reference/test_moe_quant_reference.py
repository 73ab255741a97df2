"""The reference ``fused_experts_quant`` reads each format's layout as vLLM's Triton experts do.

Weights are quantised here, independently of the code under test, in the layout of each format
(FP8 / INT8 blocks and channels, INT8 and packed INT4 groups with and without zero points); the
quantized experts must then compute what the unquantized reference ``fused_experts`` computes on
the weights those quantised values stand for. Weight-only formats leave the activations alone, so
that agreement is tight; W8A8 quantises the activations too, so it is within their quantisation
error, and far from what the wrong layout would give.
"""

import pytest
import torch
from tests.support.moe_quant import fp8_blocks, groups, int8_channels, relative_error, routing

from vllm_fl.backends.reference.impl.moe import fused_experts
from vllm_fl.backends.reference.impl.moe_quant import (
    fused_experts_quant,
    fused_experts_quant_round_trip,
)

E, HIDDEN, INTER, TOKENS, TOP_K = 4, 256, 128, 9, 2


def _inputs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(TOKENS, HIDDEN, generator=gen)
    w1 = torch.randn(E, 2 * INTER, HIDDEN, generator=gen) * 0.05
    w2 = torch.randn(E, HIDDEN, INTER, generator=gen) * 0.05
    return (x, w1, w2, *routing(TOKENS, E, TOP_K, gen))


def _fp8_blocks(w):
    q = fp8_blocks(w)
    return q.weight, q.scale, q.dequantised


def _int8_channels(w):
    q = int8_channels(w)
    return q.weight, q.scale, q.dequantised


def _groups(w, group, bits, zero_points):
    q = groups(w, group, bits, zero_points)
    return q.weight, q.scale, q.zero_point, q.dequantised


_relative_error = relative_error


def test_fp8_block_matches_the_dequantised_experts_within_activation_quantisation():
    x, w1, w2, weights, ids = _inputs()
    q1, s1, d1 = _fp8_blocks(w1)
    q2, s2, d2 = _fp8_blocks(w2)
    out = fused_experts_quant(x, q1, q2, weights, ids, "fp8_w8a8", s1, s2, block_n=128, block_k=128)
    expected = fused_experts(x, d1, d2, weights, ids)
    assert out.shape == expected.shape and out.dtype == x.dtype
    assert _relative_error(out, expected) < 0.05


def test_fp8_block_activations_are_quantised_per_token_group():
    """A token whose second group of 128 is 2^20 times its first: only the first group meets
    non-zero weights. Quantised per group it keeps its precision; one scale per token would
    flush the first group below FP8's smallest value, and the output to zero."""
    x, w1, w2, weights, ids = _inputs(1)
    w1[:, :, 128:] = 0
    q1, s1, d1 = _fp8_blocks(w1)
    q2, s2, d2 = _fp8_blocks(w2)
    x[:, 128:] = 2.0**8
    x[:, :128] *= 2.0**-12
    out = fused_experts_quant(x, q1, q2, weights, ids, "fp8_w8a8", s1, s2, block_n=128, block_k=128)
    expected = fused_experts(x, d1, d2, weights, ids)
    assert expected.abs().amax() > 0
    assert _relative_error(out, expected) < 0.05


def test_int8_channels_with_per_token_activations():
    x, w1, w2, weights, ids = _inputs(2)
    q1, s1, d1 = _int8_channels(w1)
    q2, s2, d2 = _int8_channels(w2)
    out = fused_experts_quant(x, q1, q2, weights, ids, "int8_w8a8", s1, s2, per_act_token=True)
    assert _relative_error(out, fused_experts(x, d1, d2, weights, ids)) < 0.02


def test_int8_weight_only_channels_are_exact():
    x, w1, w2, weights, ids = _inputs(3)
    q1, s1, d1 = _int8_channels(w1)
    q2, s2, d2 = _int8_channels(w2)
    out = fused_experts_quant(x, q1, q2, weights, ids, "int8_w8a16", s1[..., None], s2)
    torch.testing.assert_close(out, fused_experts(x, d1, d2, weights, ids), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("zero_points", [False, True])
@pytest.mark.parametrize("quant_type, bits", [("int4_w4a16", 4), ("int8_w8a16", 8)])
def test_weight_only_groups_are_exact(quant_type, bits, zero_points):
    x, w1, w2, weights, ids = _inputs(4)
    q1, s1, z1, d1 = _groups(w1, 64, bits, zero_points)
    q2, s2, z2, d2 = _groups(w2, 64, bits, zero_points)
    out = fused_experts_quant(
        x, q1, q2, weights, ids, quant_type, s1, s2, w1_zp=z1, w2_zp=z2, block_k=64
    )
    torch.testing.assert_close(out, fused_experts(x, d1, d2, weights, ids), atol=1e-5, rtol=1e-5)


def test_expert_map_and_router_weight_on_input():
    x, w1, w2, weights, ids = _inputs(5)
    ids, weights = ids[:, :1], torch.rand(TOKENS, 1)
    q1, s1, d1 = _int8_channels(w1)
    q2, s2, d2 = _int8_channels(w2)
    expert_map = torch.tensor([0, -1, 1, -1], dtype=torch.int32)
    local = (slice(0, 1), slice(2, 3))
    l1, l2, sl1, sl2 = (torch.cat([t[s] for s in local]) for t in (q1, q2, s1, s2))
    out = fused_experts_quant(
        x, l1, l2, weights, ids, "int8_w8a16", sl1, sl2, apply_router_weight_on_input=True,
        global_num_experts=E, expert_map=expert_map,
    )  # fmt: skip
    ld1, ld2 = torch.cat([d1[s] for s in local]), torch.cat([d2[s] for s in local])
    expected = fused_experts(x, ld1, ld2, weights, ids, "silu", True, E, expert_map)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert torch.all(out[(ids[:, 0] % 2 == 1)] == 0)  # tokens of experts on other ranks


def test_round_trip_is_the_unquantized_experts():
    x, w1, w2, weights, ids = _inputs(6)
    q1, s1, d1 = _fp8_blocks(w1)
    q2, s2, d2 = _fp8_blocks(w2)
    arguments = dict(hidden_states=x, topk_weights=weights, topk_ids=ids, w1=q1, w2=q2)
    full = fused_experts_quant_round_trip({"w1": w1, "w2": w2}, arguments)
    torch.testing.assert_close(full, fused_experts(x, w1, w2, weights, ids))
    quantized = fused_experts_quant(x, q1, q2, weights, ids, "fp8_w8a8", s1, s2, 0, None, None,
                                    None, 128, 128)  # fmt: skip
    assert _relative_error(quantized, full) < 0.1


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(quant_type="fp4"), "quant_type is 'fp4'"),
        (dict(w1_scale=torch.ones(E, 3, 2)), "argument 'w1_scale' has shape [4, 3, 2]"),
        (dict(block_n=128, block_k=0), "block shape [128, 0]"),
        (dict(activation="relu"), "activation 'relu'"),
        (
            dict(block_n=0, block_k=0, w1_scale=torch.ones(E), w2_scale=torch.ones(E),
                 a1_scale=torch.ones(E)),
            "argument 'a1_scale' has shape [4], expected [1]",
        ),  # fmt: skip
    ],
)
def test_bad_arguments_are_refused_by_name(change, message):
    x, w1, w2, weights, ids = _inputs(7)
    q1, s1, _ = _fp8_blocks(w1)
    q2, s2, _ = _fp8_blocks(w2)
    arguments = dict(
        hidden_states=x, w1=q1, w2=q2, topk_weights=weights, topk_ids=ids,
        quant_type="fp8_w8a8", w1_scale=s1, w2_scale=s2, block_n=128, block_k=128,
    )  # fmt: skip
    with pytest.raises((ValueError, NotImplementedError)) as info:
        fused_experts_quant(**{**arguments, **change})
    assert message in str(info.value)
