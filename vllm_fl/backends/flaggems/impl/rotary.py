"""FlagGems rotary embedding: vLLM's RotaryEmbedding layers mapped to ``vllm_fl.kernels.rotary``.

``rotary_embedding`` writes new tensors; ``rotary_embedding_inplace`` (the op's eager variant,
used outside torch.compile) rotates query and key in their own storage, as vLLM's kernel does.
"""

import torch

from vllm_fl.kernels import rotary


def rotary_embedding(
    self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rotate query and key into new tensors; the cos/sin cache is cast to the query's dtype,
    as in vLLM."""
    return rotary.rotary_embedding(
        positions,
        query,
        key,
        self.cos_sin_cache,
        self.head_size,
        self.rotary_dim,
        self.is_neox_style,
    )


def rotary_embedding_inplace(
    self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The eager variant: query and key rotated in their own storage."""
    return rotary.rotary_embedding_inplace(
        positions,
        query,
        key,
        self.cos_sin_cache,
        self.head_size,
        self.rotary_dim,
        self.is_neox_style,
    )
