"""Paged attention and the KV-cache write on portable Triton kernels: vLLM's own
(``vllm.v1.attention.ops``: ``unified_attention``, ``triton_reshape_and_cache_flash``) and
FlagGems' ``reshape_and_cache_flash``. Host code only; vLLM and FlagGems are imported on first
use.

``paged_attention`` picks the kernel per batch, as measured on an H100 (``benchmarks.bench_attention``,
docs/benchmarks.md): a batch with prefills goes to FlagGems' ``flash_attn_varlen_func`` (1.5-1.9x
FlashAttention-3's time at 512-4096 new tokens, where vLLM's 2D kernel takes 3.2-7.2x), a batch
of decodes to vLLM's ``unified_attention`` (0.6-1.2x FA3's at 1 to 256 sequences, where FlagGems'
takes up to 5x at one sequence). FlagGems' kernel has no sinks and no float32 and runs on a GPU
only: those batches stay on vLLM's kernel too.

vLLM's ``unified_attention`` runs a batch with prefills in its 2D kernel (one program per query
block and kv head). A batch of decodes runs the 2D kernel or the 3D one, which splits every
sequence's keys into segments reduced afterwards, as the device's tuned table says
(``attention_table``; vLLM's own rule without one). The 3D kernel needs float32 scratch sized by
the heads; vLLM's Triton backend allocates it once per metadata builder, this module once per
(device, heads, kv heads, head size, dtype), for the largest batch the table runs in 3D.

In eager mode a decode step is bound by the host, and vLLM's ``unified_attention`` derives some
seventy kernel arguments in Python per call before Triton's runner binds them again. A batch of
decodes therefore runs it once per layout with its launches recorded (`replay.record`), checks
the replay against it once, and from then on replays the launches with the new tensors; so does
FlagGems' cache write through a launch plan (`launch.KernelPlans`). Neither happens while a CUDA
graph is captured, whose replays cost no host time.

FlagGems' ``reshape_and_cache_flash`` stores a token at ``block * block_stride + offset *
kv_heads * head_size + head * head_size``: every block of the cache a dense [block_size,
kv_heads, head_size] array, which vLLM 0.24's layout is; vLLM 0.32 interleaves a head's keys
and values, so other layouts go to vLLM's kernel, which takes the caches' strides.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading

import torch

from vllm_fl.kernels import attention_table, launch, replay, tuned

logger = logging.getLogger(__name__)

_scratch: dict[tuple, tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]] = {}
#: decode layouts -> the replay of vLLM's launches for them (None: not replayable)
_decode_replays: dict[tuple, replay.Replay | None] = {}
_replaying = True  # off for the process once a replay disagreed with vLLM's wrapper
_UNIFIED_KERNELS = ("kernel_unified_attention", "reduce_segments")
_UNSEEN = object()
_unit_scales: dict[torch.device, torch.Tensor] = {}
_lock = threading.Lock()


def decode_table(
    device: torch.device, num_heads: int, num_kv_heads: int, head_size: int, dtype: torch.dtype
) -> attention_table.Table | None:
    """The tuned decode table of this attention shape on ``device``; None off CUDA or where the
    device has none (then vLLM's rule applies)."""
    if device.type != "cuda":
        return None
    name = attention_table.table_name(
        num_heads, num_kv_heads, head_size, tuned.device_name(device), str(dtype).split(".")[-1]
    )
    return attention_table.load_table(name)


def decode_scratch(
    device: torch.device,
    num_heads: int,
    num_kv_heads: int,
    head_size: int,
    dtype: torch.dtype = torch.bfloat16,
) -> tuple[attention_table.Table | None, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(the decode table, segment outputs, maxima, sums of exponentials) for decode batches of
    this shape; the scratch, flat, holds every batch the table runs in the 3D kernel. Allocated
    on first use and kept."""
    key = (device, num_heads, num_kv_heads, head_size, dtype)
    found = _scratch.get(key)
    if found is None:
        with _lock:
            found = _scratch.get(key)
            if found is None:
                table = decode_table(device, num_heads, num_kv_heads, head_size, dtype)
                rows = max(1, attention_table.scratch_rows(table, num_kv_heads)) * num_heads
                padded = 1 << (head_size - 1).bit_length()
                found = (
                    table,
                    torch.empty(rows * padded, dtype=torch.float32, device=device),
                    torch.empty(rows, dtype=torch.float32, device=device),
                    torch.empty(rows, dtype=torch.float32, device=device),
                )
                _scratch[key] = found
    return found


def unit_scale(device: torch.device) -> torch.Tensor:
    """A float32 1.0 on ``device``: the k/v scale the cache-write kernels take (unread without an
    FP8 cache)."""
    found = _unit_scales.get(device)
    if found is None:
        found = _unit_scales.setdefault(device, torch.ones(1, dtype=torch.float32, device=device))
    return found


def flash_attn_pages(
    key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor
) -> torch.Tensor | None:
    """The block table FlagGems' ``flash_attn_varlen_func`` reads these caches right with, or
    None where it cannot address them. It finds token t of page p at (p * block_size + t) times a
    token's stride from the cache's start: pages of a cache whose blocks lie m times that far
    apart (vLLM 0.24's [num_blocks, 2, block_size, kv_heads, head_size]: a block's keys, then its
    values) are found at page indices times m."""
    _, block_size, _, head_size = key_cache.shape
    token = key_cache.stride(1)
    page = block_size * token
    if (
        key_cache.stride() != value_cache.stride()
        or key_cache.stride()[2:] != (head_size, 1)
        or key_cache.stride(0) % page
    ):
        return None
    spread = key_cache.stride(0) // page
    return block_table if spread == 1 else block_table * spread


@functools.cache
def _flaggems_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("flag_gems") is not None


def _flaggems_available() -> bool:
    return "flag_gems" in sys.modules or _flaggems_installed()


def _on_gpu(tensor: torch.Tensor) -> bool:
    return tensor.is_cuda


def paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    output: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    max_query_len: int,
    max_seq_len: int,
    softmax_scale: float,
    causal: bool = True,
    window_left: int = -1,
    logits_soft_cap: float = 0.0,
    sinks: torch.Tensor | None = None,
) -> None:
    """The op ``paged_attention`` on the kernel that is fastest for the batch (module
    docstring): FlagGems' FlashAttention-2 for a batch with prefills where it can run it, vLLM's
    ``unified_attention`` otherwise."""
    pages = None
    if (
        max_query_len > 1
        and sinks is None
        and _on_gpu(query)
        and query.dtype in (torch.float16, torch.bfloat16)
        and _flaggems_available()
    ):
        pages = flash_attn_pages(key_cache, value_cache, block_table)
    if pages is None:
        unified_attention(
            query,
            key_cache,
            value_cache,
            output,
            block_table,
            seq_lens,
            query_start_loc,
            max_query_len,
            max_seq_len,
            softmax_scale,
            causal,
            window_left,
            logits_soft_cap,
            sinks,
        )
        return
    import flag_gems

    if window_left < 0:
        window = (-1, -1)
    else:  # without causal the window reaches as far after a query as before it
        window = (window_left, 0 if causal else window_left)
    flag_gems.flash_attn_varlen_func(
        q=query,
        k=key_cache,
        v=value_cache,
        max_seqlen_q=max_query_len,
        cu_seqlens_q=query_start_loc,
        max_seqlen_k=max_seq_len,
        seqused_k=seq_lens,
        softmax_scale=softmax_scale,
        causal=causal,
        window_size=window,
        softcap=logits_soft_cap,
        block_table=pages,
        out=output,
    )


#: the activation dtypes FlagGems' flash_attn_varlen_func takes
FLASH_ATTN_DTYPES = (torch.float16, torch.bfloat16)


def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    output: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    softmax_scale: float,
    causal: bool = False,
    window_left: int = -1,
    logits_soft_cap: float = 0.0,
) -> None:
    """The op ``varlen_attention`` (no KV cache: encoder-only layers) on FlagGems'
    ``flash_attn_varlen_func``, the step's keys and values given as they are (its non-paged
    mode: ``cu_seqlens_k``, no block table)."""
    if q.dtype not in FLASH_ATTN_DTYPES:
        # no silent detour: the dispatch tries the next backend (the reference takes float32)
        raise ValueError(
            f"flagos varlen_attention: FlagGems' flash_attn_varlen_func takes float16 or "
            f"bfloat16, got {q.dtype}"
        )
    import flag_gems

    if window_left < 0:
        window = (-1, -1)
    else:  # without causal the window reaches as far after a query as before it
        window = (window_left, 0 if causal else window_left)
    flag_gems.flash_attn_varlen_func(
        q=q,
        k=k,
        v=v,
        max_seqlen_q=max_seqlen,
        cu_seqlens_q=cu_seqlens,
        max_seqlen_k=max_seqlen,
        cu_seqlens_k=cu_seqlens,
        softmax_scale=softmax_scale,
        causal=causal,
        window_size=window,
        softcap=logits_soft_cap,
        out=output,
    )


def unified_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    output: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    max_query_len: int,
    max_seq_len: int,
    softmax_scale: float,
    causal: bool,
    window_left: int,
    logits_soft_cap: float,
    sinks: torch.Tensor | None,
) -> None:
    """vLLM's Triton ``unified_attention`` into ``output`` (the op ``paged_attention``), with
    the 3D kernel's scratch for batches of decodes, whose launches are replayed where they can
    be (module docstring)."""
    replaying = max_query_len == 1 and _replayable_now(query)
    if replaying:
        tensors = {
            "query": query,
            "key_cache": key_cache,
            "value_cache": value_cache,
            "output": output,
            "block_table": block_table,
            "seq_lens": seq_lens,
            "query_start_loc": query_start_loc,
            "sinks": sinks,
        }
        key = _decode_key(tensors, softmax_scale, causal, window_left, logits_soft_cap)
        found = _decode_replays.get(key, _UNSEEN)
        if found is not _UNSEEN and found is not None:
            found(tensors)
            return
        replaying = found is _UNSEEN  # a layout seen before that cannot be replayed: the wrapper

    from vllm.v1.attention.ops import triton_unified_attention as module

    decode = {}
    kept: tuple[torch.Tensor, ...] = ()
    if max_query_len == 1:
        kv_heads = key_cache.shape[2]
        table, segment_out, segment_max, segment_sum = decode_scratch(
            query.device, query.shape[1], kv_heads, query.shape[2], query.dtype
        )
        seqs = seq_lens.shape[0]
        segments = attention_table.segments_for(table, seqs, kv_heads)
        if segments != attention_table.TWO_D:
            decode = {
                "seq_threshold_3D": seqs,
                "num_par_softmax_segments": segments,
                "softmax_segm_output": segment_out,
                "softmax_segm_max": segment_max,
                "softmax_segm_expsum": segment_sum,
            }
            kept = (segment_out, segment_max, segment_sum)

    def call() -> None:
        module.unified_attention(
            q=query,
            k=key_cache,
            v=value_cache,
            out=output,
            cu_seqlens_q=query_start_loc,
            max_seqlen_q=max_query_len,
            seqused_k=seq_lens,
            max_seqlen_k=max_seq_len,
            softmax_scale=softmax_scale,
            causal=causal,
            # the kernel reads the window's left side; without causal it applies it both ways
            window_size=(window_left, 0) if window_left >= 0 else (-1, -1),
            block_table=block_table,
            softcap=logits_soft_cap,
            q_descale=None,
            k_descale=None,
            v_descale=None,
            sinks=sinks,
            **decode,
        )

    if not replaying:
        call()
        return
    if len(_decode_replays) >= launch.MAX_PLANS:
        _decode_replays.clear()
    found = replay.record(module, _UNIFIED_KERNELS, call, tensors, kept)
    _decode_replays[key] = found if found is None else _checked(found, tensors)


def _replayable_now(query: torch.Tensor) -> bool:
    return (
        _replaying and launch.on_current_gpu(query) and not torch.cuda.is_current_stream_capturing()
    )


def _decode_key(tensors, softmax_scale, causal, window_left, logits_soft_cap) -> tuple:
    """What vLLM's wrapper derives a decode batch's launches from: every tensor's shape,
    strides, dtype and 16-byte alignment (Triton specialises on it), the device and the
    layer's constants."""
    described = tuple(
        (
            None
            if tensor is None
            else (tensor.shape, tensor.stride(), tensor.dtype, tensor.data_ptr() & 15 == 0)
        )
        for tensor in tensors.values()
    )
    device = tensors["query"].get_device()
    return (device, described, softmax_scale, causal, window_left, logits_soft_cap)


def _checked(found: replay.Replay, tensors: dict) -> replay.Replay | None:
    """``found`` if it writes what vLLM's wrapper wrote into ``tensors["output"]`` (bit for
    bit: the same compiled kernels on the same inputs); otherwise None, and replays stop for
    the process, with a warning."""
    global _replaying
    output = tensors["output"]
    again = torch.empty_like(output)
    try:
        found({**tensors, "output": again})
        failure = None if torch.equal(again, output) else "did not reproduce its output"
    except Exception as error:  # a launcher that refuses the recorded arguments
        failure = f"failed ({type(error).__name__}: {error})"
    if failure is None:
        return found
    _replaying = False
    logger.warning(
        "vllm_fl: replaying vLLM's unified_attention launches %s; every later call goes "
        "through vLLM's wrapper",
        failure,
    )
    return None


def dense_blocks(key: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor) -> bool:
    """Whether FlagGems' cache write addresses these tensors right: a token's heads contiguous in
    ``key``, every block of both caches a dense [block_size, kv_heads, head_size] array, the
    two caches with one block stride."""
    _, block_size, heads, head_size = key_cache.shape
    dense = (heads * head_size, head_size, 1)
    return (
        key.stride()[1:] == (head_size, 1)
        and key_cache.stride()[1:] == dense
        and value_cache.stride()[1:] == dense
        and key_cache.stride(0) == value_cache.stride(0)
    )


def reshape_and_cache_flash(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """The KV-cache write (op ``reshape_and_cache_flash``): FlagGems' kernel where its
    addressing fits the caches (``dense_blocks``), else vLLM's Triton kernel."""
    scale = unit_scale(key.device)
    if dense_blocks(key, key_cache, value_cache) and value.stride()[1:] == key.stride()[1:]:
        _flaggems_cache_write(key, value, key_cache, value_cache, slot_mapping, scale)
        return
    from vllm.v1.attention.ops.triton_reshape_and_cache_flash import (
        triton_reshape_and_cache_flash,
    )

    triton_reshape_and_cache_flash(
        key, value, key_cache, value_cache, slot_mapping, "auto", scale, scale
    )


def _flaggems_cache_write(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    scale: torch.Tensor,
) -> None:
    """FlagGems' ``reshape_and_cache_flash`` kernel, launched as FlagGems' wrapper launches it
    (one program per token) through a plan bound to the call's layout; FlagGems' wrapper where
    there is no plan to make."""
    plans = launch.plans_of("reshape_and_cache_flash", "reshape_and_cache_flash_kernel")
    tensors = (key, value, key_cache, value_cache, slot_mapping)
    if (
        plans is None
        or not launch.on_current_gpu(key)
        or (found := launch.pointers(*tensors)) is None
    ):
        import flag_gems

        flag_gems.reshape_and_cache_flash(
            key, value, key_cache, value_cache, slot_mapping, "auto", scale, scale
        )
        return
    tokens, heads, head_size = slot_mapping.shape[0], key.shape[1], key.shape[2]
    # everything the launch derives from the call but the five tensors' data pointers
    signature = (
        tokens,
        heads,
        head_size,
        key.stride(0),
        value.stride(0),
        key_cache.shape[1],
        key_cache.stride(0),
        key.dtype,
        key_cache.dtype,
        slot_mapping.dtype,
        key.get_device(),
    )
    if tokens == 0 or plans.launch_bound(signature, found):
        return
    args = (
        *tensors,
        key_cache.stride(0),
        key.stride(0),
        value.stride(0),
        heads,
        head_size,
        key_cache.shape[1],
        scale,
        scale,
    )
    planned = launch.Launch((tokens,), args, {"n": heads * head_size}, signature)
    plans.run(planned, signature, dynamic=len(tensors))
