"""Reference attention over vLLM's paged KV cache in plain PyTorch: the ground truth for parity,
and what the plugin's attention backend runs on the CPU.

The caches are [num_blocks, block_size, kv_heads, head_size] views in whatever strides vLLM
hands them (vLLM 0.24 unbinds a [num_blocks, 2, ...] tensor, 0.32 splits the last dimension of
[num_blocks, kv_heads, block_size, 2 * head_size]); indexing writes and reads through any of
them. Scores and the softmax are computed in float32 and each output rounded once.
"""

import torch

from vllm_fl.attention import PLUGIN_BACKEND
from vllm_fl.attention.mla import MLA_BACKEND


def attention_backend(use_mla: bool = False) -> str:
    """The plugin's attention backend, its MLA backend for MLA models (their ops then run on
    the dispatch)."""
    return MLA_BACKEND if use_mla else PLUGIN_BACKEND


def cache_slots(
    slot_mapping: torch.Tensor, block_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Where a slot mapping writes into a paged cache: which tokens are stored (slot -1: none)
    and the (block, offset) of each stored one."""
    slots = slot_mapping.to(torch.int64)
    stored = slots >= 0
    slots = slots[stored]
    return stored, slots // block_size, slots % block_size


def reshape_and_cache_flash(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Index assignment of the mapped tokens into their (block, offset) slots."""
    tokens = slot_mapping.shape[0]
    if tokens > key.shape[0]:
        raise ValueError(
            f"reshape_and_cache_flash: slot_mapping maps {tokens} tokens, key has only "
            f"{key.shape[0]}"
        )
    stored, blocks, offsets = cache_slots(slot_mapping, key_cache.shape[1])
    key_cache[blocks, offsets] = key[:tokens][stored].to(key_cache.dtype)
    value_cache[blocks, offsets] = value[:tokens][stored].to(value_cache.dtype)


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
    """Each sequence's pages gathered in order, then masked softmax attention in float32."""
    num_heads, num_kv_heads = query.shape[1], key_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError(
            f"paged_attention: query has {num_heads} heads, not a multiple of the caches' "
            f"{num_kv_heads} kv heads"
        )
    group = num_heads // num_kv_heads
    block_size = key_cache.shape[1]
    starts = query_start_loc.tolist()
    for seq, seq_len in enumerate(seq_lens.tolist()):
        first, last = starts[seq], starts[seq + 1]
        if last == first:
            continue
        pages = block_table[seq, : -(-seq_len // block_size)].to(torch.int64)
        keys = _gathered(key_cache, pages, seq_len).repeat_interleave(group, dim=1)
        values = _gathered(value_cache, pages, seq_len).repeat_interleave(group, dim=1)
        q = query[first:last].to(torch.float32)
        scores = torch.einsum("qhd,khd->hqk", q, keys) * softmax_scale
        if logits_soft_cap > 0:
            scores = logits_soft_cap * torch.tanh(scores / logits_soft_cap)
        visible = _visible(last - first, seq_len, causal, window_left, query.device)
        scores = scores.masked_fill(~visible, float("-inf"))
        if sinks is not None:
            sink = sinks.to(torch.float32).view(num_heads, 1, 1).expand(-1, last - first, 1)
            probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
        else:
            probs = torch.softmax(scores, dim=-1)
        # a query that sees no key (only possible with a window and no sink) attends to nothing
        probs = torch.nan_to_num(probs, nan=0.0)
        out = torch.einsum("hqk,khd->qhd", probs, values)
        output[first:last] = out.to(output.dtype)


def _gathered(cache: torch.Tensor, pages: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The first seq_len tokens stored in ``pages`` of ``cache``: [seq_len, kv_heads, head_size]
    in float32."""
    tokens = cache[pages].reshape(-1, cache.shape[2], cache.shape[3])
    return tokens[:seq_len].to(torch.float32)


def _visible(
    query_len: int, seq_len: int, causal: bool, window_left: int, device: torch.device
) -> torch.Tensor:
    """[query_len, seq_len]: which keys each query sees. The queries are the sequence's last
    ``query_len`` positions."""
    query_pos = torch.arange(seq_len - query_len, seq_len, device=device)[:, None]
    key_pos = torch.arange(seq_len, device=device)[None, :]
    distance = query_pos - key_pos
    visible = torch.ones(query_len, seq_len, dtype=torch.bool, device=device)
    if causal:
        visible &= distance >= 0
    if window_left >= 0:
        visible &= distance <= window_left
        if not causal:
            visible &= distance >= -window_left
    return visible
