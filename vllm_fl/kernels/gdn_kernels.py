"""The kernel library's gated-delta-net kernels: the gates, the decode step of the gated
delta rule with its gates computed in the same program, and the prefill's recurrence.

FlagGems has no gated-delta-net kernel. These follow the ops' definitions in ops.yaml (the
references in ``vllm_fl.backends.reference.impl.gdn``), in float32 with one rounding per output:
``gdn_gating_kernel`` computes g and beta of a block of (token, value head) elements per program;
``gated_delta_rule_decode_kernel`` runs one sequence's tokens for one value head and a block of
BV rows of its [V, K] state per program, the state in registers between tokens, read from and
written back to the cache slots the indices name (any strides: the CPU kernels' transposed view
too).
``gated_delta_rule_prefill_kernel`` is the same recurrence over whole sequences with the gates
given (g, beta), from an initial state per sequence to a final one (the op
``chunk_gated_delta_rule``, token by token rather than chunk by chunk).

The ``*_launch`` functions derive the launch from the ops' tensors; they need Triton but no GPU,
so the CPU tests run the kernels in Triton's interpreter. ``vllm_fl.kernels.gdn`` launches them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_fl.kernels.launch import Launch, next_pow2

#: (token, value head) elements per program of the gating kernel
GATING_BLOCK = 1024
#: rows of the [V, K] state per program of the decode kernel: the state block stays in
#: registers (BV x BK float32, 32 x 128 at Qwen3-Next's head size)
DECODE_BV = 32
#: the widest key head a decode program holds whole (its BK)
DECODE_MAX_K = 256


@triton.jit
def _softplus(x, softplus_beta, softplus_threshold):
    # torch's softplus: x itself where beta * x is past the threshold
    bx = softplus_beta * x
    return tl.where(bx <= softplus_threshold, tl.log(1.0 + tl.exp(bx)) / softplus_beta, x)


@triton.jit
def gdn_gating_kernel(
    a,
    b,
    A_log,
    dt_bias,
    g,
    beta,
    n,
    softplus_beta,
    softplus_threshold,
    HV: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    head = offs % HV
    x = tl.load(a + offs, mask=mask, other=0.0).to(tl.float32)
    x += tl.load(dt_bias + head, mask=mask, other=0.0).to(tl.float32)
    rate = tl.exp(tl.load(A_log + head, mask=mask, other=0.0).to(tl.float32))
    tl.store(g + offs, -rate * _softplus(x, softplus_beta, softplus_threshold), mask=mask)
    gate = tl.load(b + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(beta + offs, tl.sigmoid(gate).to(beta.dtype.element_ty), mask=mask)


def gdn_gating_launch(
    A_log: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    dt_bias: torch.Tensor,
    softplus_beta: float,
    softplus_threshold: float,
    g: torch.Tensor,
    beta: torch.Tensor,
) -> Launch:
    """The gating kernel over contiguous a and b (and g, beta of their shape)."""
    n = a.numel()
    heads = A_log.numel()
    return Launch(
        grid=(triton.cdiv(n, GATING_BLOCK),),
        args=(a, b, A_log, dt_bias, g, beta, n, float(softplus_beta), float(softplus_threshold)),
        kwargs={"HV": heads, "BLOCK": GATING_BLOCK, "num_warps": 4},
        layout=(a.dtype, b.dtype, A_log.dtype, dt_bias.dtype, beta.dtype, heads),
    )


@triton.jit
def _sequence_bounds(cu_seqlens, i_n, seq_len, VARLEN: tl.constexpr):
    """Sequence i_n's first and one-past-last token: from cu_seqlens (varlen) or equal lengths."""
    if VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    else:
        bos = i_n * seq_len
        eos = bos + seq_len
    return bos, eos


