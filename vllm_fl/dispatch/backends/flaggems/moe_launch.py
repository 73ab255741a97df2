"""Launches of FlagGems' MoE kernels through the backend's launch plans (``launch.py``).

``flag_gems.fused``'s MoE functions allocate, derive launch parameters and launch one to four
Triton kernels per call; these helpers launch the same kernels with the same parameters, keyed
by the input layout, so that only the first call per layout pays FlagGems' Python. Where a
FlagGems release lacks a kernel this module knows, the helpers return None and the impls call
FlagGems' functions.
"""

import functools

import torch

from vllm_fl.dispatch.backends.flaggems import launch
from vllm_fl.dispatch.backends.flaggems.memo import TensorMemo


_ALIGN_STAGES = ("stage1", "stage2_vec", "stage2", "stage3", "stage4")


@functools.cache
def align_stages() -> dict[str, launch.KernelPlans] | None:
    """FlagGems' four-stage Triton moe_align_block_size kernels, where FlagGems runs them (its
    TLE variants, on FlagTree builds, go through FlagGems' own function)."""
    import sys

    import flag_gems.fused  # noqa: F401  (loads the module that defines the stages)

    function = getattr(flag_gems.fused, "moe_align_block_size_triton", None)
    module = sys.modules.get(getattr(function, "__module__", None) or "")
    if module is None or getattr(module, "HAS_TLE", True):
        return None
    kernels = {
        name: getattr(module, f"moe_align_block_size_{name}", None) for name in _ALIGN_STAGES
    }
    if any(kernel is None for kernel in kernels.values()):
        return None
    return {name: launch.KernelPlans(kernel) for name, kernel in kernels.items()}


def pow2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


def align_in_stages(
    stages, topk_ids, num_experts, block_size, sorted_ids, expert_ids, num_tokens_post_pad
) -> None:
    """The launches of FlagGems' ``moe_align_block_size_triton`` (its Triton path), with one
    zeroed scratch buffer for its two counters."""
    numel = topk_ids.numel()
    n_sorted, n_experts_ids = sorted_ids.numel(), expert_ids.numel()
    tokens_per_thread = pow2(-(-numel // num_experts))
    counts = (num_experts + 1) * num_experts
    offset = -(-counts // 4) * 4  # cumsum starts 16-byte aligned, as its own allocation would
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
            pow2(-(-n_sorted // num_experts)),
            pow2(-(-n_experts_ids // num_experts)),
        ),
        {},
    )
    stage2 = stages["stage2_vec" if num_experts == pow2(num_experts) else "stage2"]
    stage2.launch(layout, grid, (tokens_cnts, num_experts), {})
    stages["stage3"].launch(
        layout,
        (1,),
        (num_tokens_post_pad, tokens_cnts, cumsum, num_experts, pow2(num_experts), block_size),
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


TL_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
_biases = TensorMemo()  # the correction bias in the scores' dtype, flattened


@functools.cache
def grouped_topk_kernels() -> tuple | None:
    """FlagGems' two grouped-topk kernels, and its sigmoid for ``scoring_func=1``."""
    group_max = launch.kernel_of("grouped_topk", "topk_with_k2_triton")
    select = launch.kernel_of("grouped_topk", "group_idx_and_topk_triton")
    sigmoid = launch.kernel_of("sigmoid", "sigmoid_forward")
    if group_max is None or select is None or sigmoid is None:
        return None
    return launch.KernelPlans(group_max), launch.KernelPlans(select), launch.PointwisePlans(sigmoid)


def grouped_topk_launch(
    kernels,
    scores: torch.Tensor,
    n_group: int,
    topk_group: int,
    topk: int,
    renormalize: bool,
    routed_scaling_factor: float,
    bias: torch.Tensor,
    scoring_func: int,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The launches of ``flag_gems.grouped_topk``, or None for a misaligned operand (the caller
    then runs FlagGems' function); the sigmoid scores (``scoring_func=1``) in one FlagGems
    sigmoid kernel, which FlagGems computes as 0.5 * tanh(x / 2) + 0.5 in four."""
    import triton.language as tl

    group_max, select, sigmoid = kernels
    tokens, experts = scores.shape
    if bias.dtype != scores.dtype or bias.dim() != 1:
        bias = _biases.get(bias, scores.dtype, lambda: bias.to(scores.dtype).flatten())
    processed = sigmoid(scores) if scoring_func == 1 else scores
    per_group = experts // n_group
    device = scores.device
    group_scores = torch.empty((tokens, n_group), device=device, dtype=scores.dtype)
    values = torch.empty((tokens, topk), device=device, dtype=torch.float32)
    indices = torch.empty((tokens, topk), device=device, dtype=torch.int32)
    if tokens == 0:
        return values, indices
    input_dtype = getattr(tl, TL_DTYPES[scores.dtype])
    layout = (
        scores.dtype,
        tokens == 1,
        tokens % 16 == 0,
        processed.stride(0),
        experts,
        n_group,
        topk_group,
        topk,
        bool(renormalize),
        float(routed_scaling_factor),
        device.index,
    )
    if not launch.aligned(processed, bias, group_scores, values, indices):
        return None  # the caller runs FlagGems' own function
    group_max.launch(
        layout,
        (tokens * n_group,),
        (processed, bias, group_scores, per_group, n_group, processed.stride(0), n_group),
        {"BLOCK_SIZE": pow2(per_group), "INPUT_DTYPE": input_dtype},
    )
    select.launch(
        layout,
        (tokens,),
        (
            processed,
            group_scores,
            values,
            indices,
            bias,
            tokens,
            n_group,
            topk_group,
            topk,
            experts,
            per_group,
            routed_scaling_factor,
            processed.stride(0),
            n_group,
            topk,
        ),
        {
            "N_GROUP": n_group,
            "TOPK_GROUP": topk_group,
            "TOPK": topk,
            "BLOCK_GROUP": pow2(n_group),
            "BLOCK_EXPERT": pow2(experts),
            "INPUT_DTYPE": input_dtype,
            "renormalize": int(renormalize),
        },
    )
    return values, indices
