"""Reference multi-head latent attention (DeepSeek's MLA) in plain PyTorch: the ground truth for
parity, and what the plugin's MLA backend runs on the CPU.

The latent cache is [num_blocks, block_size, kv_lora_rank + rope_dim], one entry per token; a
token's slot is block * block_size + offset. Attention scores, the softmax and the merge of
partial results are computed in float32 and each output rounded once. Index tensors are read on
the host (``tolist``): the reference favours plain code over avoiding synchronisation.
"""

import torch

from vllm_fl.backends.reference.impl.attention import store_slots

#: the one cache format the reference stores and reads: the inputs' own values
AUTO = "auto"


def _refuse_quantized_cache(op: str, kv_cache_dtype: str) -> None:
    if kv_cache_dtype != AUTO:
        raise ValueError(
            f"{op}: kv_cache_dtype {kv_cache_dtype!r} is not supported by the reference "
            f"(supported: {AUTO!r}, a cache in the model's dtype)"
        )


def concat_and_cache_mla(
    kv_c: torch.Tensor,
    k_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_cache_dtype: str,
    scale: torch.Tensor,
) -> None:
    """Index assignment of each mapped token's [kv_c, k_pe] into its (block, offset) slot."""
    _refuse_quantized_cache("concat_and_cache_mla", kv_cache_dtype)
    tokens = slot_mapping.shape[0]
    kv_lora_rank, rope_dim = kv_c.shape[-1], k_pe.shape[-1]
    if kv_cache.shape[-1] != kv_lora_rank + rope_dim:
        raise ValueError(
            f"concat_and_cache_mla: kv_cache entries of {kv_cache.shape[-1]} elements, expected "
            f"kv_lora_rank {kv_lora_rank} + rope_dim {rope_dim} = {kv_lora_rank + rope_dim}"
        )
    if tokens > kv_c.shape[0]:
        raise ValueError(
            f"concat_and_cache_mla: slot_mapping maps {tokens} tokens, kv_c has only "
            f"{kv_c.shape[0]}"
        )
    store_slots(kv_cache, slot_mapping, torch.cat([kv_c[:tokens], k_pe[:tokens]], dim=-1))


