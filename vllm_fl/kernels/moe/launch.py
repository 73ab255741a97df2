"""Launches of FlagGems' MoE kernels through launch plans (``vllm_fl.kernels.launch``).

``flag_gems.fused``'s ``moe_align_block_size_triton`` allocates, derives launch parameters and
launches four Triton kernels per call; these helpers launch the same kernels with the same
parameters, keyed by the input layout, so that only the first call per layout pays FlagGems'
Python; likewise FlagGems' top-k softmax and ``moe_sum``. Where a FlagGems release lacks a
kernel this module knows, ``align_stages`` and ``topk_softmax_plans`` are None and the caller
calls FlagGems' function.
"""

from __future__ import annotations

import functools

import torch

from vllm_fl.kernels import launch


_ALIGN_STAGES = ("stage1", "stage2_vec", "stage2", "stage3", "stage4")
#: the first stage's fill tiles, for lengths of zero (it fills nothing)
_NO_FILL_BLOCK = 16


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


def stage_tokens_per_thread(numel: int, num_experts: int) -> int:
    """The pairs each program of FlagGems' alignment stages 1 and 4 takes (a constexpr of both):
    pairs per expert, rounded up to a power of two."""
    return launch.next_pow2(launch.cdiv(numel, num_experts))


def prepare_buffers(
    pairs: int, sorted_ids: torch.Tensor, expert_ids: torch.Tensor, scratch: torch.Tensor
) -> None:
    """``sorted_ids`` all ``pairs`` (the padding value), ``expert_ids`` and ``scratch`` zero:
    ``routing_kernels.align_prepare_kernel`` in one launch."""
    from vllm_fl.kernels import routing_kernels  # Triton: imported on first use

    planned = routing_kernels.align_prepare_launch(pairs, sorted_ids, expert_ids, scratch)
    launch.plans_for(routing_kernels.align_prepare_kernel).run(planned)


