"""The MoE references agree with vLLM's own CPU routing (``fused_moe/router/cpu_router.py``, the
plain-torch routing of vLLM's CPU MoE experts, in vLLM's CPU build).

vLLM's CUDA kernels are checked against the same references by the generated parity tests on a
GPU; here the references meet vLLM's CPU code. Routing order is open (``topk(sorted=False)``), so
each token's experts are compared sorted by expert index.
"""

import pytest
import torch

from vllm_fl.backends.reference.impl import moe

cpu_router = pytest.importorskip("vllm.model_executor.layers.fused_moe.router.cpu_router")


def _by_expert(weights, ids):
    order = ids.to(torch.int64).argsort(dim=-1)
    return weights.gather(-1, order), ids.to(torch.int64).gather(-1, order)


@pytest.mark.parametrize("renormalize", [False, True])
@pytest.mark.parametrize("tokens, experts, k", [(1, 8, 2), (64, 128, 8)])
def test_topk_softmax_matches_vllm_cpu_router(tokens, experts, k, renormalize):
    logits = torch.randn(tokens, experts, generator=torch.Generator().manual_seed(tokens))
    weights = torch.empty(tokens, k)
    ids = torch.empty(tokens, k, dtype=torch.int32)
    token_expert = torch.empty(tokens, k, dtype=torch.int32)
    moe.topk_softmax(weights, ids, token_expert, logits, renormalize)
    vllm_weights, vllm_ids = cpu_router._softmax_topk(logits, k, renormalize)
    ours, theirs = _by_expert(weights, ids), _by_expert(vllm_weights, vllm_ids)
    assert torch.equal(ours[1], theirs[1])
    torch.testing.assert_close(ours[0], theirs[0], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("renormalize, scale", [(True, 2.5), (False, 1.0)])
def test_grouped_topk_matches_vllm_cpu_router(renormalize, scale):
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(33, 256, generator=gen)
    bias = torch.randn(256, generator=gen) * 0.1
    weights, ids = moe.grouped_topk(logits, 8, 4, 8, renormalize, scale, bias, scoring_func=1)
    vllm_weights, vllm_ids = cpu_router._grouped_topk(
        logits, 8, renormalize, 8, 4, "sigmoid", scale, bias
    )
    ours, theirs = _by_expert(weights, ids), _by_expert(vllm_weights, vllm_ids)
    assert torch.equal(ours[1], theirs[1])
    torch.testing.assert_close(ours[0], theirs[0], atol=1e-6, rtol=1e-5)
