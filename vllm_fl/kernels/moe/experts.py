"""FlagGems' unquantized fused experts, its kernels launched through launch plans.

``flag_gems.fused_experts_impl`` (FlagGems' port of vLLM's) spends most of a decode step's MoE
time on the host, several times vLLM's: in FlagGems' config lookup, its alignment and
activation wrappers and two launches of ``fused_moe_kernel`` through Triton's argument binding.
``fused_experts_in_plans`` runs the same sequence for the unquantized case — the GEMM config for
the shape (this library's tuned table for the device, ``tuned_configs``, else FlagGems'; looked
up once per chunk size), the alignment, both grouped GEMMs on FlagGems' ``fused_moe_kernel``
with the arguments FlagGems' ``invoke_fused_moe_triton_kernel`` passes it, the activation and
the top-k sum — with every kernel launched through launch plans. It returns None for a call it
does not take (quantised or expert-parallel weights, more than one chunk of tokens, misaligned
operands, a FlagGems whose kernel has other parameters); ``fused_experts`` then calls FlagGems'
function. Freshly allocated buffers are 16-byte aligned (the caching allocator's blocks), so
only the inputs are checked.

``warm_up_token_counts`` names the calls that compile, before serving, every kernel variant
``fused_experts`` can need for a layer.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from vllm_fl.kernels import launch, pointwise, routing
from vllm_fl.kernels.moe import launch as moe_launch
from vllm_fl.kernels.moe import tuned_configs

#: FlagGems' chunking: more tokens than this run in several chunks (through FlagGems' function)
CHUNK_SIZE = 16 * 1024
#: FlagGems (as vLLM) skips the alignment when the pairs are this sparse among the experts
SPARSITY_FACTOR = 4
#: ``fused_moe_kernel``'s parameters before its constexprs, in order
GEMM_RUNTIME_PARAMS = (
    "a_ptr",
    "b_ptr",
    "c_ptr",
    "b_bias_ptr",
    "a_scale_ptr",
    "b_scale_ptr",
    "topk_weights_ptr",
    "sorted_token_ids_ptr",
    "expert_ids_ptr",
    "num_tokens_post_padded_ptr",
    "N",
    "K",
    "EM",
    "num_valid_tokens",
    "stride_am",
    "stride_ak",
    "stride_be",
    "stride_bk",
    "stride_bn",
    "stride_cm",
    "stride_cn",
    "stride_asm",
    "stride_ask",
    "stride_bse",
    "stride_bsk",
    "stride_bsn",
    "stride_bbe",
    "stride_bbn",
)
_LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
_TL_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


@dataclass(frozen=True)
class ExpertKernels:
    """What ``fused_experts`` launches: the GEMM kernel's launch plans (anything with
    ``run(Launch)``), its parameter names, and the tuned config per chunk size M (with a
    hashable key of it)."""

    gemm: Any
    gemm_params: tuple[str, ...]
    config: Callable[[torch.Tensor, torch.Tensor, int, torch.dtype, int], tuple[dict, tuple]]

    @functools.cached_property
    def takes_our_arguments(self) -> bool:
        """Whether the GEMM kernel's leading parameters are the ones ``gemm_launch`` passes."""
        return self.gemm_params[: len(GEMM_RUNTIME_PARAMS)] == GEMM_RUNTIME_PARAMS


def sorted_length(pairs: int, experts: int, block_m: int) -> int | None:
    """The length of a call's aligned pair ids (every expert's pairs padded to ``block_m``), or
    None where the pairs are too sparse among the experts to align (each its own block)."""
    if pairs * SPARSITY_FACTOR <= experts:
        return None
    return pairs + experts * (block_m - 1)


def gemm_rows(m: int, top_k: int, block_m: int, sorted_len: int | None) -> int:
    """EM, the rows ``fused_moe_kernel`` covers for ``m`` rows of A with ``top_k`` slots each,
    as FlagGems' ``invoke_fused_moe_triton_kernel`` derives it."""
    if sorted_len is None:
        return m * top_k * block_m
    if m < block_m:
        return min(sorted_len, m * top_k * block_m)
    return sorted_len


