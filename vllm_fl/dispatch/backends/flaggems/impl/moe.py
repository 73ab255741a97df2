"""FlagGems mixture-of-experts kernels (``flag_gems.fused``).

FlagGems' kernels cover the common case; arguments they have no parameter for (a correction
bias, a padding mask, an expert map, a scatter index, activations other than silu) raise
NotImplementedError, and the dispatch falls back to the next implementation.
"""

import torch


def _unsupported(op: str, **given: object) -> None:
    names = [name for name, value in given.items() if value is not None]
    if names:
        raise NotImplementedError(f"flag_gems {op} has no parameter for {', '.join(names)}")


def topk_softmax(
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    token_expert_indices: torch.Tensor,
    gating_output: torch.Tensor,
    renormalize: bool = False,
    e_score_correction_bias: torch.Tensor | None = None,
    is_padding: torch.Tensor | None = None,
) -> None:
    """``flag_gems.topk_softmax`` (same out-parameter convention as vLLM's kernel)."""
    _unsupported(
        "topk_softmax", e_score_correction_bias=e_score_correction_bias, is_padding=is_padding
    )
    import flag_gems

    flag_gems.topk_softmax(topk_weights, topk_ids, token_expert_indices, gating_output, renormalize)


def moe_align_block_size(
    topk_ids: torch.Tensor,
    num_experts: int,
    block_size: int,
    sorted_token_ids: torch.Tensor,
    experts_ids: torch.Tensor,
    num_tokens_post_pad: torch.Tensor,
    expert_map: torch.Tensor | None = None,
    scatter_idx: torch.Tensor | None = None,
) -> None:
    """``flag_gems.moe_align_block_size_triton`` into the caller's buffers."""
    _unsupported("moe_align_block_size", expert_map=expert_map, scatter_idx=scatter_idx)
    from flag_gems.fused import moe_align_block_size_triton

    moe_align_block_size_triton(
        topk_ids, num_experts, block_size, sorted_token_ids, experts_ids, num_tokens_post_pad
    )


def moe_sum(
    input: torch.Tensor,
    output: torch.Tensor,
    topk_ids: torch.Tensor | None = None,
    expert_map: torch.Tensor | None = None,
) -> None:
    """``flag_gems.moe_sum(input, output)``."""
    _unsupported("moe_sum", expert_map=expert_map)
    from flag_gems.fused import moe_sum as gems_moe_sum

    gems_moe_sum(input, output)


def fused_experts(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: str = "silu",
    apply_router_weight_on_input: bool = False,
    global_num_experts: int = -1,
    expert_map: torch.Tensor | None = None,
) -> torch.Tensor:
    """``flag_gems.fused_experts_impl``: FlagGems' Triton grouped GEMMs, its own alignment and sum."""
    if activation != "silu":
        raise NotImplementedError(f"flag_gems fused_experts: activation {activation!r}")
    from flag_gems.fused import fused_experts_impl

    return fused_experts_impl(
        hidden_states,
        w1,
        w2,
        topk_weights,
        topk_ids,
        inplace=False,
        activation=activation,
        apply_router_weight_on_input=apply_router_weight_on_input,
        global_num_experts=global_num_experts,
        expert_map=expert_map,
    )


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
    """``flag_gems.grouped_topk`` (the contract of vLLM's fused kernel). Its Triton kernel needs a
    power-of-two topk (FlagGems 5.0.2 fails to compile topk=6, seen on the H100)."""
    if topk & (topk - 1):
        raise NotImplementedError(f"flag_gems grouped_topk: topk={topk} is not a power of two")
    from flag_gems.fused import grouped_topk as gems_grouped_topk

    return gems_grouped_topk(
        scores,
        num_expert_group,
        topk_group,
        topk,
        renormalize,
        routed_scaling_factor,
        bias,
        scoring_func,
    )
