"""Multi-head latent attention (DeepSeek's MLA) on portable Triton kernels: FlagGems' where it has
one, vLLM's own Triton kernels, and this library's context gather (``mla_kernels``). Host code
only; Triton, vLLM and FlagGems are imported on first use.

- ``concat_and_cache_mla``: FlagGems' ``concat_and_cache_mla`` (its kernel takes entries with a
  unit stride and a power-of-two ``kv_lora_rank``, as every MLA model has).
- ``gather_cache``: ``mla_kernels.gather_cache_kernel``; FlagGems has no gather of the latent
  cache and vLLM's is CUDA C++ (built for DeepSeek's entry of 576 only).
- ``merge_attn_states``: vLLM's Triton ``merge_attn_states``. vLLM 0.24's kernel addresses a
  token's heads and the log-sum-exps as dense rows; inputs in other strides are made dense first
  and outputs written through dense scratch.
- ``prefill_attention``: FlagGems' ``flash_attn_varlen_func``. It takes keys and values of one
  head size, so the values are padded to the keys' (as vLLM pads them for FlashAttention 2) and
  the output cut back; half precision only.
- ``decode_attention``: vLLM's Triton ``decode_attention_fwd`` in its MLA mode, the key-value
  splits chosen as vLLM's Triton MLA backend chooses them. (FlagGems' ``flash_mla`` fixes the
  softmax scale at 1 / sqrt(head size), which is not DeepSeek's.)
"""

from __future__ import annotations

import functools

import torch

from vllm_fl.kernels import launch
from vllm_fl.kernels.attention import unit_scale

#: vLLM's Triton MLA backend: the keys one split of the decode kernel should at least cover, and
#: how many splits per streaming multiprocessor it allows at most
MIN_KEYS_PER_SPLIT = 512
SPLITS_PER_SM = 2

#: the activation dtypes FlagGems' flash_attn_varlen_func takes
HALF_DTYPES = (torch.float16, torch.bfloat16)


