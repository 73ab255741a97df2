"""Reference Mamba2 mixer kernels in plain PyTorch: the ground truth for parity.

Written from the math of the ops' docstrings (ops.yaml), one sequence at a time, in float32. They
follow vLLM's Triton kernels where a detail is a choice rather than math (which state columns a
speculative step keeps, that a padded entry's state is left alone, dt clamped after the
softplus), so any backend can be compared with them; they serve every argument vLLM's Mamba2
mixer passes (2-D state indices, speculative decoding, varlen batches, chunked prefill).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: the activations vLLM's conv1d kernels apply (anything else: none)
_SILU = ("silu", "swish")


def _conv(window: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, silu: bool):
    """Depthwise causal conv of ``window`` [dim, hist + L] with weight [dim, width] (float32):
    output [dim, L], token t the weighted sum of window columns t .. t + width - 1."""
    width = weight.shape[1]
    taps = window.unfold(-1, width, 1)  # [dim, L, width]
    y = (taps * weight[:, None, :]).sum(-1)
    if bias is not None:
        y = y + bias[:, None]
    return F.silu(y) if silu else y


def _first_column(indices: torch.Tensor | None) -> list[int] | None:
    """Each sequence's state index: column 0 of a 2-D index tensor (vLLM's decode layout)."""
    if indices is None:
        return None
    return (indices[:, 0] if indices.dim() == 2 else indices).tolist()


def causal_conv1d_update(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    output: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    conv_state_indices: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    query_start_loc: torch.Tensor | None = None,
    max_query_len: int = -1,
    null_block_id: int | None = 0,
) -> None:
    """One sequence at a time: the window is the state's width - 1 columns from the sequence's
    first accepted one, then its tokens; the state keeps the window's last columns."""
    silu = activation in _SILU
    w = weight.float()
    b = None if bias is None else bias.float()
    hist = w.shape[1] - 1
    spec = num_accepted_tokens is not None
    slots = _first_column(conv_state_indices)
    accepted = num_accepted_tokens.tolist() if spec else None
    if query_start_loc is None:
        # [batch, dim] is one token per sequence: [batch, dim, 1]
        xs = x if x.dim() == 3 else x.unsqueeze(-1)
        outs = output if output.dim() == 3 else output.unsqueeze(-1)
        spans = [(i, i + 1) for i in range(xs.shape[0])]
        max_len = xs.shape[-1]
    else:
        starts = query_start_loc.tolist()
        count = len(starts) - 1 if slots is None else len(slots)
        spans = [(starts[i], starts[i + 1]) for i in range(count)]
        max_len = max_query_len
    # vLLM's kernel sizes every sequence's state update from the longest query
    base_len = hist + (max_len - 1 if spec else 0)
    for i, (start, end) in enumerate(spans):
        slot = i if slots is None else slots[i]
        if slots is not None and null_block_id is not None and slot == null_block_id:
            continue
        if query_start_loc is None:
            tokens = xs[i].float()  # [dim, seqlen]
            length = tokens.shape[-1]
            state_len = base_len
        else:
            tokens = x[start:end].t().float()
            length = end - start
            state_len = base_len - (max_len - length)
        if length == 0:
            continue
        offset = accepted[i] - 1 if spec else 0
        state = conv_state[slot].float()
        window = torch.cat([state[:, offset : offset + hist], tokens], dim=-1)
        y = _conv(window, w, b, silu)
        # the state's first columns shift left (by one while speculating: the draft tokens may
        # be rejected), the rest are the new tokens
        kept = max(state_len - length, 0)
        shift = offset + (1 if spec else length)
        new_state = torch.cat(
            [state[:, shift : shift + kept], tokens[:, length - (state_len - kept) :]], -1
        )
        conv_state[slot, :, :state_len] = new_state.to(conv_state.dtype)
        if query_start_loc is None:
            outs[i] = y.to(output.dtype)
        else:
            output[start:end] = y.t().to(output.dtype)


