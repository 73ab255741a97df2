"""Reference attention over vLLM's paged KV cache in plain PyTorch: the ground truth for parity,
and what the plugin's attention backend runs on the CPU.

The caches are [num_blocks, block_size, kv_heads, head_size] views in whatever strides vLLM
hands them (vLLM 0.24 unbinds a [num_blocks, 2, ...] tensor, 0.32 splits the last dimension of
[num_blocks, kv_heads, block_size, 2 * head_size]); indexing writes and reads through any of
them. Scores and the softmax are computed in float32 and each output rounded once.

``varlen_attention`` is attention without a cache (encoder-only layers): each sequence of the
step over its own keys and values.
"""

from dataclasses import dataclass

import torch

from vllm_fl.attention import PLUGIN_BACKEND
from vllm_fl.attention.mla import MLA_BACKEND


def attention_backend(use_mla: bool = False) -> str:
    """The plugin's attention backend, its MLA backend for MLA models (their ops then run on
    the dispatch)."""
    return MLA_BACKEND if use_mla else PLUGIN_BACKEND


def store_slots(cache: torch.Tensor, slot_mapping: torch.Tensor, entries: torch.Tensor) -> None:
    """Index assignment of token i's entry ``entries[i]`` into the (block, offset) of its slot
    ``slot_mapping[i]`` of a paged ``cache`` [blocks, block_size, *entry]; a token with slot -1
    stores nothing.

    Nothing is read back to the host (bring-up mode records the check of a cache write as a CUDA
    graph): instead of selecting the stored tokens with a mask, a token with slot -1 writes the
    first stored token's entry into that token's slot, so the writes that land on one slot all
    agree; where no token is stored, every token writes slot 0 with what it holds."""
    if slot_mapping.numel() == 0:
        return
    slots = slot_mapping.to(torch.int64)
    stored = slots >= 0
    # the first stored token, or 0 if none (index_select: a 0-d tensor index reads it back)
    first = torch.argmax(stored.to(torch.int32)).view(1)
    any_stored = stored.index_select(0, first)
    target = torch.where(stored, slots, torch.where(any_stored, slots.index_select(0, first), 0))
    block_size = cache.shape[1]
    blocks, offsets = target // block_size, target % block_size
    entries = entries.to(cache.dtype)
    keep_first = any_stored.view(1, *([1] * (entries.dim() - 1)))
    fill = torch.where(keep_first, entries.index_select(0, first), cache[0, 0])
    keep = stored.view(-1, *([1] * (entries.dim() - 1)))
    cache[blocks, offsets] = torch.where(keep, entries, fill)


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
    store_slots(key_cache, slot_mapping, key[:tokens])
    store_slots(value_cache, slot_mapping, value[:tokens])


#: float32 scores one batch of sequences may hold at most (the sequences are taken in batches so
#: that decodes of a whole batch go at once while a long prefill still goes alone)
SCORE_BUDGET = 1 << 25


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
    """Each sequence's pages gathered in order, then masked softmax attention in float32;
    sequences go in batches, padded to the batch's longest query and context (padding masked,
    never read into a result). A batch of decodes (``max_query_len`` <= 1) is padded to
    ``max_seq_len`` instead and never reads the lengths back to the host, so that it can be
    captured in a CUDA graph (bring-up mode replays its checks that way)."""
    num_heads, num_kv_heads = query.shape[1], key_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError(
            f"paged_attention: query has {num_heads} heads, not a multiple of the caches' "
            f"{num_kv_heads} kv heads"
        )
    mask = _Masks(causal, window_left, logits_soft_cap, sinks, softmax_scale)
    if max_query_len <= 1:
        _attend_decodes(
            query,
            key_cache,
            value_cache,
            output,
            block_table,
            seq_lens,
            query_start_loc,
            max_seq_len,
            mask,
        )
        return
    starts = query_start_loc.tolist()
    lens = seq_lens.tolist()
    seqs = [s for s in range(len(lens)) if starts[s + 1] > starts[s]]
    for batch in _batches(seqs, starts, lens, num_heads):
        _attend_sequences(
            query, key_cache, value_cache, output, block_table, batch, starts, lens, mask
        )


@dataclass(frozen=True)
class _Masks:
    """What shapes the scores besides the lengths: the op's scalar arguments and sinks."""

    causal: bool
    window_left: int
    logits_soft_cap: float
    sinks: torch.Tensor | None
    softmax_scale: float


