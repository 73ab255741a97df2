"""The reference paged attention, which goes through sequences in padded batches, against its
definition written one sequence at a time (the straightforward loop below): mixed prefills and
decodes, GQA and MQA, sliding windows, soft caps, sinks, bidirectional attention, sequences with
no query, NaN in cache entries no sequence owns, and batches split by the score budget."""

from __future__ import annotations

import math

import pytest
import torch

from vllm_fl.backends.reference.impl import attention


def _one_by_one(
    query,
    key_cache,
    value_cache,
    output,
    block_table,
    seq_lens,
    query_start_loc,
    softmax_scale,
    causal=True,
    window_left=-1,
    logits_soft_cap=0.0,
    sinks=None,
):
    heads, kv_heads = query.shape[1], key_cache.shape[2]
    group, block = heads // kv_heads, key_cache.shape[1]
    starts = query_start_loc.tolist()
    for seq, seq_len in enumerate(seq_lens.tolist()):
        first, last = starts[seq], starts[seq + 1]
        if last == first:
            continue
        pages = block_table[seq, : -(-seq_len // block)].long()

        def gathered(cache):
            tokens = cache[pages].reshape(-1, kv_heads, cache.shape[3])[:seq_len].float()
            return tokens.repeat_interleave(group, dim=1)

        keys, values = gathered(key_cache), gathered(value_cache)
        scores = torch.einsum("qhd,khd->hqk", query[first:last].float(), keys) * softmax_scale
        if logits_soft_cap > 0:
            scores = logits_soft_cap * torch.tanh(scores / logits_soft_cap)
        query_pos = torch.arange(seq_len - (last - first), seq_len)[:, None]
        distance = query_pos - torch.arange(seq_len)[None, :]
        visible = torch.ones_like(distance, dtype=torch.bool)
        if causal:
            visible &= distance >= 0
        if window_left >= 0:
            visible &= distance <= window_left
            if not causal:
                visible &= distance >= -window_left
        scores = scores.masked_fill(~visible, -math.inf)
        if sinks is not None:
            sink = sinks.float().view(heads, 1, 1).expand(-1, last - first, 1)
            probs = torch.softmax(torch.cat([scores, sink], -1), -1)[..., :-1]
        else:
            probs = torch.softmax(scores, -1)
        out = torch.einsum("hqk,khd->qhd", torch.nan_to_num(probs, nan=0.0), values)
        output[first:last] = out.to(output.dtype)


def _case(seed, q_lens, k_lens, heads=8, kv_heads=2, block=16, head_size=32, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    pages = max(-(-k // block) for k in k_lens) + 1
    num_blocks = len(k_lens) * pages + 3
    key_cache = torch.randn(num_blocks, block, kv_heads, head_size, generator=gen).to(dtype)
    value_cache = torch.randn(num_blocks, block, kv_heads, head_size, generator=gen).to(dtype)
    order = torch.randperm(num_blocks, generator=gen)
    block_table = order[: len(k_lens) * pages].view(len(k_lens), pages).to(torch.int32)
    # entries no sequence owns: anything, NaN included, must not reach a result
    for s, k in enumerate(k_lens):
        used = -(-k // block)
        for b in block_table[s, used:].tolist():
            key_cache[b] = float("nan")
            value_cache[b] = float("nan")
        last = block_table[s, used - 1]
        if k % block:
            key_cache[last, k % block :] = float("nan")
            value_cache[last, k % block :] = float("nan")
    starts = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    query = torch.randn(int(starts[-1]), heads, head_size, generator=gen).to(dtype)
    return dict(
        query=query,
        key_cache=key_cache,
        value_cache=value_cache,
        block_table=block_table,
        seq_lens=torch.tensor(k_lens, dtype=torch.int32),
        query_start_loc=starts,
    )


CASES = {
    "prefills-and-decodes": dict(q_lens=[13, 1, 7, 1, 0, 20], k_lens=[45, 20, 7, 64, 9, 20]),
    "decodes": dict(q_lens=[1] * 9, k_lens=[1, 33, 100, 17, 64, 5, 128, 77, 16]),
    "decodes-and-empty-sequences": dict(q_lens=[1, 0, 1, 0, 1], k_lens=[12, 40, 33, 7, 70]),
    "mqa": dict(q_lens=[5, 1, 3], k_lens=[40, 70, 3], kv_heads=1),
    "one-long-prefill": dict(q_lens=[90], k_lens=[130]),
}
OPTIONS = {
    "plain": {},
    "window": dict(window_left=15),
    "bidirectional-window": dict(causal=False, window_left=6),
    "bidirectional": dict(causal=False),
    "soft-cap-and-sinks": dict(logits_soft_cap=20.0, sinks=True),
    "window-without-sink": dict(window_left=0, logits_soft_cap=5.0),
}


@pytest.mark.parametrize("budget", [attention.SCORE_BUDGET, 1], ids=["batched", "one-by-one"])
@pytest.mark.parametrize("options", OPTIONS, ids=str)
@pytest.mark.parametrize("name", CASES, ids=str)
def test_batched_reference_equals_its_definition(monkeypatch, name, options, budget):
    monkeypatch.setattr(attention, "SCORE_BUDGET", budget)
    inputs = _case(sum(map(ord, name + options)), **CASES[name])
    kwargs = dict(OPTIONS[options])
    if kwargs.pop("sinks", False):
        kwargs["sinks"] = torch.randn(inputs["query"].shape[1])
    expected = torch.full_like(inputs["query"], 7.0)
    actual = torch.full_like(inputs["query"], 7.0)
    _one_by_one(output=expected, softmax_scale=0.125, **inputs, **kwargs)
    q_lens = inputs["query_start_loc"].diff()
    attention.paged_attention(
        output=actual,
        max_query_len=int(q_lens.max()),
        max_seq_len=int(inputs["seq_lens"].max()),
        softmax_scale=0.125,
        **inputs,
        **kwargs,
    )
    assert not actual.isnan().any()
    torch.testing.assert_close(actual, expected, atol=2e-6, rtol=2e-6)


def test_sequences_are_batched_within_the_score_budget(monkeypatch):
    starts = [0, 1, 2, 3, 103, 104]
    lens = [50, 60, 70, 200, 80]
    # four heads: decodes of up to 70 keys fit 3 at a time in 1000 scores, the prefill goes alone
    monkeypatch.setattr(attention, "SCORE_BUDGET", 1000)
    assert attention._batches([0, 1, 2, 3, 4], starts, lens, 4) == [[0, 1, 2], [3], [4]]


def test_decodes_read_nothing_back_and_leave_padding_rows(monkeypatch):
    """A decode batch (max_query_len 1) is attended without reading a length back to the host
    (so bring-up mode can capture it in a CUDA graph), even with max_seq_len above the longest
    sequence; query rows past the last sequence's (padding) keep what output held."""
    inputs = _case(11, q_lens=[1, 1, 0, 1], k_lens=[30, 5, 9, 64])
    padded = torch.cat([inputs["query"], torch.randn(3, *inputs["query"].shape[1:])])
    expected = torch.full_like(padded, 7.0)
    _one_by_one(output=expected, softmax_scale=0.125, **{**inputs, "query": padded})

    def refuse(*args, **kwargs):
        raise AssertionError("the decode path read a tensor back to the host")

    for name in ("tolist", "item", "__int__", "__bool__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    actual = torch.full_like(padded, 7.0)
    attention.paged_attention(
        output=actual,
        max_query_len=1,
        max_seq_len=100,
        softmax_scale=0.125,
        **{**inputs, "query": padded},
    )
    monkeypatch.undo()
    torch.testing.assert_close(actual, expected, atol=2e-6, rtol=2e-6)
    assert (actual[-3:] == 7.0).all()
