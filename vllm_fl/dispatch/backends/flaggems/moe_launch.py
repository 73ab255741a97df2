"""Launches of FlagGems' MoE kernels through the backend's launch plans (``launch.py``).

``flag_gems.fused``'s ``moe_align_block_size_triton`` allocates, derives launch parameters and
launches four Triton kernels per call; these helpers launch the same kernels with the same
parameters, keyed by the input layout, so that only the first call per layout pays FlagGems'
Python. Where a FlagGems release lacks a kernel this module knows, ``align_stages`` is None and
the impl calls FlagGems' function.
"""

import functools

import torch

from vllm_fl.dispatch.backends.flaggems import launch


_ALIGN_STAGES = ("stage1", "stage2_vec", "stage2", "stage3", "stage4")


@functools.cache
def align_stages() -> dict[str, launch.KernelPlans] | None:
    """FlagGems' four-stage Triton moe_align_block_size kernels, where FlagGems runs them (its
    TLE variants, on FlagTree builds, go through FlagGems' own function)."""
    module = launch.defining_module("fused.moe_align_block_size_triton")
    if module is None or getattr(module, "HAS_TLE", True):
        return None
    kernels = {
        name: getattr(module, f"moe_align_block_size_{name}", None) for name in _ALIGN_STAGES
    }
    if any(kernel is None for kernel in kernels.values()):
        return None
    return {name: launch.KernelPlans(kernel) for name, kernel in kernels.items()}


def align_in_stages(
    stages, topk_ids, num_experts, block_size, sorted_ids, expert_ids, num_tokens_post_pad
) -> None:
    """The launches of FlagGems' ``moe_align_block_size_triton`` (its Triton path), with one
    zeroed scratch buffer for its two counters."""
    numel = topk_ids.numel()
    n_sorted, n_experts_ids = sorted_ids.numel(), expert_ids.numel()
    tokens_per_thread = launch.next_pow2(launch.cdiv(numel, num_experts))
    counts = (num_experts + 1) * num_experts
    offset = (
        launch.cdiv(counts, 4) * 4
    )  # cumsum starts 16-byte aligned, as its own allocation would
    scratch = torch.zeros(offset + num_experts + 1, dtype=torch.int32, device=topk_ids.device)
    tokens_cnts = scratch[:counts].view(num_experts + 1, num_experts)
    cumsum = scratch[offset:]
    grid = (num_experts,)
    layout = (
        topk_ids.dtype,
        numel,
        num_experts,
        block_size,
        n_sorted,
        n_experts_ids,
        topk_ids.device.index,
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
            launch.next_pow2(launch.cdiv(n_sorted, num_experts)),
            launch.next_pow2(launch.cdiv(n_experts_ids, num_experts)),
        ),
        {},
    )
    stage2 = stages["stage2_vec" if num_experts == launch.next_pow2(num_experts) else "stage2"]
    stage2.launch(layout, grid, (tokens_cnts, num_experts), {})
    stages["stage3"].launch(
        layout,
        (1,),
        (
            num_tokens_post_pad,
            tokens_cnts,
            cumsum,
            num_experts,
            launch.next_pow2(num_experts),
            block_size,
        ),
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
