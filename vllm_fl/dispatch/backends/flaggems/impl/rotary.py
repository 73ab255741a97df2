"""FlagGems rotary embedding: ``flag_gems.apply_rotary_pos_emb``.

``apply_rotary_pos_emb(q, k, cos, sin, position_ids, rotary_interleaved)`` takes
q [tokens, heads, dim], k [tokens, heads_k, dim], cos/sin [max_pos, dim // 2] (last dim
contiguous, any row stride) and per-token positions, and by default writes new tensors
(releases that have an ``inplace`` flag default it to False; older ones have none, so it is
not passed). ``rotary_interleaved`` is GPT-J style, i.e. ``not is_neox_style``. It computes in
float32 and rounds once.

``rotary_embedding_inplace`` (the op's eager variant, used outside torch.compile) passes
``inplace=True`` where the release has the flag, rotating query and key in their own storage
as vLLM's kernel does. It takes the functional path without a key (FlagGems needs one: the
functional impl borrows a head of q, which must not be rotated in place), with
rotary_dim < head_size, and on releases without the flag.
"""

import inspect

import torch

_rope_inplace: tuple[object, bool] = (None, False)  # (apply_rotary_pos_emb, has ``inplace``)


def _has_inplace(rope) -> bool:
    """Whether this ``apply_rotary_pos_emb`` takes ``inplace`` (inspected once per function)."""
    global _rope_inplace
    cached, answer = _rope_inplace
    if cached is not rope:
        try:
            answer = "inplace" in inspect.signature(rope).parameters
        except (TypeError, ValueError):
            answer = False
        _rope_inplace = (rope, answer)
    return answer


def rotary_embedding(
    self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rotate query and key; the cos/sin cache is cast to the query's dtype, as in vLLM."""
    import flag_gems

    head_size, rotary_dim = self.head_size, self.rotary_dim
    cache = self.cos_sin_cache.to(query.device, dtype=query.dtype)
    cos, sin = cache[:, : rotary_dim // 2], cache[:, rotary_dim // 2 : rotary_dim]
    positions = positions.flatten()
    num_tokens = positions.shape[0]
    q = query.view(num_tokens, -1, head_size)
    # FlagGems requires a key; without one, rotate a one-head slice of q and drop it.
    k = q[:, :1] if key is None else key.view(num_tokens, -1, head_size)
    q_rot, k_rot = flag_gems.apply_rotary_pos_emb(
        q[..., :rotary_dim], k[..., :rotary_dim], cos, sin, positions, not self.is_neox_style
    )
    if rotary_dim < head_size:
        q_rot = torch.cat((q_rot, q[..., rotary_dim:]), dim=-1)
        k_rot = torch.cat((k_rot, k[..., rotary_dim:]), dim=-1)
    query_out = q_rot.view(query.shape)
    key_out = None if key is None else k_rot.view(key.shape)
    return query_out, key_out


def rotary_embedding_inplace(
    self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The eager variant: ``apply_rotary_pos_emb(..., inplace=True)`` on query and key."""
    import flag_gems

    rope = flag_gems.apply_rotary_pos_emb
    head_size = self.head_size
    if key is None or self.rotary_dim != head_size or not _has_inplace(rope):
        return rotary_embedding(self, positions, query, key)
    cache = self.cos_sin_cache.to(query.device, dtype=query.dtype)
    cos, sin = cache[:, : head_size // 2], cache[:, head_size // 2 : head_size]
    positions = positions.flatten()
    num_tokens = positions.shape[0]
    q = query.view(num_tokens, -1, head_size)
    k = key.view(num_tokens, -1, head_size)
    q_rot, k_rot = rope(q, k, cos, sin, positions, not self.is_neox_style, inplace=True)
    return q_rot.view(query.shape), k_rot.view(key.shape)