def align_in_stages(
    stages, topk_ids, num_experts, block_size, sorted_ids, expert_ids, num_tokens_post_pad
) -> None:
    """The launches of FlagGems' ``moe_align_block_size_triton`` (its Triton path), with one
    scratch buffer for its two counters.

    FlagGems' first stage also writes the padding of ``sorted_ids`` and zeroes ``expert_ids``,
    taking both lengths as constexprs: every new token count would compile it again, in the
    middle of serving when a step's token count is new. Here
    both buffers and the scratch are filled beforehand in one launch (``prepare_buffers``) and
    the stage is given lengths of zero, so its specialisations depend only on
    ``tokens_per_thread`` (a power of two per pairs / experts) and the layout key holds no
    token count: a few compilations per model, all of them made by the warm-up's calls
    (``experts.warm_up_token_counts``) before serving."""
    numel = topk_ids.numel()
    tokens_per_thread = stage_tokens_per_thread(numel, num_experts)
    counts = (num_experts + 1) * num_experts
    offset = (
        launch.cdiv(counts, 4) * 4
    )  # cumsum starts 16-byte aligned, as its own allocation would
    scratch = torch.empty(offset + num_experts + 1, dtype=torch.int32, device=topk_ids.device)
    prepare_buffers(numel, sorted_ids, expert_ids, scratch)
    tokens_cnts = scratch[:counts].view(num_experts + 1, num_experts)
    cumsum = scratch[offset:]
    grid = (num_experts,)
    # FlagGems declares numel do_not_specialize; its == 1 and % 16 classes stay in the key for
    # a release that does not
    layout = (
        topk_ids.dtype,
        numel == 1,
        numel % 16 == 0,
        tokens_per_thread,
        num_experts,
        block_size,
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
            0,  # sorted_ids: filled by prepare_buffers
            0,  # expert_ids: zeroed by prepare_buffers
            _NO_FILL_BLOCK,
            _NO_FILL_BLOCK,
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


#: ``topk_gating_softmax_kernel``'s parameters (flag_gems/fused/topk_softmax.py), in order
TOPK_SOFTMAX_PARAMS = (
    "input_ptr",
    "finished_ptr",
    "output_ptr",
    "indices_ptr",
    "source_rows_ptr",
    "num_rows",
    "k",
    "num_experts",
    "start_expert",
    "end_expert",
    "renormalize",
    "INDEX_TY",
    "BLOCK_SIZE_ROWS",
    "BLOCK_SIZE_EXPERTS",
)

#: index dtypes of topk_ids FlagGems' function takes, by the name of their Triton type
_TOPK_INDEX_TYPES = {torch.int32: "int32", torch.int64: "int64", torch.uint32: "uint32"}


@functools.cache
def topk_softmax_plans() -> launch.KernelPlans | None:
    """Launch plans of FlagGems' top-k softmax kernel; None where this FlagGems has none with
    the parameters ``topk_softmax_in_plan`` passes."""
    kernel = launch.kernel_of("topk_softmax", "topk_gating_softmax_kernel")
    if kernel is None:
        return None
    plans = launch.KernelPlans(kernel)
    return plans if plans.parameter_names == TOPK_SOFTMAX_PARAMS else None


@functools.cache
def _topk_softmax_options(index_type: str, renormalize: bool, experts: int) -> tuple[int, dict]:
    """(rows per program, constexprs and warps) as ``flag_gems.topk_softmax`` chooses them."""
    import triton.language as tl

    block_experts = min((launch.next_pow2(experts) + 31) // 32 * 32, 1024)
    block_rows, num_warps = max(1024 // block_experts, 1), 4
    if experts > 128:  # FlagGems keeps a warp on one row for the wide reduction
        block_rows, num_warps = 1, 1
    kwargs = {
        "renormalize": renormalize,
        "INDEX_TY": getattr(tl, index_type),
        "BLOCK_SIZE_ROWS": block_rows,
        "BLOCK_SIZE_EXPERTS": block_experts,
        "num_warps": num_warps,
    }
    return block_rows, kwargs


def topk_softmax_in_plan(
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    token_expert_indices: torch.Tensor,
    gating_output: torch.Tensor,
    renormalize: bool,
) -> bool:
    """``flag_gems.topk_softmax``'s one launch, with its launch parameters, through a launch
    plan keyed by the layout; False, launching nothing, for calls FlagGems' function should
    take (no plan kernel, no tokens, an index dtype or top-k it rejects, unaligned pointers).
    Like FlagGems' function, it reads every tensor as contiguous."""
    plans = topk_softmax_plans()
    if plans is None or gating_output.dim() != 2:
        return False
    tokens, experts = gating_output.shape
    topk = topk_weights.shape[-1]
    index_type = _TOPK_INDEX_TYPES.get(topk_ids.dtype)
    if tokens == 0 or topk > 32 or index_type is None:
        return False
    tensors = (gating_output, topk_weights, topk_ids, token_expert_indices)
    if not launch.aligned(*tensors):
        return False
    renormalize = bool(renormalize)
    block_rows, kwargs = _topk_softmax_options(index_type, renormalize, experts)
    # Triton specialises integer arguments equal to 1 and divisible by 16: the token count is
    # one, the others are in the key whole.
    layout = (
        gating_output.dtype,
        topk_weights.dtype,
        index_type,
        token_expert_indices.dtype,
        tokens == 1,
        tokens % 16 == 0,
        topk,
        experts,
        renormalize,
        gating_output.get_device(),
    )
    args = (gating_output, None, topk_weights, topk_ids, token_expert_indices)
    args += (tokens, topk, experts, 0, experts)
    plans.launch(layout, (launch.cdiv(tokens, block_rows),), args, kwargs)
    return True


def moe_sum(input: torch.Tensor, output: torch.Tensor) -> None:
    """output[t] = sum over k of input[t, k]: FlagGems' ``moe_sum`` kernel through a launch plan
    on the current GPU, its function otherwise."""
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