def concat_and_cache_mla(
    kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """The latent cache write (a cache in the inputs' dtype): FlagGems' kernel."""
    kv_lora_rank = kv_c.shape[-1]
    if kv_lora_rank & (kv_lora_rank - 1) or min(kv_c.stride(-1), k_pe.stride(-1)) != 1:
        raise ValueError(
            f"flagos concat_and_cache_mla: FlagGems' kernel takes a power-of-two kv_lora_rank "
            f"and unit-stride rows, got kv_lora_rank {kv_lora_rank} and strides "
            f"{kv_c.stride()}, {k_pe.stride()}"
        )
    if kv_cache.stride(-1) != 1:
        raise ValueError(
            f"flagos concat_and_cache_mla: FlagGems' kernel takes cache entries of unit stride, "
            f"got strides {kv_cache.stride()}"
        )
    import flag_gems

    flag_gems.concat_and_cache_mla(
        kv_c, k_pe, kv_cache, slot_mapping, "auto", unit_scale(kv_c.device)
    )


@functools.cache
def _own():
    """``mla_kernels``, imported on first use: its kernel needs Triton."""
    from vllm_fl.kernels import mla_kernels

    return mla_kernels


def gather_cache(
    src_cache: torch.Tensor,
    dst: torch.Tensor,
    block_table: torch.Tensor,
    cu_seq_lens: torch.Tensor,
    token_to_seq: torch.Tensor,
    num_tokens: int,
    seq_starts: torch.Tensor | None,
) -> None:
    """Rows ``[0, num_tokens)`` of ``dst`` read back from the latent cache, one launch."""
    if num_tokens <= 0:
        return
    if src_cache.stride(-1) != 1 or dst.stride(-1) != 1:
        raise ValueError(
            f"flagos gather_and_maybe_dequant_cache: entries of unit stride expected, got "
            f"src_cache strides {src_cache.stride()} and dst strides {dst.stride()}"
        )
    own = _own()
    planned = own.gather_cache_launch(
        src_cache, dst, block_table, cu_seq_lens, token_to_seq, num_tokens, seq_starts
    )
    own.gather_cache_kernel[planned.grid](*planned.args, **planned.kwargs)


def _dense_rows(t: torch.Tensor) -> bool:
    """Whether [tokens, heads, head_size] ``t`` keeps a token's heads at one stride apart, the
    next token right after: what vLLM 0.24's merge kernel assumes."""
    return t.stride(2) == 1 and t.stride(0) == t.shape[1] * t.stride(1)


def merge_attn_states(
    output: torch.Tensor,
    prefix_output: torch.Tensor,
    prefix_lse: torch.Tensor,
    suffix_output: torch.Tensor,
    suffix_lse: torch.Tensor,
    output_lse: torch.Tensor | None,
    prefill_tokens_with_context: int | None,
) -> None:
    """vLLM's Triton merge into ``output`` (and ``output_lse``), on dense inputs."""
    if output.shape[0] == 0:
        return
    from vllm.v1.attention.ops.triton_merge_attn_states import merge_attn_states as kernel

    if not (
        _dense_rows(prefix_output)
        and _dense_rows(suffix_output)
        and prefix_output.stride(1) == suffix_output.stride(1)
    ):
        prefix_output, suffix_output = prefix_output.contiguous(), suffix_output.contiguous()
    target = (
        output
        if _dense_rows(output)
        else torch.empty_like(output, memory_format=torch.contiguous_format)
    )
    target_lse = output_lse
    if output_lse is not None and not output_lse.is_contiguous():
        target_lse = torch.empty_like(output_lse, memory_format=torch.contiguous_format)
    kernel(
        target,
        prefix_output,
        prefix_lse.contiguous(),
        suffix_output,
        suffix_lse.contiguous(),
        target_lse,
        prefill_tokens_with_context,
    )
    if target is not output:
        output.copy_(target)
    if target_lse is not output_lse:
        output_lse.copy_(target_lse)


def prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    output: torch.Tensor,
    lse: torch.Tensor | None,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
) -> None:
    """FlagGems' ``flash_attn_varlen_func`` with the values padded to the keys' head size."""
    if q.dtype not in HALF_DTYPES:
        raise ValueError(
            f"flagos mla_prefill_attention: FlagGems' flash_attn_varlen_func takes float16 or "
            f"bfloat16, got {q.dtype}"
        )
    import flag_gems

    v_head_dim = v.shape[-1]
    padded = v
    if v_head_dim != q.shape[-1]:
        padded = torch.nn.functional.pad(v, [0, q.shape[-1] - v_head_dim], value=0)
    out, softmax_lse = flag_gems.flash_attn_varlen_func(
        q=q,
        k=k,
        v=padded,
        max_seqlen_q=max_seqlen_q,
        cu_seqlens_q=cu_seqlens_q,
        max_seqlen_k=max_seqlen_k,
        cu_seqlens_k=cu_seqlens_k,
        softmax_scale=softmax_scale,
        causal=causal,
        return_softmax_lse=True,
    )
    output.copy_(out[..., :v_head_dim])
    if lse is not None:
        lse.copy_(softmax_lse)


@functools.cache
def _compute_units(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (1 elsewhere: Triton's interpreter)."""
    if device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


def decode_splits(max_seq_len: int, device: torch.device) -> int:
    """How many key-value splits the decode kernel runs per query, as vLLM's Triton MLA backend
    picks them: about one per 512 keys, a power of two, at most two per multiprocessor."""
    ideal = launch.next_pow2(max(1, max_seq_len // MIN_KEYS_PER_SPLIT))
    return min(ideal, SPLITS_PER_SM * _compute_units(device))


def decode_attention(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    output: torch.Tensor,
    lse: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    softmax_scale: float,
) -> None:
    """vLLM's Triton ``decode_attention_fwd`` over the latent cache (one kv head: the entries;
    values: their first ``kv_lora_rank`` elements)."""
    from vllm.v1.attention.ops.triton_decode_attention import decode_attention_fwd

    batch, heads = q.shape[0], q.shape[1]
    kv_lora_rank = output.shape[-1]
    splits = decode_splits(max_seq_len, q.device)
    # per split: its partial output, then its log-sum-exp
    partial = torch.empty(
        (batch, heads, splits, kv_lora_rank + 1), dtype=torch.float32, device=q.device
    )
    entries = kv_cache.unsqueeze(2)
    scale = unit_scale(q.device)
    decode_attention_fwd(
        q,
        entries,
        entries[..., :kv_lora_rank],
        output,
        lse,
        block_table,
        seq_lens,
        partial,
        splits,
        softmax_scale,
        kv_cache.shape[1],
        k_scale=scale,
        v_scale=scale,
        is_mla=True,
    )