def gemm_launch(
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    topk_weights: torch.Tensor,
    sorted_token_ids: torch.Tensor | None,
    expert_ids: torch.Tensor,
    num_tokens_post_padded: torch.Tensor,
    mul_routed_weight: bool,
    top_k: int,
    config: dict[str, Any],
    config_key: tuple,
) -> launch.Launch:
    """``fused_moe_kernel``'s launch as FlagGems' ``invoke_fused_moe_triton_kernel`` makes it for
    unquantised weights without a bias: C[token, slot] = A[token] @ B[expert].T, per pair."""
    import triton.language as tl

    m = a.size(0)
    num_tokens = m * top_k
    block_m = config["BLOCK_SIZE_M"]
    sorted_len = None if sorted_token_ids is None else sorted_token_ids.size(0)
    em = gemm_rows(m, top_k, block_m, sorted_len)
    n, k = b.size(1), b.size(2)
    tuned = dict(config)
    block_k = tuned.pop("BLOCK_SIZE_K")
    swap_ab = tuned.pop("SWAP_AB", False)
    options = {name: tuned.pop(name) for name in _LAUNCH_OPTIONS if name in tuned}
    args = (
        a,
        b,
        c,
        None,  # bias
        None,  # A scale
        None,  # B scale
        topk_weights,
        sorted_token_ids,
        expert_ids,
        num_tokens_post_padded,
        n,
        k,
        em,
        num_tokens,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(2),
        b.stride(1),
        c.stride(1),
        c.stride(2),
        *(0,) * 7,  # scale and bias strides
    )
    kwargs = {
        "group_n": 0,
        "group_k": 0,
        "naive_block_assignment": sorted_token_ids is None,
        "MUL_ROUTED_WEIGHT": bool(mul_routed_weight),
        "top_k": top_k,
        "compute_type": getattr(tl, _TL_DTYPES[a.dtype]),
        "use_fp8_w8a8": False,
        "use_int8_w8a8": False,
        "use_int8_w8a16": False,
        "per_channel_quant": False,
        "HAS_BIAS": False,
        "BLOCK_SIZE_K": block_k,
        "SWAP_AB": swap_ab,
        "SPLIT_K": 1,
        **tuned,
        **options,
    }
    grid = (launch.cdiv(em, block_m) * launch.cdiv(n, tuned["BLOCK_SIZE_N"]),)
    # Triton specialises integers on == 1 and divisibility by 16; the others are fixed per model
    layout = (
        a.dtype,
        b.dtype,
        c.dtype,
        topk_weights.dtype,
        expert_ids.dtype,
        sorted_token_ids is None,
        n,
        k,
        em == 1,
        em % 16 == 0,
        num_tokens == 1,
        num_tokens % 16 == 0,
        a.stride(),
        b.stride(),
        c.stride(),
        bool(mul_routed_weight),
        top_k,
        config_key,
        a.device.index,
    )
    return launch.Launch(grid, args, kwargs, layout)


