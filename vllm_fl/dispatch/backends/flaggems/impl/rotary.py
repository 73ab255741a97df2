"""FlagGems rotary embedding: ``flag_gems.apply_rotary_pos_emb``.

``apply_rotary_pos_emb(q, k, cos, sin, position_ids, rotary_interleaved)`` takes
q [tokens, heads, dim], k [tokens, heads_k, dim], cos/sin [max_pos, dim // 2] (last dim
contiguous, any row stride) and per-token positions, and by default writes new tensors
(releases that have an ``inplace`` flag default it to False; older ones have none, so it is
not passed). ``rotary_interleaved`` is GPT-J style, i.e. ``not is_neox_style``. It computes in
float32 and rounds once.

``rotary_embedding`` writes new tensors with the backend's rotary kernel (``rotary_kernel.py``)
in one launch, FlagGems' function for layouts that kernel does not take.
``rotary_embedding_inplace`` (the op's eager variant, used outside torch.compile) rotates
query and key in their own storage, as vLLM's kernel does, with the backend's rotary kernel
(``rotary_kernel.py``), launched through a launch plan (``launch.py``) with the cos/sin halves of
each layer's cache sliced once, not per call: FlagGems' own kernels give each token one program
that loops over its heads, three times slower than vLLM's kernel at decode sizes. Layouts that
kernel does not take go through ``apply_rotary_pos_emb(..., inplace=True)`` where the release has
the flag, and the functional path otherwise (FlagGems needs a key: without one, the functional
impl borrows a head of q, which must not be rotated in place; and with rotary_dim < head_size).
"""

import inspect

import torch

from vllm_fl.dispatch.backends.flaggems import launch
from vllm_fl.dispatch.backends.flaggems.memo import TensorMemo

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


_halves = TensorMemo()  # (cos, sin) per cos/sin cache tensor, dtype, device and rotary_dim


def _cos_sin(cache: torch.Tensor, dtype: torch.dtype, device: torch.device, rotary_dim: int):
    """The cos and sin halves of a layer's cache, in the query's dtype (as vLLM casts it)."""

    def halves():
        cast = cache.to(device, dtype=dtype)
        return cast[:, : rotary_dim // 2], cast[:, rotary_dim // 2 : rotary_dim]

    return _halves.get(cache, (dtype, device, rotary_dim), halves)


def rotary_embedding(
    self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rotate query and key into new tensors; the cos/sin cache is cast to the query's dtype,
    as in vLLM. The backend's rotary kernel writes both in one launch; layouts it does not take
    go through ``flag_gems.apply_rotary_pos_emb``."""
    if launch.on_current_gpu(query):
        query_out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
        key_out = (
            None if key is None else torch.empty(key.shape, dtype=key.dtype, device=key.device)
        )
        if _own_kernel(self, positions, query, key, query_out, key_out):
            return query_out, key_out
    return _through_flag_gems(self, positions, query, key)


def _own_kernel(self, positions, query, key, query_out=None, key_out=None) -> bool:
    """Launch the backend's rotary kernel (into ``query_out``/``key_out``, or in place);
    False, launching nothing, for a layout it does not take.

    A layer calls with the same layout step after step: the launch is bound to the call's
    signature (everything ``launch_of`` derives it from, less the tensors themselves), and
    later calls with that signature only check alignment and launch, passing the tensors'
    data pointers."""
    rotary_dim = self.rotary_dim
    cos, sin = _cos_sin(self.cos_sin_cache, query.dtype, query.device, rotary_dim)
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
        self.head_size,
        rotary_dim,
        self.is_neox_style,
    )
    plans = launch.own_plans("rotary_kernel", "rotary_kernel")
    if plans.launch_bound(signature, found):
        return True
    planned = launch.own("rotary_kernel").launch_of(
        positions,
        query,
        key,
        cos,
        sin,
        self.head_size,
        rotary_dim,
        self.is_neox_style,
        query_out,
        key_out,
    )
    if planned is None:
        return False
    plans.run(planned, signature, dynamic=len(tensors))
    return True


def _through_flag_gems(
    self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``flag_gems.apply_rotary_pos_emb`` into new tensors."""
    import flag_gems

    head_size, rotary_dim = self.head_size, self.rotary_dim
    cos, sin = _cos_sin(self.cos_sin_cache, query.dtype, query.device, rotary_dim)
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
    """The eager variant: query and key rotated in their own storage by the backend's rotary
    kernel (``rotary_kernel.py``: a token's heads over several programs), launched through a
    launch plan; layouts it does not take go through FlagGems' in-place rotary."""
    if launch.on_current_gpu(query) and _own_kernel(self, positions, query, key):
        return query, key
    return _inplace_through_flag_gems(self, positions, query, key)


def _inplace_through_flag_gems(self, positions, query, key):
    """``apply_rotary_pos_emb(..., inplace=True)`` where the release has it, else functional."""
    import flag_gems

    rope = flag_gems.apply_rotary_pos_emb
    head_size = self.head_size
    if key is None or self.rotary_dim != head_size or not _has_inplace(rope):
        return _through_flag_gems(self, positions, query, key)
    cos, sin = _cos_sin(self.cos_sin_cache, query.dtype, query.device, head_size)
    positions = positions.flatten()
    num_tokens = positions.shape[0]
    q = query.view(num_tokens, -1, head_size)
    k = key.view(num_tokens, -1, head_size)
    rope(q, k, cos, sin, positions, not self.is_neox_style, inplace=True)
    return query, key
