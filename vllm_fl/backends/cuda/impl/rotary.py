"""CUDA vendor rotary embedding: ``vllm._custom_ops.rotary_embedding``.

The kernel rotates query and key in place (key may be None), so the functional
``rotary_embedding`` runs it on copies; ``rotary_embedding_inplace`` (the op's eager variant,
used outside torch.compile) runs it on query and key themselves, as vLLM's
``RotaryEmbedding.forward_cuda`` does. It handles NeoX and GPT-J styles and
rotary_dim < head_size (read from the cache's width).
"""

import torch

_custom_ops = None


def _ops():
    """``vllm._custom_ops``, imported on first use (a ``from`` import per call costs ~0.2 us)."""
    global _custom_ops
    ops = _custom_ops
    if ops is None:
        from vllm import _custom_ops as ops

        _custom_ops = ops
    return ops


def rotary_embedding(
    self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``ops.rotary_embedding(positions, q, k, head_size, cache, is_neox)`` on clones of q, k."""
    cache = self.cos_sin_cache.to(query.device, dtype=query.dtype)
    query_out = query.clone()
    key_out = None if key is None else key.clone()
    _ops().rotary_embedding(
        positions, query_out, key_out, self.head_size, cache, self.is_neox_style
    )
    return query_out, key_out


def rotary_embedding_inplace(
    self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The eager variant: the kernel rotates query and key (None allowed) in place; returns them."""
    cache = self.cos_sin_cache.to(query.device, dtype=query.dtype)
    _ops().rotary_embedding(positions, query, key, self.head_size, cache, self.is_neox_style)
    return query, key