def fused_experts_in_plans(
    kernels: ExpertKernels,
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    apply_router_weight_on_input: bool,
    global_num_experts: int,
    *,
    align: Callable[..., None],
    activate: Callable[[torch.Tensor], torch.Tensor],
    reduce: Callable[[torch.Tensor, torch.Tensor], None],
) -> torch.Tensor | None:
    """silu-gated experts of every (token, slot) pair, summed per token; None where not taken.

    ``align(topk_ids, experts, block, sorted_ids, expert_ids, total)``, ``activate(gate_up)``
    (silu(x[:, :d]) * x[:, d:]) and ``reduce(per_slot, out)`` (the top-k sum) are the kernels
    of those steps (``STEPS``: this library's)."""
    tokens = hidden_states.size(0)
    if (
        not kernels.takes_our_arguments
        or hidden_states.dim() != 2
        or hidden_states.dtype not in _TL_DTYPES
        or w1.dtype != hidden_states.dtype
        or w2.dtype != hidden_states.dtype
        or not hidden_states.is_contiguous()
        or w1.stride(-1) != 1
        or w2.stride(-1) != 1
        or topk_weights.stride(-1) != 1
        or topk_weights.shape != topk_ids.shape
        or hidden_states.size(1) != w1.size(2)
        or not 0 < tokens <= CHUNK_SIZE
        or not launch.aligned(hidden_states, w1, w2, topk_weights, topk_ids)
    ):
        return None
    experts, n, _ = w1.shape
    hidden = w2.size(1)
    if global_num_experts == -1:
        global_num_experts = experts
    top_k = topk_ids.size(1)
    config, config_key = kernels.config(w1, w2, top_k, hidden_states.dtype, tokens)
    block_m = config["BLOCK_SIZE_M"]
    device = hidden_states.device
    pairs = topk_ids.numel()
    padded = sorted_length(pairs, global_num_experts, block_m)
    if padded is None:
        sorted_ids = None
        expert_ids = topk_ids.view(-1)
        total = torch.full((1,), pairs * block_m, dtype=torch.int32, device=device)
    else:
        sorted_ids = torch.empty(padded, dtype=torch.int32, device=device)
        expert_ids = torch.empty(launch.cdiv(padded, block_m), dtype=torch.int32, device=device)
        total = torch.empty(1, dtype=torch.int32, device=device)
        align(topk_ids, global_num_experts, block_m, sorted_ids, expert_ids, total)
    shared = torch.empty(tokens * top_k * max(n, hidden), dtype=hidden_states.dtype, device=device)
    gate_up = shared[: tokens * top_k * n].view(tokens, top_k, n)
    per_slot = shared[: tokens * top_k * hidden].view(tokens, top_k, hidden)
    routing = (topk_weights, sorted_ids, expert_ids, total)
    first = (hidden_states, w1, gate_up, *routing, apply_router_weight_on_input, top_k)
    kernels.gemm.run(gemm_launch(*first, config, config_key))
    activated = activate(gate_up.view(-1, n))
    second = (activated, w2, per_slot, *routing, not apply_router_weight_on_input, 1)
    kernels.gemm.run(gemm_launch(*second, config, config_key))
    out = torch.empty_like(hidden_states)
    reduce(per_slot, out)
    return out


def specialisation(
    kernels: ExpertKernels,
    w1: torch.Tensor,
    w2: torch.Tensor,
    top_k: int,
    tokens: int,
    experts: int,
    align_max_pairs: int,
) -> tuple:
    """What the kernels of a ``fused_experts`` call of ``tokens`` tokens are compiled for,
    beyond what is fixed per layer: the GEMMs' tuned config and the integer classes of both
    GEMMs' rows (Triton specialises integers on == 1 and divisibility by 16), the alignment's
    path (the one-program kernel, keyed by its pair count up to ``align_max_pairs``; FlagGems'
    stages by ``moe.launch.stage_tokens_per_thread``) and the classes of the pair and token
    counts (the GEMMs' valid rows, the activation, the top-k sum). Calls of equal
    specialisation compile nothing the other has not. The rows come from ``sorted_length`` and
    ``gemm_rows``, as ``fused_experts`` launches them: the first GEMM over the tokens with their
    top-k slots, the second over the pairs with one."""
    config, config_key = kernels.config(w1, w2, top_k, w1.dtype, tokens)
    block_m = config["BLOCK_SIZE_M"]
    pairs = tokens * top_k
    sorted_len = sorted_length(pairs, experts, block_m)
    if sorted_len is None:
        route: tuple = ("sparse",)
    elif pairs <= align_max_pairs:
        route = ("one program", pairs)
    else:
        route = ("stages", moe_launch.stage_tokens_per_thread(pairs, experts))
    classes = [config_key, route]
    for count in (
        gemm_rows(tokens, top_k, block_m, sorted_len),
        gemm_rows(pairs, 1, block_m, sorted_len),
        pairs,
        tokens,
    ):
        classes += [count == 1, count % 16 == 0]
    return tuple(classes)