@triton.jit
def _delta_rule_token(
    h,
    t,
    q,
    k,
    v,
    o,
    decay,
    gate,
    scale,
    l2norm_eps,
    i_h,
    i_hv,
    offs_k,
    offs_v,
    mask_k,
    mask_v,
    stride_q_tok,
    stride_q_head,
    stride_k_tok,
    stride_k_head,
    stride_v_tok,
    stride_v_head,
    stride_o_tok,
    stride_o_head,
    L2NORM: tl.constexpr,
):
    """One token of the gated delta rule on a [BV, BK] block of the state ``h`` (float32): the
    state decays, is corrected towards v for k, and is read by q into token t's output; returns
    the new state."""
    qv = tl.load(q + t * stride_q_tok + i_h * stride_q_head + offs_k, mask=mask_k, other=0.0)
    kv = tl.load(k + t * stride_k_tok + i_h * stride_k_head + offs_k, mask=mask_k, other=0.0)
    vv = tl.load(v + t * stride_v_tok + i_hv * stride_v_head + offs_v, mask=mask_v, other=0.0)
    qv = qv.to(tl.float32)
    kv = kv.to(tl.float32)
    if L2NORM:
        qv = qv * tl.rsqrt(tl.sum(qv * qv) + l2norm_eps)
        kv = kv * tl.rsqrt(tl.sum(kv * kv) + l2norm_eps)
    qv = qv * scale
    h = h * decay
    # the delta rule: correct what the state recalls for k towards v
    delta = (vv.to(tl.float32) - tl.sum(h * kv[None, :], axis=1)) * gate
    h = h + delta[:, None] * kv[None, :]
    out = tl.sum(h * qv[None, :], axis=1)
    tl.store(
        o + t * stride_o_tok + i_hv * stride_o_head + offs_v,
        out.to(o.dtype.element_ty),
        mask=mask_v,
    )
    return h