def _batches(seqs: list[int], starts: list[int], lens: list[int], heads: int) -> list[list[int]]:
    """Consecutive sequences whose padded scores [batch, heads, query, context] stay within
    ``SCORE_BUDGET`` (a sequence alone may exceed it)."""
    batches: list[list[int]] = []
    batch: list[int] = []
    longest_q = longest_k = 0
    for s in seqs:
        q, k = max(longest_q, starts[s + 1] - starts[s]), max(longest_k, lens[s])
        if batch and (len(batch) + 1) * heads * q * k > SCORE_BUDGET:
            batches.append(batch)
            batch, q, k = [], starts[s + 1] - starts[s], lens[s]
        batch.append(s)
        longest_q, longest_k = q, k
    if batch:
        batches.append(batch)
    return batches


def _attend_sequences(
    query,
    key_cache,
    value_cache,
    output,
    block_table,
    batch: list[int],
    starts: list[int],
    lens: list[int],
    mask: _Masks,
) -> None:
    """Attention of the sequences ``batch``, written into their rows of ``output``."""
    device = query.device
    # the lengths are on the host already: no read-back from the device for the padding
    query_lens = [starts[s + 1] - starts[s] for s in batch]
    key_lens = [lens[s] for s in batch]
    longest_q, longest_k = max(query_lens), max(key_lens)
    q_lens = torch.tensor(query_lens, device=device)
    k_lens = torch.tensor(key_lens, device=device)
    # rows of the padded queries [batch, longest_q]; padding rows read the first row
    j = torch.arange(longest_q, device=device)
    q_valid = j[None, :] < q_lens[:, None]
    first = torch.tensor([starts[s] for s in batch], device=device)
    rows = torch.where(q_valid, first[:, None] + j[None, :], first[:, None])
    out = _attend(
        query,
        key_cache,
        value_cache,
        block_table[batch],
        rows,
        q_valid,
        q_lens,
        k_lens,
        longest_k,
        mask,
    )
    output[rows[q_valid]] = out[q_valid].to(output.dtype)


