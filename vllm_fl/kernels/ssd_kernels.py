"""Triton kernels of Mamba2's state space duality (SSD) scan over a varlen prefill batch.

Written for the flagos backend from the op's definition in ops.yaml (``mamba_chunk_scan_combined``)
and the SSD decomposition: within a chunk the recurrence h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t
is a masked matrix product, across chunks it is one state carried per sequence. Four launches,
each a pass of that decomposition:

1. ``ssd_chunk_cumsum_kernel``: per chunk and head, the step dt (bias, softplus, clamp) and the
   running sum of dt * A from the chunk's first token (the log of the decay since its start);
2. ``ssd_chunk_state_kernel``: the state each chunk gathers from its own tokens,
   sum_s exp(dA_last - dA_s) dt_s x_s B_s^T, as if it started from zero;
3. ``ssd_state_passing_kernel``: per sequence, the states carried through its chunks in order
   from its initial state; it replaces each chunk's own state by the state entering the chunk
   and writes the final (or every chunk's) state out;
4. ``ssd_chunk_scan_kernel``: each token's output, C_t . (state entering its chunk) decayed to t
   plus the causal sum over the chunk's earlier tokens (C_t . B_s) exp(dA_t - dA_s) dt_s x_s,
   then the D skip and the silu(z) gate.

Everything is computed in float32 (the products as ``tl.dot`` computes float32 on the GPU,
TF32); the workspaces are float32, output and states are written in their own dtypes. The
``ssd_launches`` function derives the four launches from the op's tensors (no GPU needed: the
CPU tests run them in Triton's interpreter).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_fl.kernels.launch import Launch, cdiv, next_pow2

#: heads per program of the cumulative sum
CUMSUM_HEADS = 8
#: state elements (headdim x dstate, flattened) per program of the state passing
PASSING_BLOCK = 256
#: tl.dot takes no operand dimension under 16
MIN_DOT = 16


@triton.jit
def ssd_chunk_cumsum_kernel(
    dt_ptr,  # [tokens, nheads]
    a_ptr,  # [nheads]
    bias_ptr,  # [nheads]
    cu_chunk_ptr,  # [nchunks + 1]
    dt_out_ptr,  # [nchunks, nheads, BLOCK_L] float32
    dacs_ptr,  # [nchunks, nheads, BLOCK_L] float32
    nheads,
    dt_min,
    dt_max,
    dt_t,
    dt_h,
    a_h,
    bias_h,
    BLOCK_L: tl.constexpr,
    BLOCK_H: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SOFTPLUS: tl.constexpr,
):
    c = tl.program_id(0)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = h < nheads
    start = tl.load(cu_chunk_ptr + c).to(tl.int64)
    length = tl.load(cu_chunk_ptr + c + 1).to(tl.int64) - start
    t = tl.arange(0, BLOCK_L)
    tile = (t < length)[:, None] & hmask[None, :]
    dt = tl.load(dt_ptr + (start + t)[:, None] * dt_t + h[None, :] * dt_h, mask=tile, other=0.0)
    dt = dt.to(tl.float32)
    if HAS_BIAS:
        dt += tl.load(bias_ptr + h * bias_h, mask=hmask, other=0.0).to(tl.float32)[None, :]
    if SOFTPLUS:
        dt = tl.where(dt <= 20.0, tl.log(1.0 + tl.exp(dt)), dt)
    dt = tl.minimum(tl.maximum(dt, dt_min), dt_max)
    # past the chunk's end: no step, so the running sum stays at the chunk's total and its
    # last column is the decay over the whole chunk
    dt = tl.where(tile, dt, 0.0)
    a = tl.load(a_ptr + h * a_h, mask=hmask, other=0.0).to(tl.float32)
    dacs = tl.cumsum(dt * a[None, :], axis=0)
    out = (c * nheads + h[None, :]).to(tl.int64) * BLOCK_L + t[:, None]
    keep = (t < BLOCK_L)[:, None] & hmask[None, :]
    tl.store(dt_out_ptr + out, dt, mask=keep)
    tl.store(dacs_ptr + out, dacs, mask=keep)


@triton.jit
def ssd_chunk_state_kernel(
    x_ptr,  # [tokens, nheads, headdim]
    b_ptr,  # [tokens, ngroups, dstate]
    dt_ptr,  # [nchunks, nheads, BLOCK_L] float32 (the cumsum kernel's)
    dacs_ptr,
    cu_chunk_ptr,
    states_ptr,  # [nchunks, nheads, headdim, dstate] float32
    nheads,
    headdim,
    dstate,
    heads_per_group,
    x_t,
    x_h,
    x_p,
    b_t,
    b_g,
    b_n,
    BLOCK_L: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    c = tl.program_id(0)
    h = tl.program_id(1)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    n = tl.arange(0, BLOCK_N)
    pmask, nmask = p < headdim, n < dstate
    g = h // heads_per_group
    start = tl.load(cu_chunk_ptr + c).to(tl.int64)
    length = tl.load(cu_chunk_ptr + c + 1).to(tl.int64) - start
    row = (c * nheads + h).to(tl.int64) * BLOCK_L
    da_last = tl.load(dacs_ptr + row + BLOCK_L - 1)
    acc = tl.zeros((BLOCK_P, BLOCK_N), dtype=tl.float32)
    for s0 in range(0, length, BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        smask = s < length
        tok = start + s
        xt = tl.load(
            x_ptr + tok[None, :] * x_t + h * x_h + p[:, None] * x_p,
            mask=pmask[:, None] & smask[None, :],
            other=0.0,
        ).to(tl.float32)
        bs = tl.load(
            b_ptr + tok[:, None] * b_t + g * b_g + n[None, :] * b_n,
            mask=smask[:, None] & nmask[None, :],
            other=0.0,
        ).to(tl.float32)
        dt = tl.load(dt_ptr + row + s, mask=smask, other=0.0)
        da = tl.load(dacs_ptr + row + s, mask=smask, other=0.0)
        # each token's step decayed to the chunk's end (zero past the end: dt is)
        weight = dt * tl.exp(da_last - da)
        acc += tl.dot(xt * weight[None, :], bs)
    out = states_ptr + (c * nheads + h).to(tl.int64) * headdim * dstate
    tl.store(out + p[:, None] * dstate + n[None, :], acc, mask=pmask[:, None] & nmask[None, :])


@triton.jit
def ssd_state_passing_kernel(
    states_ptr,  # [nchunks, nheads, headdim, dstate] float32: in each chunk's, out entering
    dacs_ptr,  # [nchunks, nheads, BLOCK_L] float32
    last_chunk_ptr,  # [batch]
    init_ptr,  # [batch, nheads, headdim, dstate]
    final_ptr,  # [batch or nchunks, nheads, headdim, dstate]
    nheads,
    headdim,
    dstate,
    i_b,
    i_h,
    i_p,
    i_n,
    f_b,
    f_h,
    f_p,
    f_n,
    BLOCK_L: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_INIT: tl.constexpr,
    EVERY_CHUNK: tl.constexpr,
):
    seq = tl.program_id(0)
    h = tl.program_id(1)
    f = tl.program_id(2) * BLOCK + tl.arange(0, BLOCK)
    size = headdim * dstate
    fmask = f < size
    p, n = f // dstate, f % dstate
    # a sequence's chunks are consecutive and end at its last chunk
    last = tl.load(last_chunk_ptr + seq).to(tl.int64)
    first = last * 0
    if seq > 0:
        first = tl.load(last_chunk_ptr + seq - 1).to(tl.int64) + 1
    if HAS_INIT:
        state = tl.load(
            init_ptr + seq.to(tl.int64) * i_b + h * i_h + p * i_p + n * i_n, mask=fmask, other=0.0
        ).to(tl.float32)
    else:
        state = tl.zeros((BLOCK,), dtype=tl.float32)
    for c in range(first, last + 1):
        at = states_ptr + (c * nheads + h) * size + f
        own = tl.load(at, mask=fmask, other=0.0)
        # the same elements, read and written by the same lanes: the chunk's own state is in
        # registers before the state entering the chunk overwrites it
        tl.store(at, state, mask=fmask)
        decay = tl.exp(tl.load(dacs_ptr + (c * nheads + h) * BLOCK_L + BLOCK_L - 1))
        state = state * decay + own
        if EVERY_CHUNK:
            tl.store(
                final_ptr + c * f_b + h * f_h + p * f_p + n * f_n,
                state.to(final_ptr.dtype.element_ty),
                mask=fmask,
            )
    if not EVERY_CHUNK:
        tl.store(
            final_ptr + seq.to(tl.int64) * f_b + h * f_h + p * f_p + n * f_n,
            state.to(final_ptr.dtype.element_ty),
            mask=fmask,
        )


@triton.jit
def ssd_chunk_scan_kernel(
    x_ptr,  # [tokens, nheads, headdim]; z and out alike
    z_ptr,
    out_ptr,
    b_ptr,  # [tokens, ngroups, dstate]; C alike
    c_ptr,
    d_ptr,  # [nheads] or [nheads, headdim]
    dt_ptr,  # [nchunks, nheads, BLOCK_L] float32
    dacs_ptr,
    cu_chunk_ptr,
    states_ptr,  # [nchunks, nheads, headdim, dstate] float32: the state entering each chunk
    nheads,
    headdim,
    dstate,
    heads_per_group,
    row_blocks,
    x_t,
    x_h,
    x_p,
    z_t,
    z_h,
    z_p,
    o_t,
    o_h,
    o_p,
    b_t,
    b_g,
    b_n,
    c_t,
    c_g,
    c_n,
    d_h,
    d_p,
    BLOCK_L: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
):
    c = tl.program_id(0) // row_blocks
    m0 = (tl.program_id(0) % row_blocks) * BLOCK_M
    h = tl.program_id(1)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    start = tl.load(cu_chunk_ptr + c).to(tl.int64)
    length = tl.load(cu_chunk_ptr + c + 1).to(tl.int64) - start
    if m0 >= length:
        return
    g = h // heads_per_group
    t = m0 + tl.arange(0, BLOCK_M)
    n = tl.arange(0, BLOCK_N)
    tmask, pmask, nmask = t < length, p < headdim, n < dstate
    row = (c * nheads + h).to(tl.int64) * BLOCK_L
    da_t = tl.load(dacs_ptr + row + t, mask=tmask, other=0.0)
    ct = tl.load(
        c_ptr + (start + t)[:, None] * c_t + g * c_g + n[None, :] * c_n,
        mask=tmask[:, None] & nmask[None, :],
        other=0.0,
    ).to(tl.float32)
    # the state entering the chunk, read through C and decayed to each token
    prev = tl.load(
        states_ptr
        + (c * nheads + h).to(tl.int64) * headdim * dstate
        + n[:, None]
        + p[None, :] * dstate,
        mask=nmask[:, None] & pmask[None, :],
        other=0.0,
    )
    acc = tl.dot(ct, prev) * tl.exp(da_t)[:, None]
    # the chunk's tokens up to the last row of this block: the causal part
    for s0 in range(0, tl.minimum(m0 + BLOCK_M, length), BLOCK_M):
        s = s0 + tl.arange(0, BLOCK_M)
        smask = s < length
        bt = tl.load(
            b_ptr + (start + s)[None, :] * b_t + g * b_g + n[:, None] * b_n,
            mask=nmask[:, None] & smask[None, :],
            other=0.0,
        ).to(tl.float32)
        dt = tl.load(dt_ptr + row + s, mask=smask, other=0.0)
        da_s = tl.load(dacs_ptr + row + s, mask=smask, other=0.0)
        # masked before the exponential: a later token's gap is positive and may overflow
        causal = (s[None, :] <= t[:, None]) & smask[None, :]
        gap = tl.where(causal, da_t[:, None] - da_s[None, :], float("-inf"))
        weight = tl.dot(ct, bt) * tl.exp(gap) * dt[None, :]
        xs = tl.load(
            x_ptr + (start + s)[:, None] * x_t + h * x_h + p[None, :] * x_p,
            mask=smask[:, None] & pmask[None, :],
            other=0.0,
        ).to(tl.float32)
        acc += tl.dot(weight, xs)
    tile = tmask[:, None] & pmask[None, :]
    tok = (start + t)[:, None]
    if HAS_D:
        x = tl.load(x_ptr + tok * x_t + h * x_h + p[None, :] * x_p, mask=tile, other=0.0)
        d = tl.load(d_ptr + h * d_h + p * d_p, mask=pmask, other=0.0).to(tl.float32)
        acc += x.to(tl.float32) * d[None, :]
    if HAS_Z:
        z = tl.load(z_ptr + tok * z_t + h * z_h + p[None, :] * z_p, mask=tile, other=0.0)
        z = z.to(tl.float32)
        acc = acc * (z / (1.0 + tl.exp(-z)))
    tl.store(
        out_ptr + tok * o_t + h * o_h + p[None, :] * o_p,
        acc.to(out_ptr.dtype.element_ty),
        mask=tile,
    )


def _dot_block(n: int, cap: int) -> int:
    """A tile dimension for ``n`` that ``tl.dot`` takes: a power of two, 16 to ``cap``."""
    return min(max(next_pow2(n), MIN_DOT), cap)


def ssd_launches(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    cu_chunk_seqlens: torch.Tensor,
    last_chunk_indices: torch.Tensor,
    output: torch.Tensor,
    states: torch.Tensor,
    dt_min: float,
    dt_max: float,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    dt_softplus: bool,
    return_intermediate_states: bool,
) -> list[tuple[object, Launch]]:
    """The four launches of the scan, in order, with the float32 workspaces they share: (kernel,
    launch) pairs for ``kernel[launch.grid](*launch.args, **launch.kwargs)``."""
    tokens, nheads, headdim = x.shape
    ngroups, dstate = B.shape[1], B.shape[2]
    nchunks = cu_chunk_seqlens.numel() - 1
    batch = last_chunk_indices.numel()
    block_l = max(next_pow2(chunk_size), MIN_DOT)
    block_m = min(block_l, 64)
    block_p = _dot_block(headdim, 64)
    block_n = max(next_pow2(dstate), MIN_DOT)
    f32 = dict(dtype=torch.float32, device=x.device)
    steps = torch.empty(nchunks, nheads, block_l, **f32)
    dacs = torch.empty(nchunks, nheads, block_l, **f32)
    chunk_states = torch.empty(nchunks, nheads, headdim, dstate, **f32)
    heads_per_group = nheads // ngroups
    cumsum = Launch(
        (nchunks, cdiv(nheads, CUMSUM_HEADS)),
        (
            dt,
            A,
            dt_bias if dt_bias is not None else A,
            cu_chunk_seqlens,
            steps,
            dacs,
            nheads,
            float(dt_min),
            float(dt_max),
            *dt.stride(),
            A.stride(0),
            dt_bias.stride(0) if dt_bias is not None else 0,
        ),
        {
            "BLOCK_L": block_l,
            "BLOCK_H": CUMSUM_HEADS,
            "HAS_BIAS": dt_bias is not None,
            "SOFTPLUS": dt_softplus,
        },
        None,
    )
    chunk_state = Launch(
        (nchunks, nheads, cdiv(headdim, block_p)),
        (
            x,
            B,
            steps,
            dacs,
            cu_chunk_seqlens,
            chunk_states,
            nheads,
            headdim,
            dstate,
            heads_per_group,
            *x.stride(),
            *B.stride(),
        ),
        {"BLOCK_L": block_l, "BLOCK_S": block_m, "BLOCK_P": block_p, "BLOCK_N": block_n},
        None,
    )
    init = initial_states if initial_states is not None else chunk_states
    passing = Launch(
        (batch, nheads, cdiv(headdim * dstate, PASSING_BLOCK)),
        (
            chunk_states,
            dacs,
            last_chunk_indices,
            init,
            states,
            nheads,
            headdim,
            dstate,
            *init.stride(),
            *states.stride(),
        ),
        {
            "BLOCK_L": block_l,
            "BLOCK": PASSING_BLOCK,
            "HAS_INIT": initial_states is not None,
            "EVERY_CHUNK": return_intermediate_states,
        },
        None,
    )
    row_blocks = cdiv(block_l, block_m)
    d = D if D is None or D.dim() == 2 else D.unsqueeze(1)
    zs = z if z is not None else x
    scan = Launch(
        (nchunks * row_blocks, nheads, cdiv(headdim, block_p)),
        (
            x,
            zs,
            output,
            B,
            C,
            d if d is not None else A,
            steps,
            dacs,
            cu_chunk_seqlens,
            chunk_states,
            nheads,
            headdim,
            dstate,
            heads_per_group,
            row_blocks,
            *x.stride(),
            *zs.stride(),
            *output.stride(),
            *B.stride(),
            *C.stride(),
            d.stride(0) if d is not None else 0,
            # a per-head D is the same for every channel
            (d.stride(1) if D.dim() == 2 else 0) if d is not None else 0,
        ),
        {
            "BLOCK_L": block_l,
            "BLOCK_M": block_m,
            "BLOCK_P": block_p,
            "BLOCK_N": block_n,
            "HAS_D": D is not None,
            "HAS_Z": z is not None,
        },
        None,
    )
    return [
        (ssd_chunk_cumsum_kernel, cumsum),
        (ssd_chunk_state_kernel, chunk_state),
        (ssd_state_passing_kernel, passing),
        (ssd_chunk_scan_kernel, scan),
    ]
