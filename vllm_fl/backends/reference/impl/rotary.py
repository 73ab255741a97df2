"""Reference rotary embedding: vLLM's ``RotaryEmbedding.forward_native`` (``forward_static``
with ``ApplyRotaryEmb.forward_static``), computed in the query's dtype."""

import torch


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    """Rotate x [tokens, heads, rotary_dim] by cos/sin [tokens, rotary_dim // 2]."""
    cos = cos.unsqueeze(-2).to(x.dtype)
    sin = sin.unsqueeze(-2).to(x.dtype)
    if is_neox:
        x1, x2 = torch.chunk(x, 2, dim=-1)
    else:
        x1, x2 = x[..., ::2], x[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    if is_neox:
        return torch.cat((o1, o2), dim=-1)
    return torch.stack((o1, o2), dim=-1).flatten(-2)


def _apply(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    num_tokens: int,
    head_size: int,
    rotary_dim: int,
    is_neox: bool,
) -> torch.Tensor:
    shape = x.shape
    x = x.view(num_tokens, -1, head_size)
    rotated = _rotate(x[..., :rotary_dim], cos, sin, is_neox)
    return torch.cat((rotated, x[..., rotary_dim:]), dim=-1).reshape(shape)


def rotary_embedding(
    self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rotate the first ``rotary_dim`` features of every head of query (and key).

    The cos/sin cache is cast to the query's dtype first, as vLLM does (without storing the
    cast back on the layer: this function changes nothing it is given).
    """
    cos_sin_cache = self.cos_sin_cache.to(query.device, dtype=query.dtype)
    positions = positions.flatten()
    num_tokens = positions.shape[0]
    cos, sin = cos_sin_cache.index_select(0, positions).chunk(2, dim=-1)
    args = (cos, sin, num_tokens, self.head_size, self.rotary_dim, self.is_neox_style)
    query_out = _apply(query, *args)
    key_out = None if key is None else _apply(key, *args)
    return query_out, key_out
