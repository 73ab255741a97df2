"""One-launch MoE routing kernels: grouped top-k, and block alignment of a decode step's pairs.

FlagGems computes ``grouped_topk`` in three launches (a sigmoid, the per-group top-2 sums, the
selection) and ``moe_align_block_size`` in five (a zeroed counter buffer and four stages),
each launch paying the host's launch cost; vLLM's CUDA kernels take one. At decode sizes that
host time is the op's whole cost. These kernels do each op in one program per token
(grouped top-k) or in one program for all pairs (alignment of up to ``ALIGN_MAX_PAIRS`` pairs,
in chunks of a pairs-by-experts tile), in float32 as the reference computes. Larger alignments
stay on FlagGems' staged kernels, whose buffers ``align_prepare_kernel`` fills beforehand in one
launch (``moe.launch.align_in_stages``).

The ``*_launch`` functions derive the launch from vLLM's tensors, or None for what the kernel
does not take; they need Triton but no GPU, so the CPU tests run the kernels in Triton's
interpreter. ``routing`` launches them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_fl.kernels.launch import Launch, next_pow2

#: the most experts one grouped top-k program holds in registers
GROUPED_TOPK_MAX_EXPERTS = 1024
#: the most (token, slot) pairs the one-program alignment takes (a decode step of 16 tokens with
#: top-8 routing): its GPU time grows with the pairs and passes that of FlagGems' five launches
#: beyond this (``benchmarks/bench_align.py``), while it saves their host time in eager mode
ALIGN_MAX_PAIRS = 128
#: warps of the one-program alignment: the fastest of 4, 8 and 16 at every pair count measured
#: (``benchmarks/bench_align.py``)
ALIGN_WARPS = 8
ALIGN_MAX_EXPERTS = 512
#: the most elements of a pairs-by-experts comparison one program holds
_ALIGN_MAX_TILE = 16384
_FILL_BLOCK = 1024
#: the most programs of ``align_prepare_kernel`` (each writes _FILL_BLOCK elements per step)
PREPARE_MAX_PROGRAMS = 128


@triton.jit
def grouped_topk_kernel(
    scores_ptr,  # [tokens, experts], experts contiguous
    bias_ptr,  # [experts]
    weights_ptr,  # [tokens, TOPK] float32, out
    ids_ptr,  # [tokens, TOPK] int32, out
    scores_row,
    scale,
    GROUPS: tl.constexpr,
    PER_GROUP: tl.constexpr,
    TOPK_GROUP: tl.constexpr,
    TOPK: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SIGMOID: tl.constexpr,
    RENORMALIZE: tl.constexpr,
):
    token = tl.program_id(0)
    g = tl.arange(0, BLOCK_G)
    p = tl.arange(0, BLOCK_P)
    valid = (g < GROUPS)[:, None] & (p < PER_GROUP)[None, :]
    expert = g[:, None] * PER_GROUP + p[None, :]
    raw = tl.load(scores_ptr + token.to(tl.int64) * scores_row + expert, mask=valid, other=0.0)
    scores = raw.to(tl.float32)
    if SIGMOID:
        scores = tl.sigmoid(scores)
    bias = tl.load(bias_ptr + expert, mask=valid, other=0.0).to(tl.float32)
    biased = tl.where(valid, scores + bias, float("-inf"))
    # each group's score: the sum of its two best biased scores
    best = tl.max(biased, axis=1)
    best_at = tl.argmax(biased, axis=1)
    second = tl.max(tl.where(p[None, :] == best_at[:, None], float("-inf"), biased), axis=1)
    group_scores = tl.where(g < GROUPS, best + second, float("-inf"))
    chosen = g < 0
    for _ in tl.static_range(TOPK_GROUP):
        top = tl.argmax(group_scores, axis=0)
        chosen = chosen | (g == top)
        group_scores = tl.where(g == top, float("-inf"), group_scores)
    candidates = tl.where(chosen[:, None] & valid, biased, float("-inf"))
    flat_candidates = tl.reshape(candidates, (BLOCK_G * BLOCK_P,))
    flat_expert = tl.reshape(expert, (BLOCK_G * BLOCK_P,))
    flat_scores = tl.reshape(scores, (BLOCK_G * BLOCK_P,))
    n = tl.arange(0, BLOCK_G * BLOCK_P)
    k = tl.arange(0, BLOCK_K)
    out_ids = tl.zeros((BLOCK_K,), dtype=tl.int32)
    out_weights = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for slot in tl.static_range(TOPK):
        at = tl.argmax(flat_candidates, axis=0)
        picked = n == at
        out_ids = tl.where(k == slot, tl.sum(tl.where(picked, flat_expert, 0), axis=0), out_ids)
        weight = tl.sum(tl.where(picked, flat_scores, 0.0), axis=0)
        out_weights = tl.where(k == slot, weight, out_weights)
        flat_candidates = tl.where(picked, float("-inf"), flat_candidates)
    if RENORMALIZE:
        out_weights = out_weights / tl.sum(out_weights, axis=0)
    out_weights = out_weights * scale
    out = token.to(tl.int64) * TOPK + k
    tl.store(weights_ptr + out, out_weights, mask=k < TOPK)
    tl.store(ids_ptr + out, out_ids, mask=k < TOPK)


def grouped_topk_launch(
    scores: torch.Tensor,
    num_expert_group: int,
    topk_group: int,
    topk: int,
    renormalize: bool,
    routed_scaling_factor: float,
    bias: torch.Tensor,
    scoring_func: int,
    weights: torch.Tensor,
    ids: torch.Tensor,
) -> Launch | None:
    """The launch writing ``weights`` [tokens, topk] (float32) and ``ids`` (int32), or None for
    a call the kernel does not take."""
    if scores.dim() != 2 or scores.stride(1) != 1 or scoring_func not in (0, 1):
        return None
    tokens, experts = scores.shape
    if (
        tokens == 0
        or num_expert_group <= 0
        or experts % num_expert_group
        or experts > GROUPED_TOPK_MAX_EXPERTS
        or bias.numel() != experts
        or not bias.is_contiguous()
    ):
        return None
    per_group = experts // num_expert_group
    if (
        per_group < 2
        or not 0 < topk_group <= num_expert_group
        or not 0 < topk <= topk_group * per_group
    ):
        return None
    row = scores.stride(0)
    kwargs = {
        "GROUPS": num_expert_group,
        "PER_GROUP": per_group,
        "TOPK_GROUP": topk_group,
        "TOPK": topk,
        "BLOCK_G": next_pow2(num_expert_group),
        "BLOCK_P": next_pow2(per_group),
        "BLOCK_K": next_pow2(topk),
        "SIGMOID": scoring_func == 1,
        "RENORMALIZE": bool(renormalize),
        "num_warps": 4,
    }
    args = (scores, bias, weights, ids, row, float(routed_scaling_factor))
    layout = (
        scores.dtype,
        bias.dtype,
        row,
        num_expert_group,
        topk_group,
        topk,
        scoring_func,
        bool(renormalize),
        scores.device.index,
    )
    return Launch((tokens,), args, kwargs, layout)


@triton.jit
def align_pairs_kernel(
    topk_ids_ptr,  # [pairs] (topk_ids flattened)
    sorted_ptr,  # [n_sorted] int32, out
    expert_ids_ptr,  # [n_blocks] int32, out
    total_ptr,  # [1] int32, out
    pairs,
    n_sorted,
    n_blocks,
    EXPERTS: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_E: tl.constexpr,
    FILL_BLOCK: tl.constexpr,
    BLOCKS_PER_STEP: tl.constexpr,
):
    c = tl.arange(0, CHUNK)
    e = tl.arange(0, BLOCK_E)
    counts = tl.zeros([BLOCK_E], dtype=tl.int32)
    for offset in range(0, pairs, CHUNK):
        valid = offset + c < pairs
        ids = tl.load(topk_ids_ptr + offset + c, mask=valid, other=EXPERTS).to(tl.int32)
        of_expert = (ids[None, :] == e[:, None]) & valid[None, :]  # [BLOCK_E, CHUNK]
        counts += tl.sum(of_expert.to(tl.int32), axis=1)
    padded = (counts + BLOCK_SIZE - 1) // BLOCK_SIZE * BLOCK_SIZE
    ends = tl.cumsum(padded, axis=0)
    starts = ends - padded
    total = tl.sum(padded, axis=0)
    tl.store(total_ptr, total)
    f = tl.arange(0, FILL_BLOCK)
    for offset in range(0, n_sorted, FILL_BLOCK):
        tl.store(sorted_ptr + offset + f, pairs, mask=offset + f < n_sorted)
    tl.debug_barrier()  # the padding is written before the pairs overwrite their slots
    # a pair's place: its expert's start, plus that expert's pairs in earlier chunks, plus
    # those before it in its chunk (stable): a running count along the chunk per expert
    seen = starts
    for offset in range(0, pairs, CHUNK):
        i = offset + c
        valid = i < pairs
        ids = tl.load(topk_ids_ptr + i, mask=valid, other=EXPERTS).to(tl.int32)
        of_expert = ((ids[None, :] == e[:, None]) & valid[None, :]).to(tl.int32)
        running = tl.cumsum(of_expert, axis=1)  # [BLOCK_E, CHUNK], inclusive
        place = tl.sum(of_expert * (seen[:, None] + running - 1), axis=0)
        tl.store(sorted_ptr + place, i, mask=valid)
        seen += tl.sum(of_expert, axis=1)
    b = tl.arange(0, BLOCKS_PER_STEP)
    for offset in range(0, n_blocks, BLOCKS_PER_STEP):
        block = offset + b
        first = block * BLOCK_SIZE
        # the expert whose padded run holds this block: how many runs end at or before it
        before = (ends[None, :] <= first[:, None]) & (e[None, :] < EXPERTS)
        expert = tl.sum(before.to(tl.int32), axis=1)
        expert = tl.where(first < total, expert, -1)
        tl.store(expert_ids_ptr + block, expert, mask=block < n_blocks)


def align_launch(
    topk_ids: torch.Tensor,
    num_experts: int,
    block_size: int,
    sorted_token_ids: torch.Tensor,
    experts_ids: torch.Tensor,
    num_tokens_post_pad: torch.Tensor,
) -> Launch | None:
    """The one-program alignment, or None for a call it does not take (too many pairs or
    experts, outputs that are not contiguous int32)."""
    pairs = topk_ids.numel()
    if (
        pairs == 0
        or pairs > ALIGN_MAX_PAIRS
        or num_experts > ALIGN_MAX_EXPERTS
        or block_size <= 0
        or not topk_ids.is_contiguous()
        or any(
            t.dtype != torch.int32 or not t.is_contiguous()
            for t in (sorted_token_ids, experts_ids, num_tokens_post_pad)
        )
    ):
        return None
    n_sorted, n_blocks = sorted_token_ids.numel(), experts_ids.numel()
    block_e = next_pow2(num_experts)
    chunk = min(next_pow2(pairs), _ALIGN_MAX_TILE // block_e)
    fill = min(_FILL_BLOCK, max(next_pow2(n_sorted), 16))
    blocks_per_step = min(max(next_pow2(n_blocks), 16), _ALIGN_MAX_TILE // block_e)
    kwargs = {
        "EXPERTS": num_experts,
        "BLOCK_SIZE": block_size,
        "CHUNK": chunk,
        "BLOCK_E": block_e,
        "FILL_BLOCK": fill,
        "BLOCKS_PER_STEP": blocks_per_step,
        "num_warps": ALIGN_WARPS,
    }
    args = (topk_ids, sorted_token_ids, experts_ids, num_tokens_post_pad, pairs, n_sorted, n_blocks)
    layout = (
        topk_ids.dtype,
        pairs,
        n_sorted,
        n_blocks,
        num_experts,
        block_size,
        topk_ids.device.index,
    )
    return Launch((1,), args, kwargs, layout)


@triton.jit(do_not_specialize=["pairs", "n_sorted", "n_blocks", "n_counters"])
def align_prepare_kernel(
    sorted_ptr,  # [n_sorted] int32, out: every slot the padding value
    expert_ids_ptr,  # [n_blocks] int32, out: zeros
    counters_ptr,  # [n_counters] int32, out: zeros
    pairs,
    n_sorted,
    n_blocks,
    n_counters,
    BLOCK: tl.constexpr,
):
    start = tl.program_id(0) * BLOCK
    step = tl.num_programs(0) * BLOCK
    offsets = tl.arange(0, BLOCK)
    padding = tl.full([BLOCK], 0, tl.int32) + pairs
    zeros = tl.zeros([BLOCK], dtype=tl.int32)
    for base in range(start, n_sorted, step):
        tl.store(sorted_ptr + base + offsets, padding, mask=base + offsets < n_sorted)
    for base in range(start, n_blocks, step):
        tl.store(expert_ids_ptr + base + offsets, zeros, mask=base + offsets < n_blocks)
    for base in range(start, n_counters, step):
        tl.store(counters_ptr + base + offsets, zeros, mask=base + offsets < n_counters)


def align_prepare_launch(
    pairs: int, sorted_ids: torch.Tensor, expert_ids: torch.Tensor, counters: torch.Tensor
) -> Launch:
    """The buffers of FlagGems' staged alignment before its stages, in one launch: the sorted
    ids all ``pairs`` (the padding value), the expert ids and the stages' counters zero. No
    integer argument is specialised on, so one compilation serves every token count."""
    longest = max(sorted_ids.numel(), expert_ids.numel(), counters.numel())
    programs = max(1, min(PREPARE_MAX_PROGRAMS, -(-longest // _FILL_BLOCK)))
    args = (
        sorted_ids,
        expert_ids,
        counters,
        pairs,
        sorted_ids.numel(),
        expert_ids.numel(),
        counters.numel(),
    )
    kwargs = {"BLOCK": _FILL_BLOCK, "num_warps": 4}
    return Launch((programs,), args, kwargs, (sorted_ids.device.index,))
