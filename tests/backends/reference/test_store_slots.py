"""The reference cache write (``store_slots``, behind ``reshape_and_cache_flash`` and
``concat_and_cache_mla``) stores each mapped token in its slot and nothing for slot -1, computed
without reading the mapping back to the host."""

from __future__ import annotations

import pytest
import torch

from vllm_fl.backends.reference.impl.attention import store_slots

BLOCKS, BLOCK_SIZE, ENTRY = 6, 4, (2, 3)


def _stored_one_by_one(cache: torch.Tensor, slots: list[int], entries: torch.Tensor):
    expected = cache.clone()
    for token, slot in enumerate(slots):
        if slot >= 0:
            expected[slot // BLOCK_SIZE, slot % BLOCK_SIZE] = entries[token].to(cache.dtype)
    return expected


@pytest.mark.parametrize(
    "slots",
    [
        [5, 0, 23, 7],  # every token stored, slot 0 among them
        [-1, 9, -1, 0, 12],  # skipped tokens before and after stored ones
        [-1, -1, -1],  # nothing stored: the cache stays as it was
        [3],
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_each_mapped_token_lands_in_its_slot_and_nothing_else_changes(slots, dtype):
    gen = torch.Generator().manual_seed(len(slots))
    cache = torch.randn(BLOCKS, BLOCK_SIZE, *ENTRY, generator=gen).to(dtype)
    entries = torch.randn(len(slots), *ENTRY, generator=gen)  # float32: stored in the cache's dtype
    expected = _stored_one_by_one(cache, slots, entries)
    store_slots(cache, torch.tensor(slots, dtype=torch.int32), entries)
    assert torch.equal(cache, expected)


def test_an_empty_mapping_stores_nothing():
    cache = torch.randn(BLOCKS, BLOCK_SIZE, *ENTRY)
    before = cache.clone()
    store_slots(cache, torch.empty(0, dtype=torch.int64), torch.empty(0, *ENTRY))
    assert torch.equal(cache, before)