@triton.jit
def gated_delta_rule_decode_kernel(
    q,
    k,
    v,
    a,
    b,
    A_log,
    dt_bias,
    o,
    state,
    indices,
    cu_seqlens,
    accepted,
    seq_len,
    scale,
    softplus_beta,
    softplus_threshold,
    stride_q_tok,
    stride_q_head,
    stride_k_tok,
    stride_k_head,
    stride_v_tok,
    stride_v_head,
    stride_o_tok,
    stride_o_head,
    stride_a_tok,
    stride_b_tok,
    stride_s_slot,
    stride_s_head,
    stride_s_v,
    stride_s_k,
    stride_idx_seq,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    VARLEN: tl.constexpr,
    SPEC: tl.constexpr,
    L2NORM: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_hv = tl.program_id(1)
    i_n = tl.program_id(2).to(tl.int64)
    i_h = i_hv // (HV // H)
    bos, eos = _sequence_bounds(cu_seqlens, i_n, seq_len, VARLEN)
    first = 0
    if SPEC:
        first = tl.load(accepted + i_n).to(tl.int64) - 1
    slot = tl.load(indices + i_n * stride_idx_seq + first).to(tl.int64)
    if slot <= 0:  # vLLM's null block: padding, nothing to read or write
        return

    offs_k = tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    mask_k = offs_k < K
    mask_v = offs_v < V
    mask_s = mask_v[:, None] & mask_k[None, :]
    block = i_hv * stride_s_head + offs_v[:, None] * stride_s_v + offs_k[None, :] * stride_s_k
    h = tl.load(state + slot * stride_s_slot + block, mask=mask_s, other=0.0).to(tl.float32)
    rate = -tl.exp(tl.load(A_log + i_hv).to(tl.float32))
    bias = tl.load(dt_bias + i_hv).to(tl.float32)

    for t in range(bos, eos):
        x = tl.load(a + t * stride_a_tok + i_hv).to(tl.float32) + bias
        decay = tl.exp(rate * _softplus(x, softplus_beta, softplus_threshold))
        gate = tl.sigmoid(tl.load(b + t * stride_b_tok + i_hv).to(tl.float32))
        h = _delta_rule_token(
            h,
            t,
            q,
            k,
            v,
            o,
            decay,
            gate,
            scale,
            1e-6,
            i_h,
            i_hv,
            offs_k,
            offs_v,
            mask_k,
            mask_v,
            stride_q_tok,
            stride_q_head,
            stride_k_tok,
            stride_k_head,
            stride_v_tok,
            stride_v_head,
            stride_o_tok,
            stride_o_head,
            L2NORM,
        )
        if SPEC:
            # the state after each draft token, for the next step to resume from
            dst = tl.load(indices + i_n * stride_idx_seq + (t - bos)).to(tl.int64)
            if dst > 0:
                tl.store(
                    state + dst * stride_s_slot + block,
                    h.to(state.dtype.element_ty),
                    mask=mask_s,
                )
    if not SPEC:
        tl.store(state + slot * stride_s_slot + block, h.to(state.dtype.element_ty), mask=mask_s)


def gated_delta_rule_decode_launch(
    o: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    ssm_state: torch.Tensor,
    ssm_state_indices: torch.Tensor,
    cu_seqlens: torch.Tensor | None,
    num_accepted_tokens: torch.Tensor | None,
    scale: float | None,
    use_qk_l2norm_in_kernel: bool,
    softplus_beta: float,
    softplus_threshold: float,
) -> Launch | None:
    """The decode kernel's launch for the op's tensors, whose first two dimensions (batch and
    tokens) must merge into one (a view) and whose last dimension is contiguous; None where
    they are not, or the key head is wider than ``DECODE_MAX_K``."""
    batch, length, heads, head_k = q.shape
    value_heads, head_v = v.shape[2], v.shape[3]
    if head_k > DECODE_MAX_K or ssm_state_indices.stride(-1) != 1:
        return None
    try:
        flat = [t.view(batch * length, *t.shape[2:]) for t in (q, k, v, o, a, b)]
    except RuntimeError:  # batch and token dimensions that no view merges
        return None
    if any(t.stride(-1) != 1 for t in flat):
        return None
    fq, fk, fv, fo, fa, fb = flat
    sequences = batch if cu_seqlens is None else cu_seqlens.shape[0] - 1
    block_v = min(next_pow2(head_v), DECODE_BV)
    # unused pointers still need a tensor: the indices stand in
    cu = ssm_state_indices if cu_seqlens is None else cu_seqlens
    accepted = ssm_state_indices if num_accepted_tokens is None else num_accepted_tokens
    args = (
        fq, fk, fv, fa, fb, A_log, dt_bias, fo, ssm_state, ssm_state_indices, cu, accepted,
        length, head_k**-0.5 if scale is None else float(scale), float(softplus_beta),
        float(softplus_threshold), fq.stride(0), fq.stride(1), fk.stride(0), fk.stride(1),
        fv.stride(0), fv.stride(1), fo.stride(0), fo.stride(1), fa.stride(0), fb.stride(0),
        *ssm_state.stride(), ssm_state_indices.stride(0),
    )  # fmt: skip
    constexprs = {
        "H": heads,
        "HV": value_heads,
        "K": head_k,
        "V": head_v,
        "BK": next_pow2(head_k),
        "BV": block_v,
        "VARLEN": cu_seqlens is not None,
        "SPEC": num_accepted_tokens is not None,
        "L2NORM": bool(use_qk_l2norm_in_kernel),
    }
    return Launch(
        grid=(triton.cdiv(head_v, block_v), value_heads, sequences),
        args=args,
        kwargs={**constexprs, "num_warps": 4},
        layout=tuple(constexprs.items()),
    )


@triton.jit
def gated_delta_rule_prefill_kernel(
    q,
    k,
    v,
    g,
    beta,
    o,
    initial,
    final,
    cu_seqlens,
    seq_len,
    scale,
    l2norm_eps,
    stride_q_tok,
    stride_q_head,
    stride_k_tok,
    stride_k_head,
    stride_v_tok,
    stride_v_head,
    stride_o_tok,
    stride_o_head,
    stride_g_tok,
    stride_beta_tok,
    stride_i_seq,
    stride_i_head,
    stride_i_v,
    stride_i_k,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    VARLEN: tl.constexpr,
    HAS_INITIAL: tl.constexpr,
    HAS_FINAL: tl.constexpr,
    L2NORM: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_hv = tl.program_id(1)
    i_n = tl.program_id(2).to(tl.int64)
    i_h = i_hv // (HV // H)
    bos, eos = _sequence_bounds(cu_seqlens, i_n, seq_len, VARLEN)

    offs_k = tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    mask_k = offs_k < K
    mask_v = offs_v < V
    mask_s = mask_v[:, None] & mask_k[None, :]
    if HAS_INITIAL:
        h = tl.load(
            initial
            + i_n * stride_i_seq
            + i_hv * stride_i_head
            + offs_v[:, None] * stride_i_v
            + offs_k[None, :] * stride_i_k,
            mask=mask_s,
            other=0.0,
        ).to(tl.float32)
    else:
        h = tl.zeros((BV, BK), dtype=tl.float32)

    for t in range(bos, eos):
        decay = tl.exp(tl.load(g + t * stride_g_tok + i_hv).to(tl.float32))
        gate = tl.load(beta + t * stride_beta_tok + i_hv).to(tl.float32)
        h = _delta_rule_token(
            h,
            t,
            q,
            k,
            v,
            o,
            decay,
            gate,
            scale,
            l2norm_eps,
            i_h,
            i_hv,
            offs_k,
            offs_v,
            mask_k,
            mask_v,
            stride_q_tok,
            stride_q_head,
            stride_k_tok,
            stride_k_head,
            stride_v_tok,
            stride_v_head,
            stride_o_tok,
            stride_o_head,
            L2NORM,
        )
    if HAS_FINAL:
        # contiguous [N, HV, V, K] float32, made by the launch's caller
        tl.store(
            final + ((i_n * HV + i_hv) * V + offs_v[:, None]) * K + offs_k[None, :],
            h,
            mask=mask_s,
        )


def gated_delta_rule_prefill_launch(
    o: torch.Tensor,
    final: torch.Tensor | None,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None,
    initial_state: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
    use_qk_l2norm_in_kernel: bool,
    l2norm_eps: float,
) -> Launch | None:
    """The prefill kernel's launch: o [B, T, HV, V] and final (contiguous [N, HV, V, K]
    float32, or None) written by it. As the decode's, the first two dimensions of the token
    tensors must merge into one and their last dimension be contiguous; None where they are
    not, or the key head is wider than ``DECODE_MAX_K``."""
    batch, length, heads, head_k = q.shape
    value_heads, head_v = v.shape[2], v.shape[3]
    if head_k > DECODE_MAX_K:
        return None
    try:
        flat = [t.view(batch * length, *t.shape[2:]) for t in (q, k, v, o, g, beta)]
    except RuntimeError:  # batch and token dimensions that no view merges
        return None
    if any(t.stride(-1) != 1 for t in flat):
        return None
    fq, fk, fv, fo, fg, fbeta = flat
    sequences = batch if cu_seqlens is None else cu_seqlens.shape[0] - 1
    block_v = min(next_pow2(head_v), DECODE_BV)
    # unused pointers still need a tensor: o stands in
    initial = o if initial_state is None else initial_state
    args = (
        fq, fk, fv, fg, fbeta, fo, initial, o if final is None else final,
        o if cu_seqlens is None else cu_seqlens, length,
        head_k**-0.5 if scale is None else float(scale), float(l2norm_eps),
        fq.stride(0), fq.stride(1), fk.stride(0), fk.stride(1), fv.stride(0), fv.stride(1),
        fo.stride(0), fo.stride(1), fg.stride(0), fbeta.stride(0),
        *(initial.stride() if initial_state is not None else (0, 0, 0, 0)),
    )  # fmt: skip
    constexprs = {
        "H": heads,
        "HV": value_heads,
        "K": head_k,
        "V": head_v,
        "BK": next_pow2(head_k),
        "BV": block_v,
        "VARLEN": cu_seqlens is not None,
        "HAS_INITIAL": initial_state is not None,
        "HAS_FINAL": final is not None,
        "L2NORM": bool(use_qk_l2norm_in_kernel),
    }
    return Launch(
        grid=(triton.cdiv(head_v, block_v), value_heads, sequences),
        args=args,
        kwargs={**constexprs, "num_warps": 4},
        layout=tuple(constexprs.items()),
    )