def causal_conv1d_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    conv_states: torch.Tensor,
    query_start_loc: torch.Tensor,
    output: torch.Tensor,
    bias: torch.Tensor | None = None,
    cache_indices: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    activation: str | None = "silu",
    pad_slot_id: int = -1,
    null_block_id: int | None = 0,
) -> None:
    """One sequence at a time: its prior columns (the cached state or zeros), then its tokens."""
    silu = activation in _SILU
    w = weight.float()
    b = None if bias is None else bias.float()
    hist = w.shape[1] - 1
    starts = query_start_loc.tolist()
    slots = None if cache_indices is None else cache_indices.tolist()
    initial = None if has_initial_state is None else has_initial_state.bool().tolist()
    for i in range(len(starts) - 1):
        start, end = starts[i], starts[i + 1]
        if start == end:
            continue
        slot = i
        if slots is not None:
            slot = slots[i]
            if slot == pad_slot_id or (null_block_id is not None and slot == null_block_id):
                continue
        if initial is not None and initial[i]:
            prior = conv_states[slot, :, :hist].float()
        else:
            prior = x.new_zeros((x.shape[0], hist), dtype=torch.float32)
        window = torch.cat([prior, x[:, start:end].float()], dim=-1)
        y = _conv(window, w, b, silu)
        conv_states[slot, :, :hist] = window[:, -hist:].to(conv_states.dtype)
        output[:, start:end] = y.to(output.dtype)


