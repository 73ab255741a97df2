"""The portable attention's eager decode path on a GPU: vLLM's ``unified_attention`` launches
replayed (`vllm_fl.kernels.replay`) and FlagGems' cache write through its bound launch give, call
after call with new tensors of one layout, exactly what vLLM's wrapper and the reference give.

Marked ``gpu``: needs vLLM's CUDA build and FlagGems.
"""

from __future__ import annotations

import pytest
import torch

from vllm_fl.backends.reference.impl import attention as reference
from vllm_fl.kernels import attention

pytestmark = pytest.mark.gpu("vllm", "flag_gems")

HEADS, KV_HEADS, HEAD_SIZE, BLOCK = 32, 8, 128, 16


def _caches(blocks: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM 0.24's: the halves of one [blocks, 2, block_size, kv_heads, head_size] tensor."""
    combined = torch.randn(blocks, 2, BLOCK, KV_HEADS, HEAD_SIZE, device="cuda")
    return combined.bfloat16().unbind(1)


def _decode(seqs: int, key_cache: torch.Tensor) -> dict:
    lens = torch.randint(1, 8 * BLOCK, (seqs,), dtype=torch.int32, device="cuda")
    query = torch.randn(seqs, HEADS, HEAD_SIZE, device="cuda").bfloat16()
    return dict(
        query=query,
        key_cache=key_cache,
        value_cache=None,
        output=torch.empty_like(query),
        block_table=torch.randint(0, key_cache.shape[0], (seqs, 8), device="cuda").int(),
        seq_lens=lens,
        query_start_loc=torch.arange(seqs + 1, dtype=torch.int32, device="cuda"),
        max_query_len=1,
        max_seq_len=int(lens.max()),
        softmax_scale=HEAD_SIZE**-0.5,
        causal=True,
        window_left=-1,
        logits_soft_cap=0.0,
        sinks=None,
    )


@pytest.mark.parametrize("seqs", [2, 40], ids=["3d-kernel", "2d-kernel"])
def test_replayed_decode_launches_write_what_vllms_wrapper_writes(monkeypatch, seqs):
    monkeypatch.setattr(attention, "_decode_replays", {})
    monkeypatch.setattr(attention, "_replaying", True)
    key_cache, value_cache = _caches()
    for _ in range(3):
        batch = {**_decode(seqs, key_cache), "value_cache": value_cache}
        attention.unified_attention(**batch)
        monkeypatch.setattr(attention, "_replaying", False)  # vLLM's wrapper, for the expected
        expected = {**batch, "output": torch.empty_like(batch["output"])}
        attention.unified_attention(**expected)
        monkeypatch.setattr(attention, "_replaying", True)
        assert torch.equal(batch["output"], expected["output"])
    (replayed,) = attention._decode_replays.values()
    assert replayed is not None and attention._replaying


def test_bound_cache_writes_store_every_call_as_the_reference_does():
    key_cache, value_cache = _caches(blocks=8)
    expected = [key_cache.clone(), value_cache.clone()]
    for _ in range(3):
        key = torch.randn(5, KV_HEADS, HEAD_SIZE, device="cuda").bfloat16()
        value = torch.randn(5, KV_HEADS, HEAD_SIZE, device="cuda").bfloat16()
        slots = torch.randperm(8 * BLOCK, device="cuda")[:5]
        reference.reshape_and_cache_flash(key, value, *expected, slots)
        attention.reshape_and_cache_flash(key, value, key_cache, value_cache, slots)
        assert torch.equal(key_cache, expected[0]) and torch.equal(value_cache, expected[1])