def _attend_decodes(
    query,
    key_cache,
    value_cache,
    output,
    block_table,
    seq_lens,
    query_start_loc,
    max_seq_len: int,
    mask: _Masks,
) -> None:
    """Attention of a batch where each sequence has at most one query token, by query token:
    token t belongs to the sequence whose rows hold it (a token past the last sequence's rows
    is padding: its row of ``output`` is left as it was). Nothing is read back to the host."""
    tokens, num_heads = query.shape[0], query.shape[1]
    if tokens == 0:
        return
    device = query.device
    num_seqs = seq_lens.shape[0]
    if num_seqs == 0:
        return
    # each token's sequence: the number of sequences whose rows end at or before it
    token = torch.arange(tokens, device=device, dtype=query_start_loc.dtype)
    seq = torch.searchsorted(query_start_loc[1:].contiguous(), token, right=True)
    valid = seq < num_seqs
    seq = seq.clamp(max=num_seqs - 1)
    ones = torch.ones(tokens, dtype=seq_lens.dtype, device=device)
    # one token a sequence: the query is its last position
    q_valid = valid[:, None]
    # no sequence holds more keys than its row of the block table has room for
    max_seq_len = min(max_seq_len, block_table.shape[1] * key_cache.shape[1])
    per_token = max(1, SCORE_BUDGET // (num_heads * max(max_seq_len, 1)))
    for first in range(0, tokens, per_token):
        last = min(first + per_token, tokens)
        part = slice(first, last)
        rows = token[part, None].to(torch.int64)
        out = _attend(
            query,
            key_cache,
            value_cache,
            block_table[seq[part]],
            rows,
            q_valid[part],
            ones[part],
            seq_lens[seq[part]],
            max_seq_len,
            mask,
        )
        done = out[:, 0].to(output.dtype)
        output[part] = torch.where(valid[part, None, None], done, output[part])


def _attend(
    query,
    key_cache,
    value_cache,
    pages_of,
    rows,
    q_valid,
    q_lens,
    k_lens,
    longest_k: int,
    mask: _Masks,
) -> torch.Tensor:
    """Padded attention [batch, longest_q, heads, head_size] (float32) of the queries ``rows``
    [batch, longest_q] (``q_valid`` marks the real ones; each sequence's queries are its last
    ``q_lens`` positions) over the first ``k_lens`` cache entries of each sequence, whose pages
    are ``pages_of`` [batch, pages]."""
    device = query.device
    num_heads, head_size = query.shape[1], query.shape[2]
    num_kv_heads, block_size = key_cache.shape[2], key_cache.shape[1]
    group = num_heads // num_kv_heads
    size, longest_q = rows.shape
    j = torch.arange(longest_q, device=device)
    q = query[rows].to(torch.float32).view(size, longest_q, num_kv_heads, group, head_size)
    # each sequence's first longest_k cache entries; entries past its length are masked out
    pages_used = -(-longest_k // block_size)
    pages = pages_of[:, :pages_used].to(torch.int64).clamp(0, key_cache.shape[0] - 1)
    t = torch.arange(longest_k, device=device)
    k_valid = t[None, :] < k_lens[:, None]

    def gathered(cache: torch.Tensor) -> torch.Tensor:
        tokens = cache[pages].reshape(size, pages_used * block_size, num_kv_heads, head_size)
        tokens = tokens[:, :longest_k].to(torch.float32)
        # a cache entry past a sequence's length may hold anything, NaN included
        return torch.where(k_valid[:, :, None, None], tokens, 0.0)

    keys, values = gathered(key_cache), gathered(value_cache)
    scores = torch.einsum("bqngd,btnd->bngqt", q, keys) * mask.softmax_scale
    scores = scores.reshape(size, num_heads, longest_q, longest_k)
    if mask.logits_soft_cap > 0:
        scores = mask.logits_soft_cap * torch.tanh(scores / mask.logits_soft_cap)
    # the queries are each sequence's last q_len positions
    query_pos = (k_lens - q_lens)[:, None] + j[None, :]
    distance = query_pos[:, :, None] - t[None, None, :]
    visible = k_valid[:, None, :] & q_valid[:, :, None]
    if mask.causal:
        visible &= distance >= 0
    if mask.window_left >= 0:
        visible &= distance <= mask.window_left
        if not mask.causal:
            visible &= distance >= -mask.window_left
    scores = scores.masked_fill(~visible[:, None], float("-inf"))
    if mask.sinks is not None:
        sink = mask.sinks.to(torch.float32).view(1, num_heads, 1, 1).expand(size, -1, longest_q, 1)
        probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    # a query that sees no key (only possible with a window and no sink) attends to nothing
    probs = torch.nan_to_num(probs, nan=0.0)
    probs = probs.view(size, num_kv_heads, group, longest_q, longest_k)
    return torch.einsum("bngqt,btnd->bqngd", probs, values).reshape(
        size, longest_q, num_heads, head_size
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
    """Masked softmax attention of each sequence over its own keys, in float32, one sequence at
    a time (an encoder step's sequences are few and long: no padding to the longest)."""
    num_heads, num_kv_heads = q.shape[1], k.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError(
            f"varlen_attention: q has {num_heads} heads, not a multiple of k's {num_kv_heads}"
        )
    group, head_size = num_heads // num_kv_heads, q.shape[2]
    starts = cu_seqlens.tolist()
    for first, last in zip(starts[:-1], starts[1:]):
        length = last - first
        if length <= 0:
            continue
        # [length, kv_heads, group, head_size]: each kv head's group of query heads together
        queries = q[first:last].to(torch.float32).view(length, num_kv_heads, group, head_size)
        keys = k[first:last].to(torch.float32)
        scores = torch.einsum("qngd,knd->ngqk", queries, keys) * softmax_scale
        if logits_soft_cap > 0:
            scores = logits_soft_cap * torch.tanh(scores / logits_soft_cap)
        pos = torch.arange(length, device=q.device)
        distance = pos[:, None] - pos[None, :]  # query position minus key position
        visible = torch.ones(length, length, dtype=torch.bool, device=q.device)
        if causal:
            visible &= distance >= 0
        if window_left >= 0:
            visible &= distance <= window_left
            if not causal:
                visible &= distance >= -window_left
        probs = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        out = torch.einsum("ngqk,knd->qngd", probs, v[first:last].to(torch.float32))
        output[first:last] = out.reshape(length, num_heads, v.shape[2]).to(output.dtype)