def causal_conv1d_fn_canonical(
    x: torch.Tensor,
    weight: torch.Tensor,
    conv_states: torch.Tensor,
    query_start_loc: torch.Tensor,
    output: torch.Tensor,
    bias: torch.Tensor | None = None,
    cache_indices: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    activation: str | None = "silu",
    pad_slot_id: int = -1,
    null_block_id: int | None = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(conv_states, output with the columns of skipped sequences zeroed): the op leaves a
    padded sequence's output unspecified (vLLM's kernel returns a fresh, unwritten tensor)."""
    kept = output.clone()
    if cache_indices is not None:
        starts = query_start_loc.tolist()
        for i, slot in enumerate(cache_indices.tolist()):
            if slot == pad_slot_id or (null_block_id is not None and slot == null_block_id):
                kept[:, starts[i] : starts[i + 1]] = 0
    return conv_states, kept


def _per_head(tensor: torch.Tensor, dims: int, axis: int = 1) -> torch.Tensor:
    """``tensor`` with the heads axis vLLM's SSM lets callers leave out (``axis`` 1 of a
    [batch, dim] input, 0 of a [dim, dstate] parameter) put back, as a view."""
    return tensor if tensor.dim() == dims else tensor.unsqueeze(axis)


def selective_state_update(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    dt_bias: torch.Tensor,
    output: torch.Tensor,
    z: torch.Tensor | None = None,
    dt_softplus: bool = False,
    state_batch_indices: torch.Tensor | None = None,
    dst_state_batch_indices: torch.Tensor | None = None,
    null_block_id: int = 0,
    num_accepted_tokens: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
) -> None:
    """The recurrence token by token, per sequence, all heads at once, in float32."""
    states = _per_head(state, 4)  # views: writes reach ``state``
    xs, dts, outs = _per_head(x, 3), _per_head(dt, 3), _per_head(output, 3)
    zs = None if z is None else _per_head(z, 3)
    a = _per_head(A, 3, axis=0).float()  # [nheads, dim, dstate]
    d = _per_head(D, 2, axis=0).float()  # [nheads, dim]
    bias = _per_head(dt_bias, 2, axis=0).float()
    heads_per_group = states.shape[1] // _per_head(B, 3).shape[1]
    bs = _per_head(B, 3).float().repeat_interleave(heads_per_group, dim=1)  # [tokens, nheads, n]
    cs = _per_head(C, 3).float().repeat_interleave(heads_per_group, dim=1)
    src = None if state_batch_indices is None else _two_d(state_batch_indices).tolist()
    dst = src if dst_state_batch_indices is None else _two_d(dst_state_batch_indices).tolist()
    spec = num_accepted_tokens is not None
    accepted = num_accepted_tokens.tolist() if spec else None
    if cu_seqlens is None:
        spans = [(i, i + 1) for i in range(xs.shape[0])]
    else:
        starts = cu_seqlens.tolist()
        spans = [(starts[i], starts[i + 1]) for i in range(len(starts) - 1)]
    for i, (start, end) in enumerate(spans):
        if start == end:
            continue
        first = max(accepted[i] - 1, 0) if spec else 0
        if src is None:
            read, valid = i, True
        else:
            read = src[i][first]
            valid = read != null_block_id
        # a padded entry computes from a zero state and writes no state
        h = (
            states[read].float()
            if valid
            else states.new_zeros(states.shape[1:], dtype=torch.float32)
        )
        for t in range(start, end):
            step = dts[t].float() + bias
            if dt_softplus:
                step = F.softplus(step)  # threshold 20, as vLLM's kernels
            h = (
                h * torch.exp(a * step[..., None])
                + (step[..., None] * bs[t][:, None, :]) * xs[t].float()[..., None]
            )
            if spec and valid:
                target = dst[i][t - start]
                if target != null_block_id:
                    states[target] = h.to(states.dtype)
            y = (h * cs[t][:, None, :]).sum(-1) + d * xs[t].float()
            if zs is not None:
                y = y * F.silu(zs[t].float())
            outs[t] = y.to(outs.dtype)
        if not spec and valid:
            states[i if dst is None else dst[i][first]] = h.to(states.dtype)


def _two_d(indices: torch.Tensor) -> torch.Tensor:
    return indices if indices.dim() == 2 else indices.unsqueeze(1)


def mamba_chunk_scan_combined(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    cu_seqlens: torch.Tensor,
    cu_chunk_seqlens: torch.Tensor,
    last_chunk_indices: torch.Tensor,
    seq_idx: torch.Tensor,
    output: torch.Tensor,
    states: torch.Tensor,
    dt_min: float,
    dt_max: float,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    dt_softplus: bool = False,
    return_intermediate_states: bool = False,
) -> None:
    """Chunk by chunk as the state space duality computes it: within a chunk, every output is a
    decay-weighted sum over the chunk's earlier tokens plus the carried state read through C;
    the state carried to the next chunk of the same sequence decays over the chunk and gathers
    its tokens."""
    nheads, headdim = x.shape[1], x.shape[2]
    heads_per_group = nheads // B.shape[1]
    step = dt.float()
    if dt_bias is not None:
        step = step + dt_bias.float()
    if dt_softplus:
        step = F.softplus(step)
    step = step.clamp(dt_min, dt_max)  # always, as vLLM's kernel (after the softplus)
    a = A.float()
    d = None if D is None else D.float()
    batch = cu_seqlens.numel() - 1
    carried: list[torch.Tensor] = []
    for i in range(batch):
        if initial_states is not None:
            carried.append(initial_states[i].float())
        else:
            carried.append(x.new_zeros((nheads, headdim, B.shape[2]), dtype=torch.float32))
    bounds = cu_chunk_seqlens.tolist()
    owners = seq_idx.tolist()
    after_chunk = []
    for c, i in enumerate(owners):
        start, end = bounds[c], bounds[c + 1]
        xc = x[start:end].float()  # [L, H, P]
        bc = B[start:end].float().repeat_interleave(heads_per_group, dim=1)  # [L, H, N]
        cc = C[start:end].float().repeat_interleave(heads_per_group, dim=1)
        dtc = step[start:end]  # [L, H]
        decay = torch.cumsum(dtc * a, dim=0)  # [L, H], log of the decay from the chunk start
        # token t reads token s <= t decayed by exp(decay_t - decay_s); s > t masked before exp
        gap = decay[:, None, :] - decay[None, :, :]  # [t, s, H]
        causal = torch.ones(len(dtc), len(dtc), dtype=torch.bool, device=x.device).tril()
        gap = gap.masked_fill(~causal[..., None], float("-inf"))
        weights = torch.einsum("thn,shn->tsh", cc, bc) * torch.exp(gap) * dtc[None, :, :]
        y = torch.einsum("tsh,shp->thp", weights, xc)
        h = carried[i]
        y = y + torch.einsum("thn,hpn->thp", cc, h) * torch.exp(decay)[:, :, None]
        to_end = torch.exp(decay[-1][None, :] - decay) * dtc  # [L, H]
        h = h * torch.exp(decay[-1])[:, None, None] + torch.einsum(
            "sh,shp,shn->hpn", to_end, xc, bc
        )
        carried[i] = h
        after_chunk.append(h)
        if d is not None:
            y = y + xc * (d[:, None] if d.dim() == 1 else d)
        if z is not None:
            y = y * F.silu(z[start:end].float())
        output[start:end] = y.to(output.dtype)
    if return_intermediate_states:
        states.copy_(torch.stack(after_chunk).to(states.dtype))
    else:
        states.copy_(torch.stack(carried).to(states.dtype))
