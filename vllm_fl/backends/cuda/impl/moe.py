"""CUDA vendor mixture-of-experts kernels: vLLM's own.

The routing and alignment functions are the ones of ``vllm._custom_ops`` as vLLM shipped them
(``vllm_fl.functions.original``: the plugin routes vLLM's calls of those names through the
dispatch, so calling the module attribute here would come back to the dispatch). Arguments a
vLLM release does not know (``is_padding`` before 0.32, ...) are passed only when set.
fused_experts is vLLM's Triton ``fused_experts``.
"""

import torch

from vllm_fl.functions import original


def _given(**kwargs: object) -> dict[str, object]:
    return {name: value for name, value in kwargs.items() if value is not None}


def topk_softmax(
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    token_expert_indices: torch.Tensor,
    gating_output: torch.Tensor,
    renormalize: bool = False,
    e_score_correction_bias: torch.Tensor | None = None,
    is_padding: torch.Tensor | None = None,
) -> None:
    """``_moe_C.topk_softmax`` through vLLM's wrapper."""
    original("topk_softmax")(
        topk_weights,
        topk_ids,
        token_expert_indices,
        gating_output,
        renormalize,
        **_given(e_score_correction_bias=e_score_correction_bias, is_padding=is_padding),
    )


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
    """``_moe_C.moe_align_block_size`` through vLLM's wrapper."""
    original("moe_align_block_size")(
        topk_ids,
        num_experts,
        block_size,
        sorted_token_ids,
        experts_ids,
        num_tokens_post_pad,
        **_given(expert_map=expert_map, scatter_idx=scatter_idx),
    )


def moe_sum(
    input: torch.Tensor,
    output: torch.Tensor,
    topk_ids: torch.Tensor | None = None,
    expert_map: torch.Tensor | None = None,
) -> None:
    """``_moe_C.moe_sum`` through vLLM's wrapper."""
    original("moe_sum")(input, output, **_given(topk_ids=topk_ids, expert_map=expert_map))


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
    w1_bias: torch.Tensor | None = None,
    w2_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """vLLM's Triton ``fused_experts`` (unquantized, no biases)."""
    if w1_bias is not None or w2_bias is not None:
        raise NotImplementedError("cuda fused_experts: expert biases")
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts as vllm_fused_experts

    return vllm_fused_experts(
        hidden_states,
        w1,
        w2,
        topk_weights,
        topk_ids,
        activation=MoEActivation(activation),
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
    """``_moe_C.grouped_topk`` through vLLM's wrapper."""
    return original("grouped_topk")(
        scores,
        num_expert_group,
        topk_group,
        topk,
        renormalize,
        routed_scaling_factor,
        bias,
        scoring_func,
    )