def warm_up_token_counts(
    kernels: ExpertKernels,
    w1: torch.Tensor,
    w2: torch.Tensor,
    top_k: int,
    max_tokens: int,
    experts: int,
    align_max_pairs: int,
) -> list[int]:
    """The smallest token count of each distinct ``specialisation`` of calls of 1 to
    ``max_tokens`` tokens (at most one chunk): calls of these counts compile every kernel
    variant a served step can need, so that none compiles while serving (a new variant costs a
    Triton compilation in the middle of a batch)."""
    first: dict[tuple, int] = {}
    with quiet_flag_gems():
        for tokens in range(1, min(max_tokens, CHUNK_SIZE) + 1):
            key = specialisation(kernels, w1, w2, top_k, tokens, experts, align_max_pairs)
            first.setdefault(key, tokens)
    return sorted(first.values())


@contextlib.contextmanager
def quiet_flag_gems() -> Iterator[None]:
    """Within: FlagGems logs errors only (its config lookup logs a warning for every new token
    count where it has no table)."""
    gems_logger = logging.getLogger("flag_gems")
    level = gems_logger.level
    gems_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        gems_logger.setLevel(level)


def config_key(config: dict) -> tuple:
    """A GEMM config as the hashable part of its launch plans' layout key."""
    return tuple(sorted(config.items()))


def gems_config(w1: torch.Tensor, w2: torch.Tensor, top_k: int, dtype: torch.dtype, m: int) -> dict:
    """FlagGems' own config for ``m`` tokens through these experts: its table for the device,
    else its default heuristic (as ``fused_experts_impl`` asks for it, unquantised: no block
    shape)."""
    module = launch.defining_module("fused.fused_experts_impl")
    dtype_name = module._get_config_dtype_str(dtype=dtype)
    config = module.try_get_optimal_moe_config(
        w1.size(), w2.size(), top_k, dtype_name, m, E=w1.size(0)
    )
    return dict(config)


@functools.cache
def flag_gems_kernels() -> ExpertKernels | None:
    """FlagGems' ``fused_moe_kernel`` with the config per call: this library's tuned table
    (``tuned_configs``) where it has one for the device and shape, else ``gems_config``; None
    where FlagGems' fused-experts module lacks the kernel or its config lookup."""
    module = launch.defining_module("fused.fused_experts_impl")
    kernel = getattr(module, "fused_moe_kernel", None)
    lookups = ("try_get_optimal_moe_config", "_get_config_dtype_str")
    if kernel is None or not all(hasattr(module, name) for name in lookups):
        return None
    configs: dict[tuple, tuple[dict, tuple]] = {}

    def config(w1, w2, top_k: int, dtype: torch.dtype, m: int) -> tuple[dict, tuple]:
        key = (tuple(w1.shape), tuple(w2.shape), top_k, dtype, m)
        found = configs.get(key)
        if found is None:
            tuned = tuned_configs.lookup(w1, w2, dtype, m) or gems_config(w1, w2, top_k, dtype, m)
            found = configs[key] = (tuned, config_key(tuned))
        return found

    plans = launch.KernelPlans(kernel)
    return ExpertKernels(plans, plans.parameter_names, config)


#: the steps around the GEMMs: the alignment, the gated activation and the top-k sum
STEPS: dict[str, Callable[..., Any]] = {
    "align": routing.moe_align_block_size,
    "activate": pointwise.silu_and_mul,
    "reduce": moe_launch.moe_sum,
}


def fused_experts(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    apply_router_weight_on_input: bool = False,
    global_num_experts: int = -1,
    expert_map: torch.Tensor | None = None,
) -> torch.Tensor:
    """silu-gated experts: FlagGems' grouped-GEMM kernel and config launched through launch
    plans with this library's alignment, activation and sum (``fused_experts_in_plans``); what
    that does not take (an expert map, quantised or chunked calls),
    ``flag_gems.fused_experts_impl``."""
    if expert_map is None and launch.on_current_gpu(hidden_states):
        kernels = flag_gems_kernels()
        if kernels is not None:
            out = fused_experts_in_plans(
                kernels,
                hidden_states,
                w1,
                w2,
                topk_weights,
                topk_ids,
                apply_router_weight_on_input,
                global_num_experts,
                **STEPS,
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
        activation="silu",
        apply_router_weight_on_input=apply_router_weight_on_input,
        global_num_experts=global_num_experts,
        expert_map=expert_map,
    )
