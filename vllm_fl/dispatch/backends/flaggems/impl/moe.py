"""FlagGems mixture-of-experts kernels (``flag_gems.fused``).

FlagGems' kernels cover the common case; arguments they have no parameter for (a correction
bias, a padding mask, an expert map, a scatter index, activations other than silu) raise
NotImplementedError, and the dispatch falls back to the next implementation.
"""

import functools

import torch

from vllm_fl.dispatch.backends.flaggems import launch


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
    stages = _align_stages()
    numel = topk_ids.numel()
    if stages is None or numel == 0 or topk_ids.device.index != torch.cuda.current_device():
        from flag_gems.fused import moe_align_block_size_triton

        moe_align_block_size_triton(
            topk_ids, num_experts, block_size, sorted_token_ids, experts_ids, num_tokens_post_pad
        )
        return
    _align_in_stages(
        stages,
        topk_ids,
        num_experts,
        block_size,
        sorted_token_ids,
        experts_ids,
        num_tokens_post_pad,
    )


_ALIGN_STAGES = ("stage1", "stage2_vec", "stage2", "stage3", "stage4")


@functools.cache
def _align_stages() -> dict[str, launch.KernelPlans] | None:
    """FlagGems' four-stage Triton moe_align_block_size kernels, where FlagGems runs them (its
    TLE variants, on FlagTree builds, go through FlagGems' own function)."""
    import sys

    import flag_gems.fused  # noqa: F401  (loads the module that defines the stages)

    function = getattr(flag_gems.fused, "moe_align_block_size_triton", None)
    module = sys.modules.get(getattr(function, "__module__", None) or "")
    if module is None or getattr(module, "HAS_TLE", True):
        return None
    kernels = {name: getattr(module, f"moe_align_block_size_{name}", None) for name in _ALIGN_STAGES}
    if any(kernel is None for kernel in kernels.values()):
        return None
    return {name: launch.KernelPlans(kernel) for name, kernel in kernels.items()}


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


def _align_in_stages(
    stages, topk_ids, num_experts, block_size, sorted_ids, expert_ids, num_tokens_post_pad
) -> None:
    """The launches of FlagGems' ``moe_align_block_size_triton`` (its Triton path), with one
    zeroed scratch buffer for its two counters."""
    numel = topk_ids.numel()
    n_sorted, n_experts_ids = sorted_ids.numel(), expert_ids.numel()
    tokens_per_thread = _pow2(-(-numel // num_experts))
    scratch = torch.zeros(
        (num_experts + 1) * (num_experts + 1), dtype=torch.int32, device=topk_ids.device
    )
    tokens_cnts = scratch[: (num_experts + 1) * num_experts].view(num_experts + 1, num_experts)
    cumsum = scratch[(num_experts + 1) * num_experts :]
    grid = (num_experts,)
    layout = (
        topk_ids.dtype,
        numel,
        num_experts,
        block_size,
        n_sorted,
        n_experts_ids,
        topk_ids.device.index,
        launch.aligned(topk_ids),
        launch.aligned(sorted_ids),
        launch.aligned(expert_ids),
        launch.aligned(num_tokens_post_pad),
        launch.aligned(cumsum),
    )
    stages["stage1"].launch(
        layout,
        grid,
        (
            topk_ids,
            tokens_cnts,
            num_experts,
            numel,
            tokens_per_thread,
            sorted_ids,
            expert_ids,
            n_sorted,
            n_experts_ids,
            _pow2(-(-n_sorted // num_experts)),
            _pow2(-(-n_experts_ids // num_experts)),
        ),
        {},
    )
    stage2 = stages["stage2_vec" if num_experts == _pow2(num_experts) else "stage2"]
    stage2.launch(layout, grid, (tokens_cnts, num_experts), {})
    stages["stage3"].launch(
        layout,
        (1,),
        (num_tokens_post_pad, tokens_cnts, cumsum, num_experts, _pow2(num_experts), block_size),
        {},
    )
    stages["stage4"].launch(
        layout,
        grid,
        (
            topk_ids,
            sorted_ids,
            expert_ids,
            tokens_cnts,
            cumsum,
            num_experts,
            block_size,
            numel,
            tokens_per_thread,
        ),
        {},
    )


@functools.cache
def _moe_sum_plans() -> launch.KernelPlans | None:
    kernel = launch.kernel_of("moe_sum", "moe_sum_kernel")
    return None if kernel is None else launch.KernelPlans(kernel)


def moe_sum(
    input: torch.Tensor,
    output: torch.Tensor,
    topk_ids: torch.Tensor | None = None,
    expert_map: torch.Tensor | None = None,
) -> None:
    """FlagGems' ``moe_sum`` kernel: output[t] = sum over k of input[t, k]."""
    _unsupported("moe_sum", expert_map=expert_map)
    plans = _moe_sum_plans()
    if plans is None or input.device.index != torch.cuda.current_device():
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
        launch.aligned(input),
        launch.aligned(output),
    )
    args = (input, output, tokens, topk, hidden, *input.stride(), *output.stride())
    plans.launch(layout, lambda meta: (tokens, -(-hidden // meta["BLOCK_SIZE"])), args, {})


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
