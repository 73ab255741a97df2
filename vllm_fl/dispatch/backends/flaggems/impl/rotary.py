"""FlagGems rotary embedding: ``flag_gems.apply_rotary_pos_emb``.

``apply_rotary_pos_emb(q, k, cos, sin, position_ids, rotary_interleaved)`` takes
q [tokens, heads, dim], k [tokens, heads_k, dim], cos/sin [max_pos, dim // 2] (last dim
contiguous, any row stride) and per-token positions, and by default writes new tensors
(releases that have an ``inplace`` flag default it to False; older ones have none, so it is
not passed). ``rotary_interleaved`` is GPT-J style, i.e. ``not is_neox_style``. It computes in
float32 and rounds once.
"""

import torch


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
