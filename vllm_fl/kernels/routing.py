"""MoE routing: grouped top-k, top-k softmax and block alignment of the (token, slot) pairs.

``grouped_topk``, and ``moe_align_block_size`` for up to ``routing_kernels.ALIGN_MAX_PAIRS``
pairs (a decode step), run this library's one-launch kernels (``routing_kernels``; FlagGems
takes three and five launches). Larger alignments launch FlagGems' staged kernels, and
``topk_softmax`` FlagGems' kernel, through launch plans (``moe.launch``). Calls these kernels do
not take go to FlagGems' functions. Outputs follow vLLM's kernels: out-parameters for the
alignment and top-k softmax, float32 weights and int32 ids for grouped top-k.
"""

from __future__ import annotations

import functools
from types import ModuleType

import torch

from vllm_fl.kernels import launch
from vllm_fl.kernels.moe import launch as moe_launch


@functools.cache
def _own() -> ModuleType:
    """``routing_kernels``, imported on first use: its kernels need Triton."""
    from vllm_fl.kernels import routing_kernels

    return routing_kernels


def align_max_pairs() -> int:
    """The most pairs the one-program alignment takes (``routing_kernels.ALIGN_MAX_PAIRS``)."""
    return _own().ALIGN_MAX_PAIRS


def topk_softmax(
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    token_expert_indices: torch.Tensor,
    gating_output: torch.Tensor,
    renormalize: bool,
) -> None:
    """``flag_gems.topk_softmax`` into the given buffers: its kernel through a launch plan on
    the current GPU (``moe.launch.topk_softmax_in_plan``), its function otherwise."""
    if launch.on_current_gpu(gating_output) and moe_launch.topk_softmax_in_plan(
        topk_weights, topk_ids, token_expert_indices, gating_output, renormalize
    ):
        return
    import flag_gems

    flag_gems.topk_softmax(topk_weights, topk_ids, token_expert_indices, gating_output, renormalize)


def moe_align_block_size(
    topk_ids: torch.Tensor,
    num_experts: int,
    block_size: int,
    sorted_token_ids: torch.Tensor,
    experts_ids: torch.Tensor,
    num_tokens_post_pad: torch.Tensor,
) -> None:
    """The one-program alignment for a decode step's pairs, FlagGems'
    ``moe_align_block_size_triton`` kernels for more; into the caller's buffers."""
    outputs = (sorted_token_ids, experts_ids, num_tokens_post_pad)
    if topk_ids.numel() and launch.on_current_gpu(topk_ids) and launch.aligned(topk_ids, *outputs):
        own = _own()
        planned = own.align_launch(topk_ids, num_experts, block_size, *outputs)
        if planned is not None:
            launch.plans_for(own.align_pairs_kernel).run(planned)
            return
        stages = moe_launch.align_stages()
        if stages is not None:
            moe_launch.align_in_stages(stages, topk_ids, num_experts, block_size, *outputs)
            return
    from flag_gems.fused import moe_align_block_size_triton

    moe_align_block_size_triton(topk_ids, num_experts, block_size, *outputs)


def grouped_topk(
    scores: torch.Tensor,
    num_expert_group: int,
    topk_group: int,
    topk: int,
    renormalize: bool,
    routed_scaling_factor: float,
    bias: torch.Tensor,
    scoring_func: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The one-launch grouped top-k kernel (the contract of vLLM's fused kernel); calls it does
    not take go to ``flag_gems.grouped_topk``, whose Triton kernel needs a power-of-two topk
    (FlagGems 5.0.2 fails to compile topk=6): NotImplementedError for any other there."""
    args = (
        scores,
        num_expert_group,
        topk_group,
        topk,
        renormalize,
        routed_scaling_factor,
        bias,
        scoring_func,
    )
    if scores.dim() == 2 and launch.on_current_gpu(scores):
        tokens = scores.shape[0]
        weights = torch.empty((tokens, topk), dtype=torch.float32, device=scores.device)
        ids = torch.empty((tokens, topk), dtype=torch.int32, device=scores.device)
        if tokens == 0:
            return weights, ids
        own = _own()
        planned = own.grouped_topk_launch(*args, weights, ids)
        if planned is not None and launch.aligned(scores, bias, weights, ids):
            launch.plans_for(own.grouped_topk_kernel).run(planned)
            return weights, ids
    if topk & (topk - 1):
        raise NotImplementedError(f"flag_gems grouped_topk: topk={topk} is not a power of two")
    from flag_gems.fused import grouped_topk as gems_grouped_topk

    return gems_grouped_topk(*args)