def gather_and_maybe_dequant_cache(
    src_cache: torch.Tensor,
    dst: torch.Tensor,
    block_table: torch.Tensor,
    cu_seq_lens: torch.Tensor,
    token_to_seq: torch.Tensor,
    num_tokens: int,
    kv_cache_dtype: str,
    scale: torch.Tensor,
    seq_starts: torch.Tensor | None = None,
) -> None:
    """Each row's (sequence, position) from the offsets, then an indexed read of the cache."""
    _refuse_quantized_cache("gather_and_maybe_dequant_cache", kv_cache_dtype)
    if num_tokens <= 0:
        return
    seqs = token_to_seq[:num_tokens].to(torch.int64)
    positions = torch.arange(num_tokens, device=dst.device) - cu_seq_lens.to(torch.int64)[seqs]
    if seq_starts is not None:
        positions = positions + seq_starts.to(torch.int64)[seqs]
    block_size = src_cache.shape[1]
    blocks = block_table.to(torch.int64)[seqs, positions // block_size]
    dst[:num_tokens] = src_cache[blocks, positions % block_size].to(dst.dtype)


def merge_attn_states(
    output: torch.Tensor,
    prefix_output: torch.Tensor,
    prefix_lse: torch.Tensor,
    suffix_output: torch.Tensor,
    suffix_lse: torch.Tensor,
    output_lse: torch.Tensor | None = None,
    prefill_tokens_with_context: int | None = None,
    output_scale: torch.Tensor | None = None,
) -> None:
    """The log-sum-exp weighted sum in float32, computed whole before anything is written
    (``output`` may be ``prefix_output``)."""
    if output_scale is not None:
        raise ValueError(
            "merge_attn_states: an FP8 output (output_scale) is not supported by the reference"
        )
    tokens = output.shape[0]
    merged = tokens if prefill_tokens_with_context is None else prefill_tokens_with_context
    prefix = _empty_as_minus_inf(prefix_lse[:, :merged].to(torch.float32))
    suffix = _empty_as_minus_inf(suffix_lse.to(torch.float32))
    suffix_merged = suffix[:, :merged]
    peak = torch.maximum(prefix, suffix_merged)
    # two empty parts: weights 0 and 0 instead of nan
    peak = torch.where(torch.isinf(peak), torch.zeros_like(peak), peak)
    prefix_weight, suffix_weight = torch.exp(prefix - peak), torch.exp(suffix_merged - peak)
    total = prefix_weight + suffix_weight
    safe_total = torch.where(total > 0, total, torch.ones_like(total))
    # [heads, tokens] -> [tokens, heads, 1]
    prefix_share = (prefix_weight / safe_total).t().unsqueeze(-1)
    suffix_share = (suffix_weight / safe_total).t().unsqueeze(-1)
    result = suffix_output.to(torch.float32).clone()
    result[:merged] = (
        prefix_output[:merged].to(torch.float32) * prefix_share
        + suffix_output[:merged].to(torch.float32) * suffix_share
    )
    lse = suffix.clone()
    lse[:, :merged] = torch.log(total) + peak
    output.copy_(result.to(output.dtype))
    if output_lse is not None:
        output_lse.copy_(lse)


def _empty_as_minus_inf(lse: torch.Tensor) -> torch.Tensor:
    """FlashAttention 2 reports an empty softmax as +inf, FlashAttention 3 as -inf: both mean
    "no keys", which weighs nothing."""
    return torch.where(lse == float("inf"), torch.full_like(lse, float("-inf")), lse)


def mla_prefill_attention(
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
    """Masked softmax attention of each sequence in float32."""
    q_starts, k_starts = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    if len(q_starts) != len(k_starts):
        raise ValueError(
            f"mla_prefill_attention: cu_seqlens_q has {len(q_starts)} offsets, cu_seqlens_k "
            f"{len(k_starts)}; expected one offset per sequence plus one in both"
        )
    for seq in range(len(q_starts) - 1):
        q_first, q_last = q_starts[seq], q_starts[seq + 1]
        k_first, k_last = k_starts[seq], k_starts[seq + 1]
        if q_last == q_first:
            continue
        queries = q[q_first:q_last].to(torch.float32)
        scores = torch.einsum("qhd,khd->hqk", queries, k[k_first:k_last].to(torch.float32))
        scores = scores * softmax_scale
        if causal:
            query_len, key_len = q_last - q_first, k_last - k_first
            query_pos = torch.arange(key_len - query_len, key_len, device=q.device)[:, None]
            key_pos = torch.arange(key_len, device=q.device)[None, :]
            scores = scores.masked_fill(key_pos > query_pos, float("-inf"))
        row_lse = torch.logsumexp(scores, dim=-1)
        # a query that sees no key attends to nothing
        probs = torch.nan_to_num(torch.exp(scores - row_lse.unsqueeze(-1)), nan=0.0)
        out = torch.einsum("hqk,khd->qhd", probs, v[k_first:k_last].to(torch.float32))
        output[q_first:q_last] = out.to(output.dtype)
        if lse is not None:
            lse[:, q_first:q_last] = row_lse


def mla_decode_attention(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    output: torch.Tensor,
    lse: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    softmax_scale: float,
) -> None:
    """Each query's cache entries gathered in order, then softmax attention in float32."""
    kv_lora_rank = output.shape[-1]
    if q.shape[-1] != kv_cache.shape[-1]:
        raise ValueError(
            f"mla_decode_attention: q has {q.shape[-1]} elements per head, the cache's entries "
            f"{kv_cache.shape[-1]}; expected both kv_lora_rank + rope_dim"
        )
    block_size = kv_cache.shape[1]
    for row, seq_len in enumerate(seq_lens.tolist()):
        pages = block_table[row, : -(-seq_len // block_size)].to(torch.int64)
        entries = kv_cache[pages].reshape(-1, kv_cache.shape[-1])[:seq_len].to(torch.float32)
        scores = (q[row].to(torch.float32) @ entries.t()) * softmax_scale
        row_lse = torch.logsumexp(scores, dim=-1)
        probs = torch.exp(scores - row_lse.unsqueeze(-1))
        output[row] = (probs @ entries[:, :kv_lora_rank]).to(output.dtype)
        lse[row] = row_lse
