"""Ascend vendor rotary embedding: ``torch_npu._npu_rotary_embedding``, as vllm-ascend uses it.

It has vLLM's CUDA kernel's signature ``(positions, query, key, head_size, cos_sin_cache,
is_neox)`` and rotates query and key in place, so it runs on contiguous copies.
"""

import torch


def rotary_embedding(
    self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rotate copies of query and key in place; without a key, a one-head scratch key."""
    import torch_npu

    cache = self.cos_sin_cache.to(query.device, dtype=query.dtype)
    query_out = query.clone(memory_format=torch.contiguous_format)
    if key is None:
        num_tokens = positions.numel()
        scratch = query.reshape(num_tokens, -1)[:, : self.head_size]
        scratch = scratch.clone(memory_format=torch.contiguous_format)
        key_out = None
    else:
        scratch = key_out = key.clone(memory_format=torch.contiguous_format)
    torch_npu._npu_rotary_embedding(
        positions, query_out, scratch, self.head_size, cache, self.is_neox_style
    )
    return query_out, key_out
