"""Triton kernels of the Mamba2 mixer's decode and prefill convolution and its SSM decode step.

Written for the flagos backend (FlagGems has no Mamba kernels), in float32 arithmetic with one
rounding, from the ops' definitions in ops.yaml: each program reads everything it needs before
it writes (an output may be its input, vLLM's in-place decode convolution). They take the calls
the Mamba2 mixer makes without speculative decoding; ops.yaml's ``supports`` sends the others to
the next backend. The ``*_launch`` functions derive a launch from the op's tensors (Triton, no
GPU needed: the CPU tests run the kernels in Triton's interpreter).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_fl.kernels.launch import Launch, cdiv, next_pow2

#: channels per program of the convolutions, state rows per program of the SSM step
CONV_BLOCK = 64
SSM_BLOCK = 16


@triton.jit
def conv1d_update_kernel(
    x_ptr,  # [batch, dim, SEQLEN]
    state_ptr,  # [lines, dim, >= WIDTH - 1]
    w_ptr,  # [dim, WIDTH]
    bias_ptr,
    idx_ptr,  # [batch] or [batch, k] (column 0 read)
    out_ptr,  # x's shape
    dim,
    null_block,
    sxb,
    sxd,
    sxt,
    ssb,
    ssd,
    sst,
    swd,
    sww,
    sib,
    sob,
    sod,
    sot,
    WIDTH: tl.constexpr,
    SEQLEN: tl.constexpr,
    BLOCK_W: tl.constexpr,  # next power of two of WIDTH - 1 + SEQLEN
    BLOCK_C: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_INDICES: tl.constexpr,
    HAS_NULL: tl.constexpr,
    SILU: tl.constexpr,
):
    b = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = c < dim
    if HAS_INDICES:
        slot = tl.load(idx_ptr + b * sib).to(tl.int64)
    else:
        slot = b.to(tl.int64)
    if HAS_NULL:
        if slot == null_block:
            return
    hist: tl.constexpr = WIDTH - 1
    j = tl.arange(0, BLOCK_W)
    # the whole window in registers first: the state's columns, then the tokens
    from_state = j < hist
    from_x = (j >= hist) & (j < hist + SEQLEN)
    s_vals = tl.load(
        state_ptr + slot * ssb + c[:, None] * ssd + j[None, :] * sst,
        mask=cmask[:, None] & from_state[None, :],
        other=0.0,
    ).to(tl.float32)
    x_vals = tl.load(
        x_ptr + b.to(tl.int64) * sxb + c[:, None] * sxd + (j - hist)[None, :] * sxt,
        mask=cmask[:, None] & from_x[None, :],
        other=0.0,
    ).to(tl.float32)
    window = s_vals + x_vals
    if HAS_BIAS:
        bias = tl.load(bias_ptr + c, mask=cmask, other=0.0).to(tl.float32)
    else:
        bias = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for t in tl.static_range(SEQLEN):
        acc = bias
        for k in tl.static_range(WIDTH):
            w = tl.load(w_ptr + c * swd + k * sww, mask=cmask, other=0.0).to(tl.float32)
            acc += w * tl.sum(tl.where(j[None, :] == t + k, window, 0.0), axis=1)
        if SILU:
            acc = acc / (1.0 + tl.exp(-acc))
        tl.store(
            out_ptr + b.to(tl.int64) * sob + c * sod + t * sot,
            acc.to(out_ptr.dtype.element_ty),
            mask=cmask,
        )
    # the state keeps the window's last WIDTH - 1 columns
    for i in tl.static_range(hist):
        col = tl.sum(tl.where(j[None, :] == SEQLEN + i, window, 0.0), axis=1)
        tl.store(
            state_ptr + slot * ssb + c * ssd + i * sst,
            col.to(state_ptr.dtype.element_ty),
            mask=cmask,
        )


def conv1d_update_launch(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    output: torch.Tensor,
    bias: torch.Tensor | None,
    silu: bool,
    conv_state_indices: torch.Tensor | None,
    null_block_id: int | None,
) -> Launch:
    """The launch of ``conv1d_update_kernel`` for x [batch, dim] or [batch, dim, seqlen]."""
    xs = x if x.dim() == 3 else x.unsqueeze(-1)
    outs = output if output.dim() == 3 else output.unsqueeze(-1)
    batch, dim, seqlen = xs.shape
    width = weight.shape[1]
    indices = conv_state_indices
    grid = (batch, cdiv(dim, CONV_BLOCK))
    args = (
        xs,
        conv_state,
        weight,
        bias if bias is not None else weight,
        indices if indices is not None else weight,
        outs,
        dim,
        0 if null_block_id is None else null_block_id,
        *xs.stride(),
        *conv_state.stride(),
        *weight.stride(),
        indices.stride(0) if indices is not None else 0,
        *outs.stride(),
    )
    kwargs = {
        "WIDTH": width,
        "SEQLEN": seqlen,
        "BLOCK_W": next_pow2(width - 1 + seqlen),
        "BLOCK_C": CONV_BLOCK,
        "HAS_BIAS": bias is not None,
        "HAS_INDICES": indices is not None,
        "HAS_NULL": indices is not None and null_block_id is not None,
        "SILU": silu,
    }
    return Launch(grid, args, kwargs, None)


@triton.jit
def conv1d_fwd_kernel(
    x_ptr,  # [dim, tokens]
    state_ptr,  # [lines, dim, >= WIDTH - 1]
    w_ptr,  # [dim, WIDTH]
    bias_ptr,
    qsl_ptr,  # [batch + 1]
    idx_ptr,  # [batch]
    init_ptr,  # [batch], nonzero: start from the cached state
    out_ptr,  # [dim, tokens]
    dim,
    pad_slot,
    null_block,
    sxd,
    sxt,
    ssb,
    ssd,
    sst,
    swd,
    sww,
    sod,
    sot,
    WIDTH: tl.constexpr,
    BLOCK_H: tl.constexpr,  # next power of two of WIDTH - 1
    BLOCK_C: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_INDICES: tl.constexpr,
    HAS_INIT: tl.constexpr,
    HAS_NULL: tl.constexpr,
    SILU: tl.constexpr,
):
    s = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = c < dim
    start = tl.load(qsl_ptr + s).to(tl.int64)
    length = tl.load(qsl_ptr + s + 1).to(tl.int64) - start
    if HAS_INDICES:
        slot = tl.load(idx_ptr + s).to(tl.int64)
        if slot == pad_slot:
            return
        if HAS_NULL:
            if slot == null_block:
                return
    else:
        slot = s.to(tl.int64)
    if length == 0:
        return
    # per channel (all alike), so every mask it joins is a tensor of one shape
    use_state = c < 0
    if HAS_INIT:
        use_state = (c * 0 + tl.load(init_ptr + s).to(tl.int32)) != 0
    hist: tl.constexpr = WIDTH - 1
    state_row = state_ptr + slot * ssb + c * ssd
    x_row = x_ptr + start * sxt + c * sxd
    if HAS_BIAS:
        bias = tl.load(bias_ptr + c, mask=cmask, other=0.0).to(tl.float32)
    else:
        bias = tl.zeros((BLOCK_C,), dtype=tl.float32)
    # column i of the window (i < 0: the prior state's column hist + i, or zero)
    for t in range(length):
        acc = bias
        for k in tl.static_range(WIDTH):
            i = c * 0 + (t + k - hist)  # a tensor, so the masks below are tensors too
            v = tl.load(x_row + i * sxt, mask=cmask & (i >= 0), other=0.0).to(tl.float32)
            v += tl.load(
                state_row + (hist + i) * sst, mask=cmask & (i < 0) & use_state, other=0.0
            ).to(tl.float32)
            w = tl.load(w_ptr + c * swd + k * sww, mask=cmask, other=0.0).to(tl.float32)
            acc += w * v
        if SILU:
            acc = acc / (1.0 + tl.exp(-acc))
        tl.store(
            out_ptr + c * sod + (start + t) * sot, acc.to(out_ptr.dtype.element_ty), mask=cmask
        )
    # the new state (the window's last hist columns), read whole before it is written
    j = tl.arange(0, BLOCK_H)
    i2 = length - hist + j
    keep = cmask[:, None] & (j < hist)[None, :]
    new = tl.load(x_row[:, None] + i2[None, :] * sxt, mask=keep & (i2 >= 0)[None, :], other=0.0)
    new = new.to(tl.float32)
    new += tl.load(
        state_row[:, None] + (hist + i2)[None, :] * sst,
        mask=keep & (i2 < 0)[None, :] & use_state[:, None],
        other=0.0,
    ).to(tl.float32)
    tl.debug_barrier()
    tl.store(state_row[:, None] + j[None, :] * sst, new.to(state_ptr.dtype.element_ty), mask=keep)


def conv1d_fwd_launch(
    x: torch.Tensor,
    weight: torch.Tensor,
    conv_states: torch.Tensor,
    query_start_loc: torch.Tensor,
    output: torch.Tensor,
    bias: torch.Tensor | None,
    cache_indices: torch.Tensor | None,
    has_initial_state: torch.Tensor | None,
    silu: bool,
    pad_slot_id: int,
    null_block_id: int | None,
) -> Launch:
    """The launch of ``conv1d_fwd_kernel``: one program per sequence and block of channels."""
    dim = x.shape[0]
    batch = query_start_loc.numel() - 1
    grid = (batch, cdiv(dim, CONV_BLOCK))
    args = (
        x,
        conv_states,
        weight,
        bias if bias is not None else weight,
        query_start_loc,
        cache_indices if cache_indices is not None else query_start_loc,
        has_initial_state if has_initial_state is not None else query_start_loc,
        output,
        dim,
        pad_slot_id,
        0 if null_block_id is None else null_block_id,
        *x.stride(),
        *conv_states.stride(),
        *weight.stride(),
        *output.stride(),
    )
    kwargs = {
        "WIDTH": weight.shape[1],
        "BLOCK_H": next_pow2(weight.shape[1] - 1),
        "BLOCK_C": CONV_BLOCK,
        "HAS_BIAS": bias is not None,
        "HAS_INDICES": cache_indices is not None,
        "HAS_INIT": has_initial_state is not None,
        "HAS_NULL": cache_indices is not None and null_block_id is not None,
        "SILU": silu,
    }
    return Launch(grid, args, kwargs, None)


@triton.jit
def ssm_update_kernel(
    state_ptr,  # [lines, nheads, dim, dstate]
    x_ptr,  # [tokens, nheads, dim]; dt, z, out alike
    dt_ptr,
    a_ptr,  # [nheads, dim, dstate]
    b_ptr,  # [tokens, ngroups, dstate]; C alike
    c_ptr,
    d_ptr,  # [nheads, dim]; dt_bias alike
    bias_ptr,
    z_ptr,
    out_ptr,
    src_ptr,  # [batch, k] state indices (column 0 read)
    dst_ptr,
    cu_ptr,  # [batch + 1] token offsets (varlen)
    dim,
    dstate,
    heads_per_group,
    null_block,
    s_b,
    s_h,
    s_d,
    s_n,
    x_t,
    x_h,
    x_d,
    dt_t,
    dt_h,
    dt_d,
    a_h,
    a_d,
    a_n,
    b_t,
    b_g,
    b_n,
    c_t,
    c_g,
    c_n,
    d_h,
    d_d,
    bias_h,
    bias_d,
    z_t,
    z_h,
    z_d,
    o_t,
    o_h,
    o_d,
    src_b,
    dst_b,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SOFTPLUS: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_INDICES: tl.constexpr,
    VARLEN: tl.constexpr,
):
    m = tl.program_id(0)
    seq = tl.program_id(1)
    h = tl.program_id(2)
    d = m * BLOCK_D + tl.arange(0, BLOCK_D)
    n = tl.arange(0, BLOCK_N)
    dmask = d < dim
    tile = dmask[:, None] & (n < dstate)[None, :]
    if VARLEN:
        start = tl.load(cu_ptr + seq).to(tl.int64)
        end = tl.load(cu_ptr + seq + 1).to(tl.int64)
    else:
        start = seq.to(tl.int64)
        end = start + 1
    # per state column (all alike), so the masks it joins are tensors of one shape
    valid = n < BLOCK_N
    if HAS_INDICES:
        read = tl.load(src_ptr + seq * src_b).to(tl.int64)
        write = tl.load(dst_ptr + seq * dst_b).to(tl.int64)
        valid = (n * 0 + read) != null_block
    else:
        read = seq.to(tl.int64)
        write = read
    # a padded entry computes from a zero state and writes none
    hstate = tl.load(
        state_ptr + read * s_b + h * s_h + d[:, None] * s_d + n[None, :] * s_n,
        mask=tile & valid[None, :],
        other=0.0,
    ).to(tl.float32)
    a = tl.load(a_ptr + h * a_h + d[:, None] * a_d + n[None, :] * a_n, mask=tile, other=0.0)
    a = a.to(tl.float32)
    dd = tl.load(d_ptr + h * d_h + d * d_d, mask=dmask, other=0.0).to(tl.float32)
    bias = tl.load(bias_ptr + h * bias_h + d * bias_d, mask=dmask, other=0.0).to(tl.float32)
    g = h // heads_per_group
    for t in range(start, end):
        x = tl.load(x_ptr + t * x_t + h * x_h + d * x_d, mask=dmask, other=0.0).to(tl.float32)
        dt = tl.load(dt_ptr + t * dt_t + h * dt_h + d * dt_d, mask=dmask, other=0.0)
        dt = dt.to(tl.float32) + bias
        if SOFTPLUS:
            dt = tl.where(dt <= 20.0, tl.log(1.0 + tl.exp(dt)), dt)
        bv = tl.load(b_ptr + t * b_t + g * b_g + n * b_n, mask=n < dstate, other=0.0)
        cv = tl.load(c_ptr + t * c_t + g * c_g + n * c_n, mask=n < dstate, other=0.0)
        hstate = (
            hstate * tl.exp(a * dt[:, None])
            + (dt[:, None] * bv.to(tl.float32)[None, :]) * x[:, None]
        )
        y = tl.sum(hstate * cv.to(tl.float32)[None, :], axis=1) + dd * x
        if HAS_Z:
            z = tl.load(z_ptr + t * z_t + h * z_h + d * z_d, mask=dmask, other=0.0)
            z = z.to(tl.float32)
            y = y * (z / (1.0 + tl.exp(-z)))
        tl.store(out_ptr + t * o_t + h * o_h + d * o_d, y.to(out_ptr.dtype.element_ty), mask=dmask)
    tl.store(
        state_ptr + write * s_b + h * s_h + d[:, None] * s_d + n[None, :] * s_n,
        hstate.to(state_ptr.dtype.element_ty),
        mask=tile & valid[None, :],
    )


def _heads(tensor: torch.Tensor, dims: int, axis: int = 1) -> torch.Tensor:
    return tensor if tensor.dim() == dims else tensor.unsqueeze(axis)


def ssm_update_launch(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    dt_bias: torch.Tensor,
    output: torch.Tensor,
    z: torch.Tensor | None,
    dt_softplus: bool,
    state_batch_indices: torch.Tensor | None,
    dst_state_batch_indices: torch.Tensor | None,
    null_block_id: int,
    cu_seqlens: torch.Tensor | None,
) -> Launch:
    """The launch of ``ssm_update_kernel``: one program per block of a head's rows, sequence and
    head; the forms without a heads axis get one."""
    st = _heads(state, 4)
    xs, dts, outs = _heads(x, 3), _heads(dt, 3), _heads(output, 3)
    zs = None if z is None else _heads(z, 3)
    a, bs, cs = _heads(A, 3, 0), _heads(B, 3), _heads(C, 3)
    ds, biases = _heads(D, 2, 0), _heads(dt_bias, 2, 0)
    src = state_batch_indices
    if src is not None and src.dim() == 1:
        src = src.unsqueeze(1)
    dst = src if dst_state_batch_indices is None else dst_state_batch_indices
    if dst is not None and dst.dim() == 1:
        dst = dst.unsqueeze(1)
    nheads, dim, dstate = st.shape[1], st.shape[2], st.shape[3]
    batch = cu_seqlens.numel() - 1 if cu_seqlens is not None else xs.shape[0]
    grid = (cdiv(dim, SSM_BLOCK), batch, nheads)
    zs_or = zs if zs is not None else xs
    args = (
        st,
        xs,
        dts,
        a,
        bs,
        cs,
        ds,
        biases,
        zs_or,
        outs,
        src if src is not None else xs,
        dst if dst is not None else xs,
        cu_seqlens if cu_seqlens is not None else xs,
        dim,
        dstate,
        nheads // bs.shape[1],
        null_block_id,
        *st.stride(),
        *xs.stride(),
        *dts.stride(),
        *a.stride(),
        *bs.stride(),
        *cs.stride(),
        *ds.stride(),
        *biases.stride(),
        *zs_or.stride(),
        *outs.stride(),
        src.stride(0) if src is not None else 0,
        dst.stride(0) if dst is not None else 0,
    )
    kwargs = {
        "BLOCK_D": SSM_BLOCK,
        "BLOCK_N": next_pow2(dstate),
        "SOFTPLUS": dt_softplus,
        "HAS_Z": z is not None,
        "HAS_INDICES": src is not None,
        "VARLEN": cu_seqlens is not None,
    }
    return Launch(grid, args, kwargs, None)
