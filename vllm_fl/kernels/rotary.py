"""Rotary embedding: this library's heads-spread kernel (``rotary_kernels``) through launch plans,
FlagGems' ``apply_rotary_pos_emb`` for layouts that kernel does not take.

Both functions take vLLM's layer state as arguments: ``cos_sin_cache`` [max_positions,
rotary_dim] (cos halves, then sin halves), ``head_size``, ``rotary_dim`` (vLLM's partial rotary
rotates the first ``rotary_dim`` features of each head) and ``is_neox_style``. The cos/sin
halves of each cache are cast to the query's dtype (as vLLM casts it) once per cache, not per
call.

``rotary_embedding`` writes new tensors, in one launch of the own kernel where it applies.
``rotary_embedding_inplace`` (the eager variant) rotates query and key in their own storage, as
vLLM's kernel does: FlagGems' own kernels give each token one program that loops over its heads,
slower than vLLM's kernel at decode sizes, so the own kernel runs there too; layouts it does not
take go through ``apply_rotary_pos_emb(..., inplace=True)`` where the release has the flag, and
the functional path otherwise (FlagGems needs a key: without one, the functional path borrows a
head of q, which must not be rotated in place; and with rotary_dim < head_size).

``flag_gems.apply_rotary_pos_emb(q, k, cos, sin, position_ids, rotary_interleaved)`` takes q
[tokens, heads, dim], k [tokens, heads_k, dim], cos/sin [max_pos, dim // 2] (last dim
contiguous, any row stride) and per-token positions, and by default writes new tensors (releases
that have an ``inplace`` flag default it to False; older ones have none, so it is not passed).
``rotary_interleaved`` is GPT-J style, i.e. ``not is_neox_style``. It computes in float32 and
rounds once.
"""

from __future__ import annotations

import functools
import inspect
from types import ModuleType

import torch

from vllm_fl.kernels import launch
from vllm_fl.kernels.memo import TensorMemo

_rope_inplace: tuple[object, bool] = (None, False)  # (apply_rotary_pos_emb, has ``inplace``)


@functools.cache
def _own() -> ModuleType:
    """``rotary_kernels``, imported on first use: its kernel needs Triton."""
    from vllm_fl.kernels import rotary_kernels

    return rotary_kernels


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


_halves = TensorMemo()  # (cos, sin) per cos/sin cache tensor, dtype, device and rotary_dim


def _cos_sin(cache: torch.Tensor, dtype: torch.dtype, device: torch.device, rotary_dim: int):
    """The cos and sin halves of a layer's cache, in the query's dtype (as vLLM casts it)."""

    def halves():
        cast = cache.to(device, dtype=dtype)
        return cast[:, : rotary_dim // 2], cast[:, rotary_dim // 2 : rotary_dim]

    return _halves.get(cache, (dtype, device, rotary_dim), halves)


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox_style: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rotate query and key into new tensors: the own kernel writes both in one launch; layouts
    it does not take go through ``flag_gems.apply_rotary_pos_emb``."""
    rope = (cos_sin_cache, head_size, rotary_dim, is_neox_style)
    if launch.on_current_gpu(query):
        query_out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
        key_out = (
            None if key is None else torch.empty(key.shape, dtype=key.dtype, device=key.device)
        )
        if _own_kernel(rope, positions, query, key, query_out, key_out):
            return query_out, key_out
    return _through_flag_gems(rope, positions, query, key)


def rotary_embedding_inplace(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox_style: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Query and key rotated in their own storage by the own kernel (a token's heads over
    several programs); layouts it does not take go through FlagGems' in-place rotary. Returns
    (query, key), or new tensors where FlagGems can only rotate out of place."""
    rope = (cos_sin_cache, head_size, rotary_dim, is_neox_style)
    if launch.on_current_gpu(query) and _own_kernel(rope, positions, query, key):
        return query, key
    return _inplace_through_flag_gems(rope, positions, query, key)


def _own_kernel(rope, positions, query, key, query_out=None, key_out=None) -> bool:
    """Launch the own rotary kernel (into ``query_out``/``key_out``, or in place); False,
    launching nothing, for a layout it does not take.

    A layer calls with the same layout step after step: the launch is bound to the call's
    signature (everything ``launch_of`` derives it from, less the tensors themselves), and
    later calls with that signature only check alignment and launch, passing the tensors'
    data pointers."""
    cache, head_size, rotary_dim, is_neox_style = rope
    cos, sin = _cos_sin(cache, query.dtype, query.device, rotary_dim)
    k = query if key is None else key
    q_out = query if query_out is None else query_out
    k_out = k if query_out is None else (q_out if key_out is None else key_out)
    tensors = (query, k, q_out, k_out, cos, sin, positions)
    found = launch.pointers(*tensors)
    if found is None:
        return False
    signature = (
        query.shape,
        query.stride(),
        key is None,
        k.shape,
        k.stride(),
        query_out is None,
        positions.shape,
        positions.stride(),
        cos.stride(),
        sin.stride(),
        query.dtype,
        k.dtype,
        positions.dtype,
        query.get_device(),
        head_size,
        rotary_dim,
        is_neox_style,
    )
    own = _own()
    plans = launch.plans_for(own.rotary_kernel)
    if plans.launch_bound(signature, found):
        return True
    planned = own.launch_of(
        positions, query, key, cos, sin, head_size, rotary_dim, is_neox_style, query_out, key_out
    )
    if planned is None:
        return False
    plans.run(planned, signature, dynamic=len(tensors))
    return True


def _through_flag_gems(
    rope, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``flag_gems.apply_rotary_pos_emb`` into new tensors."""
    import flag_gems

    cache, head_size, rotary_dim, is_neox_style = rope
    cos, sin = _cos_sin(cache, query.dtype, query.device, rotary_dim)
    positions = positions.flatten()
    num_tokens = positions.shape[0]
    q = query.view(num_tokens, -1, head_size)
    # FlagGems requires a key; without one, rotate a one-head slice of q and drop it.
    k = q[:, :1] if key is None else key.view(num_tokens, -1, head_size)
    q_rot, k_rot = flag_gems.apply_rotary_pos_emb(
        q[..., :rotary_dim], k[..., :rotary_dim], cos, sin, positions, not is_neox_style
    )
    if rotary_dim < head_size:
        q_rot = torch.cat((q_rot, q[..., rotary_dim:]), dim=-1)
        k_rot = torch.cat((k_rot, k[..., rotary_dim:]), dim=-1)
    query_out = q_rot.view(query.shape)
    key_out = None if key is None else k_rot.view(key.shape)
    return query_out, key_out


def _inplace_through_flag_gems(rope, positions, query, key):
    """``apply_rotary_pos_emb(..., inplace=True)`` where the release has it, else functional."""
    import flag_gems

    cache, head_size, rotary_dim, is_neox_style = rope
    apply = flag_gems.apply_rotary_pos_emb
    if key is None or rotary_dim != head_size or not _has_inplace(apply):
        return _through_flag_gems(rope, positions, query, key)
    cos, sin = _cos_sin(cache, query.dtype, query.device, head_size)
    positions = positions.flatten()
    num_tokens = positions.shape[0]
    q = query.view(num_tokens, -1, head_size)
    k = key.view(num_tokens, -1, head_size)
    apply(q, k, cos, sin, positions, not is_neox_style, inplace=True)
    return query, key
