"""CUDA vendor rotary embedding: ``vllm._custom_ops.rotary_embedding``.

The kernel rotates query and key in place, so it runs on copies (the impl is functional).
It handles NeoX and GPT-J styles and rotary_dim < head_size (read from the cache's width).
"""

import torch


def rotary_embedding(
    self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``ops.rotary_embedding(positions, q, k, head_size, cache, is_neox)`` on clones of q, k."""
    from vllm import _custom_ops as ops

    cache = self.cos_sin_cache.to(query.device, dtype=query.dtype)
    query_out = query.clone()
    key_out = None if key is None else key.clone()
    ops.rotary_embedding(positions, query_out, key_out, self.head_size, cache, self.is_neox_style)
    return query_out, key_out
