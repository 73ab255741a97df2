"""The reference attention ops against vLLM's CPU attention (vLLM's CPU build, its C++ kernels).

vLLM's CPU backend keeps its cache in a layout of its own ([num_blocks, kv_heads, block_size,
head_size] per half); each test stores the same keys and values into both caches through each
side's cache write (``cpu_attn_reshape_and_cache`` / the reference ``reshape_and_cache_flash``,
the same slot mapping, derived from a shuffled block table as vLLM's scheduler derives it), then
attends with each side's kernel (``cpu_attention_with_kv_cache`` / the reference
``paged_attention``) and compares the outputs: prefills with and without context mixed with
decodes, GQA and MQA, a sliding window (vLLM's layer counts the query in its window: the
reference's ``window_left`` is one less), soft-capped logits, sinks, bidirectional prefills.
"""

from __future__ import annotations

import pytest
import torch

from vllm_fl.backends.reference.impl import attention as reference

BLOCK_SIZE = 32


@pytest.fixture(autouse=True)
def _vllm_cpu_kernels():
    from vllm_fl import compat

    if not compat.is_cpu_build():
        pytest.skip("compares with vLLM's CPU attention kernels (vLLM's CPU build)")
    from vllm.platforms import current_platform

    current_platform.import_kernels()


def _batch(seq_lens, query_lens, generator):
    """block_table [seqs, blocks] (a shuffled set of distinct blocks), query_start_loc, and the
    slot of every query token (block_table[seq][pos // BLOCK_SIZE] * BLOCK_SIZE + pos %
    BLOCK_SIZE, its position counted from the sequence's start)."""
    width = max(-(-s // BLOCK_SIZE) for s in seq_lens)
    blocks = torch.randperm(len(seq_lens) * width, generator=generator).to(torch.int32)
    block_table = blocks.view(len(seq_lens), width)
    starts = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
    slots = []
    for seq, (seq_len, query_len) in enumerate(zip(seq_lens, query_lens)):
        for pos in range(seq_len - query_len, seq_len):
            slots.append(int(block_table[seq, pos // BLOCK_SIZE]) * BLOCK_SIZE + pos % BLOCK_SIZE)
    return block_table, starts, torch.tensor(slots, dtype=torch.int64), len(blocks)


def _context_slots(seq_lens, query_lens, block_table):
    """The slots of every sequence's context (the positions before its queries)."""
    slots = []
    for seq, (seq_len, query_len) in enumerate(zip(seq_lens, query_lens)):
        for pos in range(seq_len - query_len):
            slots.append(int(block_table[seq, pos // BLOCK_SIZE]) * BLOCK_SIZE + pos % BLOCK_SIZE)
    return torch.tensor(slots, dtype=torch.int64)


CASES = {
    "mixed-gqa": dict(seq_lens=[45, 20, 7, 64], query_lens=[13, 1, 7, 1], heads=8, kv_heads=2),
    "decodes-mqa": dict(
        seq_lens=[1, 33, 100, 17], query_lens=[1, 1, 1, 1], heads=8, kv_heads=1, head_size=128
    ),
    "window-softcap-sinks": dict(
        seq_lens=[70, 90, 9],
        query_lens=[20, 1, 9],
        heads=4,
        kv_heads=2,
        window=16,
        softcap=20.0,
        sinks=True,
    ),
    "bidirectional": dict(
        seq_lens=[24, 10], query_lens=[24, 10], heads=2, kv_heads=2, head_size=32, causal=False
    ),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("name", list(CASES))
def test_reference_matches_vllms_cpu_attention(name, dtype):
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    spec = {"head_size": 64, "window": -1, "softcap": 0.0, "sinks": False, "causal": True}
    spec.update(CASES[name])
    seq_lens, query_lens = spec["seq_lens"], spec["query_lens"]
    heads, kv_heads, head_size = spec["heads"], spec["kv_heads"], spec["head_size"]
    generator = torch.Generator().manual_seed(0)
    block_table, starts, slots, num_blocks = _batch(seq_lens, query_lens, generator)
    context = _context_slots(seq_lens, query_lens, block_table)
    tokens = int(starts[-1])
    scale = head_size**-0.5

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(dtype)

    query = randn(tokens, heads, head_size)
    new_k, new_v = randn(tokens, kv_heads, head_size), randn(tokens, kv_heads, head_size)
    old_k, old_v = randn(len(context), kv_heads, head_size), randn(
        len(context), kv_heads, head_size
    )
    sinks = randn(heads).float() if spec["sinks"] else None
    seq_lens_t = torch.tensor(seq_lens, dtype=torch.int32)

    # vLLM's CPU attention, in its own layout
    isa = _get_attn_isa(dtype, BLOCK_SIZE, head_size)
    cpu_cache = torch.zeros(num_blocks, kv_heads, 2 * BLOCK_SIZE, head_size, dtype=dtype)
    cpu_k, cpu_v = cpu_cache.chunk(2, dim=2)
    for k, v, s in ((old_k, old_v, context), (new_k, new_v, slots)):
        ops.cpu_attn_reshape_and_cache(k, v, cpu_k, cpu_v, s, isa)
    metadata = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=len(seq_lens),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_size,
        seq_lens=seq_lens_t,
        dtype=dtype,
        query_start_loc=starts,
        causal=spec["causal"],
        sliding_window_size=spec["window"],
        isa=isa,
        enable_kv_split=False,
    )
    expected = torch.empty(tokens, heads, head_size, dtype=dtype)
    ops.cpu_attention_with_kv_cache(
        query=query,
        key_cache=cpu_k,
        value_cache=cpu_v,
        output=expected,
        query_start_loc=starts,
        seq_lens=seq_lens_t,
        scale=scale,
        causal=spec["causal"],
        alibi_slopes=None,
        sliding_window=spec["window"],
        block_table=block_table,
        softcap=spec["softcap"],
        scheduler_metadata=metadata,
        s_aux=sinks,
    )

    # the reference, in vLLM's paged layout
    key_cache = torch.zeros(num_blocks, BLOCK_SIZE, kv_heads, head_size, dtype=dtype)
    value_cache = torch.zeros_like(key_cache)
    for k, v, s in ((old_k, old_v, context), (new_k, new_v, slots)):
        reference.reshape_and_cache_flash(k, v, key_cache, value_cache, s)
    actual = torch.full((tokens, heads, head_size), float("nan"), dtype=dtype)
    reference.paged_attention(
        query,
        key_cache,
        value_cache,
        actual,
        block_table,
        seq_lens_t,
        starts,
        max(query_lens),
        max(seq_lens),
        scale,
        causal=spec["causal"],
        window_left=spec["window"] - 1 if spec["window"] > 0 else -1,
        logits_soft_cap=spec["softcap"],
        sinks=sinks,
    )
    tolerance = (
        {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    )
    torch.testing.assert_close(actual, expected, **tolerance)
