"""Attention when the CUDA vendor backend is preferred: what vanilla vLLM runs on the GPU.

- ``attention_backend``: vLLM's FlashAttention backend, vLLM's first choice on Hopper, so the
  shipped policy serves at vanilla vLLM's speed with vanilla's features (FA3's ahead-of-time
  scheduling, cascade attention, FP8 KV caches); for MLA models vLLM's own choice (FlashAttention
  MLA on Hopper, FlashInfer MLA on Blackwell, ...).
- ``reshape_and_cache_flash`` and ``paged_attention``: the kernels the plugin's attention backend
  runs where these impls are selected (``attention_backend`` routed to the plugin, the ops to
  the vendor): vLLM's CUDA cache write, and vLLM's FlashAttention (``flash_attn_varlen_func``
  with a block table, the version vLLM picks for the GPU). Where FlashAttention cannot run the
  call (float32, sinks without FA3, a head size it lacks) vanilla vLLM picks its Triton backend,
  and so does this impl: vLLM's Triton ``unified_attention``.
- ``varlen_attention`` (encoder-only layers, no KV cache): vLLM's FlashAttention as vLLM's
  FlashAttention backend runs encoder-only attention (``flash_attn_varlen_func`` with
  ``cu_seqlens_k`` the query offsets, no block table). Where FlashAttention cannot run the call
  (float32, a head size it lacks) vLLM's FlashAttention backend is not chosen either; this impl
  raises an error naming why, and the dispatch takes the next backend.
"""

import functools

import torch

from vllm_fl.kernels import attention as kernels

# vLLM's FlashAttention backend, vLLM's first choice on Hopper (vllm/platforms/cuda.py).
FLASH_ATTN = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"
#: the attention_backend answer that keeps vLLM's own choice
VLLM_CHOICE = ""

#: the activation dtypes vLLM's FlashAttention takes
FLASH_ATTN_DTYPES = (torch.float16, torch.bfloat16)


def attention_backend(use_mla: bool = False) -> str:
    """vLLM's FlashAttention backend (vLLM's own choice for MLA models)."""
    return VLLM_CHOICE if use_mla else FLASH_ATTN


def reshape_and_cache_flash(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """``_C_cache_ops.reshape_and_cache_flash`` through vLLM's wrapper (no FP8: scales of 1)."""
    from vllm import _custom_ops as ops

    scale = kernels.unit_scale(key.device)
    ops.reshape_and_cache_flash(
        key, value, key_cache, value_cache, slot_mapping, "auto", scale, scale
    )


@functools.cache
def _flash_attn_version(head_size: int, has_sinks: bool) -> int | None:
    """The FlashAttention version vLLM's FlashAttention backend would use for this layer, or
    None where it cannot run it."""
    from vllm.v1.attention.backends import fa_utils

    if head_size % 8 or head_size > 256:
        return None
    version = fa_utils.get_flash_attn_version(requires_alibi=False, head_size=head_size)
    if has_sinks and not fa_utils.flash_attn_supports_sinks():
        return None
    return version


def _canonical_strides(cache: torch.Tensor) -> torch.Tensor:
    """vLLM's fix of degenerate strides on size-1 dimensions (one kv head): FA3's TMA needs
    16-byte aligned strides."""
    from vllm.utils import torch_utils

    canonicalize = getattr(torch_utils, "canonicalize_singleton_dim_strides", None)
    return cache if canonicalize is None else canonicalize(cache)


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
    """vLLM's FlashAttention with a block table; vLLM's Triton attention where FlashAttention
    cannot run the call."""
    version = None
    # FA3 takes sinks ("s_aux") in bfloat16 only (measured on the H100: "We only support bf16
    # dtype for S aux"); vLLM's sink models run in bfloat16
    sinks_ok = sinks is None or query.dtype == torch.bfloat16
    if query.dtype in FLASH_ATTN_DTYPES and sinks_ok:
        version = _flash_attn_version(query.shape[2], sinks is not None)
    if version is None:
        kernels.unified_attention(
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
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    window = None
    if window_left >= 0:
        window = [window_left, 0 if causal else window_left]
    flash_attn_varlen_func(
        q=query,
        k=_canonical_strides(key_cache),
        v=_canonical_strides(value_cache),
        out=output,
        cu_seqlens_q=query_start_loc,
        max_seqlen_q=max_query_len,
        seqused_k=seq_lens,
        max_seqlen_k=max_seq_len,
        softmax_scale=softmax_scale,
        causal=causal,
        window_size=window,
        block_table=block_table,
        softcap=logits_soft_cap,
        fa_version=version,
        **({} if sinks is None else {"s_aux": sinks}),
    )


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
    """vLLM's ``flash_attn_varlen_func`` over the step's own keys and values, the version vLLM
    picks for the GPU."""
    version = None
    if q.dtype in FLASH_ATTN_DTYPES:
        version = _flash_attn_version(q.shape[2], False)
    if version is None:
        raise ValueError(
            f"cuda varlen_attention: vLLM's FlashAttention cannot run {q.dtype} with head size "
            f"{q.shape[2]} (float16 or bfloat16, a head size of at most 256 divisible by 8)"
        )
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    window = None
    if window_left >= 0:
        window = [window_left, 0 if causal else window_left]
    flash_attn_varlen_func(
        q=q,
        k=k,
        v=v,
        out=output,
        cu_seqlens_q=cu_seqlens,
        cu_seqlens_k=cu_seqlens,
        max_seqlen_q=max_seqlen,
        max_seqlen_k=max_seqlen,
        softmax_scale=softmax_scale,
        causal=causal,
        window_size=window,
        softcap=logits_soft_cap,
        fa_version=version,
    )
