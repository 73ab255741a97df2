"""FlagGems mixture-of-experts kernels (``flag_gems.fused``).

FlagGems' kernels cover the common case; arguments they have no parameter for (a correction
bias, a padding mask, an expert map, a scatter index, activations other than silu) raise
NotImplementedError, and the dispatch falls back to the next implementation.

grouped_topk, and moe_align_block_size for up to ``routing_kernels.ALIGN_MAX_PAIRS`` pairs (a
decode step), run the backend's one-launch routing kernels (``routing_kernels.py``; FlagGems
takes three and five launches); larger alignments and moe_sum launch FlagGems' kernels through
the backend's launch plans (``moe_launch.py``, ``launch.py``); fused_experts launches FlagGems'
grouped-GEMM kernel through them too (``experts.py``), topk_softmax FlagGems' top-k softmax kernel.
Calls the backend's kernels do not take go to FlagGems' functions.
"""

import torch

from vllm_fl.dispatch.backends.flaggems import experts, launch, moe_launch


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
    """``flag_gems.topk_softmax`` (same out-parameter convention as vLLM's kernel): its kernel
    through a launch plan on the current GPU (``moe_launch.topk_softmax_in_plan``), its function
    otherwise."""
    _unsupported(
        "topk_softmax", e_score_correction_bias=e_score_correction_bias, is_padding=is_padding
    )
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
    expert_map: torch.Tensor | None = None,
    scatter_idx: torch.Tensor | None = None,
) -> None:
    """The backend's one-program alignment for a decode step's pairs, FlagGems'
    ``moe_align_block_size_triton`` kernels for more; into the caller's buffers."""
    _unsupported("moe_align_block_size", expert_map=expert_map, scatter_idx=scatter_idx)
    outputs = (sorted_token_ids, experts_ids, num_tokens_post_pad)
    if topk_ids.numel() and launch.on_current_gpu(topk_ids) and launch.aligned(topk_ids, *outputs):
        planned = launch.own("routing_kernels").align_launch(
            topk_ids, num_experts, block_size, *outputs
        )
        if planned is not None:
            plans = launch.own_plans("routing_kernels", "align_pairs_kernel")
            plans.run(planned)
            return
        stages = moe_launch.align_stages()
        if stages is not None:
            moe_launch.align_in_stages(stages, topk_ids, num_experts, block_size, *outputs)
            return
    from flag_gems.fused import moe_align_block_size_triton

    moe_align_block_size_triton(topk_ids, num_experts, block_size, *outputs)


def moe_sum(
    input: torch.Tensor,
    output: torch.Tensor,
    topk_ids: torch.Tensor | None = None,
    expert_map: torch.Tensor | None = None,
) -> None:
    """FlagGems' ``moe_sum`` kernel: output[t] = sum over k of input[t, k]."""
    _unsupported("moe_sum", expert_map=expert_map)
    plans = launch.plans_of("moe_sum", "moe_sum_kernel")
    if plans is None or not launch.on_current_gpu(input) or not launch.aligned(input, output):
        from flag_gems.fused import moe_sum as gems_moe_sum

        gems_moe_sum(input, output)
        return
    tokens, topk, hidden = input.shape
    if tokens == 0:
        return
    layout = (
        input.dtype,
        output.dtype,
        tokens == 1,
        tokens % 16 == 0,
        topk,
        hidden,
        input.stride(),
        output.stride(),
        input.device.index,
    )
    args = (input, output, tokens, topk, hidden, *input.stride(), *output.stride())
    plans.launch(layout, lambda meta: (tokens, launch.cdiv(hidden, meta["BLOCK_SIZE"])), args, {})


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
    """FlagGems' fused experts: its grouped-GEMM kernel and config, launched through launch
    plans with the backend's alignment, activation and sum (``experts.py``); what that does not
    take (an expert map, quantised or chunked calls), ``flag_gems.fused_experts_impl``."""
    if activation != "silu":
        raise NotImplementedError(f"flag_gems fused_experts: activation {activation!r}")
    if expert_map is None and launch.on_current_gpu(hidden_states):
        kernels = experts.flag_gems_kernels()
        if kernels is not None:
            out = experts.fused_experts(
                kernels,
                hidden_states,
                w1,
                w2,
                topk_weights,
                topk_ids,
                apply_router_weight_on_input,
                global_num_experts,
                align=moe_align_block_size,
                activate=_silu_and_mul,
                reduce=moe_sum,
            )
            if out is not None:
                return out
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


def _silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    from vllm_fl.dispatch.backends.flaggems.impl import activation

    return activation.silu_and_mul(None, gate_up)


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
    """The backend's one-launch grouped top-k kernel (the contract of vLLM's fused kernel);
    calls it does not take go to ``flag_gems.grouped_topk``, whose Triton kernel needs a
    power-of-two topk (FlagGems 5.0.2 fails to compile topk=6, seen on the H100)."""
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
        planned = launch.own("routing_kernels").grouped_topk_launch(*args, weights, ids)
        if planned is not None and launch.aligned(scores, bias, weights, ids):
            plans = launch.own_plans("routing_kernels", "grouped_topk_kernel")
            plans.run(planned)
            return weights, ids
    if topk & (topk - 1):
        raise NotImplementedError(f"flag_gems grouped_topk: topk={topk} is not a power of two")
    from flag_gems.fused import grouped_topk as gems_grouped_topk

    return gems_grouped_topk(*args)
