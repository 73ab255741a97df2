"""The reference ``fused_experts`` on every MoE activation vLLM passes, with expert biases,
against a token-by-token formula written here (GPT-OSS's SwiGLU as its Hugging Face model card
states it: interleaved gate/up, alpha 1.702, limit 7.0) and against vLLM's own activation layers.

The reference accumulates the k experts in float32, hence float32's tolerance on float64 inputs.
"""

from __future__ import annotations

import math

import pytest
import torch

from vllm_fl.backends.reference.impl import moe

E, H, I, T, K = 4, 8, 6, 5, 2


def _swigluoai_scalar(gate: float, up: float) -> float:
    gate = min(gate, 7.0)
    up = max(min(up, 7.0), -7.0)
    return (up + 1.0) * gate / (1.0 + math.exp(-1.702 * gate))


def _case(gated: bool = True, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    rows = 2 * I if gated else I
    x = torch.randn(T, H, generator=g, dtype=torch.float64)
    w1 = 4 * torch.randn(E, rows, H, generator=g, dtype=torch.float64)  # values past the limit
    w2 = torch.randn(E, H, I, generator=g, dtype=torch.float64)
    b1 = torch.randn(E, rows, generator=g, dtype=torch.float64)
    b2 = torch.randn(E, H, generator=g, dtype=torch.float64)
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).to(torch.int32)
    weights = torch.rand(T, K, generator=g, dtype=torch.float64).to(torch.float32)
    return x, w1, w2, weights, ids, b1, b2


def test_swigluoai_with_biases_matches_the_formula_token_by_token():
    x, w1, w2, weights, ids, b1, b2 = _case()
    out = moe.fused_experts(x, w1, w2, weights, ids, "swigluoai", w1_bias=b1, w2_bias=b2)
    expected = torch.zeros(T, H, dtype=torch.float64)
    past_limit = 0
    for t in range(T):
        for slot in range(K):
            e = int(ids[t, slot])
            gate_up = (w1[e] @ x[t] + b1[e]).tolist()
            past_limit += sum(abs(v) > 7.0 for v in gate_up)
            inter = torch.tensor(
                [_swigluoai_scalar(gate_up[2 * j], gate_up[2 * j + 1]) for j in range(I)],
                dtype=torch.float64,
            )
            expected[t] += float(weights[t, slot]) * (w2[e] @ inter + b2[e])
    assert past_limit > 0  # the clamps are exercised
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4)


def test_biases_are_added_to_each_expert_s_two_products():
    x, w1, w2, weights, ids, b1, b2 = _case(seed=1)
    plain = moe.fused_experts(x, w1, w2, weights, ids, "silu")
    biased = moe.fused_experts(x, w1, w2, weights, ids, "silu", w1_bias=b1 * 0, w2_bias=b2)
    shift = torch.zeros(T, H, dtype=torch.float64)
    for t in range(T):
        for slot in range(K):
            shift[t] += float(weights[t, slot]) * b2[int(ids[t, slot])]
    torch.testing.assert_close(biased, plain + shift, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "activation, layer",
    [
        ("silu", "SiluAndMul"),
        ("gelu", "GeluAndMul"),
        ("gelu_tanh", "GeluAndMul"),
        ("swigluoai", "SwigluOAIAndMul"),
        ("swiglustep", "SwigluStepAndMul"),
    ],
)
def test_gated_activations_are_vllm_s_layers(activation, layer):
    """vLLM's MoE kernels apply these layers' computation (forward_native) to w1's output."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers import activation as vllm_act

    with set_current_vllm_config(VllmConfig()):
        kwargs = {"approximate": "tanh"} if activation == "gelu_tanh" else {}
        module = getattr(vllm_act, layer)(**kwargs)
    h = 4 * torch.randn(7, 2 * I, dtype=torch.float64)
    torch.testing.assert_close(moe.ACTIVATIONS[activation](h), module.forward_native(h))


def test_every_moe_activation_vllm_applies_without_layer_parameters_is_served():
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    # these two need the layer's clamp limit or betas, which the op does not take
    # (by value: vLLM 0.24 has no SITU)
    needs_parameters = {"swigluoai_uninterleave", "situ"}
    # RELU2 (gated) is not an activation vLLM's MoE kernels apply (apply_moe_activation raises)
    not_applied = {"relu2"}
    expected = {a.value for a in MoEActivation} - needs_parameters - not_applied
    assert expected <= set(moe.ACTIVATIONS)


@pytest.mark.parametrize("activation", ["silu_no_mul", "gelu_no_mul", "relu2_no_mul"])
def test_no_mul_activations_act_on_w1_s_whole_output(activation):
    x, w1, w2, weights, ids, _, _ = _case(gated=False, seed=2)
    act = {
        "silu_no_mul": torch.nn.functional.silu,
        "gelu_no_mul": torch.nn.functional.gelu,
        "relu2_no_mul": lambda v: torch.relu(v) ** 2,
    }[activation]
    out = moe.fused_experts(x, w1, w2, weights, ids, activation)
    expected = torch.zeros(T, H, dtype=torch.float64)
    for t in range(T):
        for slot in range(K):
            e = int(ids[t, slot])
            expected[t] += float(weights[t, slot]) * (w2[e] @ act(w1[e] @ x[t]))
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4)


def test_an_activation_it_cannot_compute_is_refused_by_name():
    x, w1, w2, weights, ids, _, _ = _case()
    with pytest.raises(NotImplementedError, match="situ"):
        moe.fused_experts(x, w1, w2, weights, ids, "situ")
