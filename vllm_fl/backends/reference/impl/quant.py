"""Reference quantisation: plain PyTorch, accumulating in float32; the ground truth of the
quantized-linear ops and the fake of their custom ops under torch.compile.

The rounding follows vLLM's kernels (round half to even, saturate to the integer range), so a
value quantises to the same integer here as on the GPU except on a rounding boundary.
"""

import torch

from vllm_fl.dispatch import check_shape
from vllm_fl.kernels.block_fp8 import scales_in_layout

_I8_MIN, _I8_MAX = -128, 127
_OUT_DTYPES = ("bfloat16", "float16", "float32")


def scaled_int8_quant(
    x: torch.Tensor,
    scale: torch.Tensor | None = None,
    azp: torch.Tensor | None = None,
    symmetric: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """INT8 activation quantisation of x [tokens, hidden]: with scale (per-tensor, static) round(x /
    scale) (+ azp when asymmetric), else dynamic per token (symmetric: scale = max|x| / 127;
    asymmetric: scale = (max - min) / 255 and azp = round(-128 - min / scale)), saturated to int8.
    Returns (x_q int8, scales float32 [tokens, 1] or a copy of scale, azp int32 or None).
    """
    xf = x.float()
    if scale is not None:
        check_shape("scaled_int8_quant", "scale", scale, (1,), numel=True)
        q = torch.round(xf / scale.float())
        if azp is not None and not symmetric:
            check_shape("scaled_int8_quant", "azp", azp, (1,), numel=True)
            q = q + azp.to(torch.float32)
        q = q.clamp(_I8_MIN, _I8_MAX).to(torch.int8)
        return q, scale.clone(), (azp.clone() if azp is not None and not symmetric else None)
    rows = xf.reshape(-1, xf.shape[-1])
    if symmetric:
        absmax = rows.abs().amax(dim=-1, keepdim=True)
        scales = absmax / _I8_MAX
        inv = torch.where(absmax > 0, _I8_MAX / absmax, torch.zeros_like(absmax))
        q = torch.round(rows * inv).clamp(_I8_MIN, _I8_MAX).to(torch.int8)
        return q.reshape(x.shape), scales, None
    lo = rows.amin(dim=-1, keepdim=True)
    hi = rows.amax(dim=-1, keepdim=True)
    scales = (hi - lo) / (_I8_MAX - _I8_MIN)
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    zero_points = torch.round(_I8_MIN - lo / safe)
    q = (torch.round(rows / safe) + zero_points).clamp(_I8_MIN, _I8_MAX).to(torch.int8)
    return q.reshape(x.shape), scales, zero_points.to(torch.int32)


def int8_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: str,
    bias: torch.Tensor | None = None,
    azp_adj: torch.Tensor | None = None,
    azp: torch.Tensor | None = None,
) -> torch.Tensor:
    """INT8 W8A8 GEMM: scale_a * scale_b^T * (a @ b - azp * azp_adj) + bias in out_dtype, with a [M,
    K] int8, b [K, N] int8 (the transposed weight), scale_a [M, 1] or [1], scale_b [N, 1] or [1]
    (float32), azp_adj [1, N] int32 (the weight's column sums, times the zero point for a static
    input), azp [M, 1] int32 for a dynamic asymmetric input (None when folded in azp_adj).
    """
    op = "int8_scaled_mm"
    if out_dtype not in _OUT_DTYPES:
        raise ValueError(f"{op}: out_dtype is {out_dtype!r}, expected one of {list(_OUT_DTYPES)}")
    rows = a.reshape(-1, a.shape[-1])
    m, k = rows.shape
    check_shape(op, "b", b, (k, None))
    n = b.shape[1]
    check_shape(op, "scale_a", scale_a, (m, 1), numel=True)
    check_shape(op, "scale_b", scale_b, (n, 1), numel=True)
    acc = rows.float() @ b.float()
    if azp_adj is not None:
        check_shape(op, "azp_adj", azp_adj, (1, n))
        if azp is not None:
            check_shape(op, "azp", azp, (m, 1))
            acc = acc - azp.float() * azp_adj.float()
        else:
            acc = acc - azp_adj.float()
    out = scale_a.float().reshape(-1, 1) * acc * scale_b.float().reshape(1, -1)
    if bias is not None:
        check_shape(op, "bias", bias, (n,))
        out = out + bias.float()
    return out.to(getattr(torch, out_dtype)).reshape(*a.shape[:-1], n)


# What the generated parity tests use (ops.yaml ``tests``): the result a quantized op
# approximates, and inputs that must agree with the others of a case.


def int8_scaled_mm_round_trip(
    originals: dict[str, torch.Tensor], arguments: dict[str, object]
) -> torch.Tensor:
    """The float32 GEMM ``int8_scaled_mm`` approximates when ``a`` and ``b`` are quantised
    (scale_a, scale_b, azp their scales and zero points): the unquantised ``a @ b`` + bias."""
    out = originals["a"].float() @ originals["b"].float()
    bias = arguments.get("bias")
    if isinstance(bias, torch.Tensor):
        out = out + bias.float()
    return out


def int8_scaled_mm_azp_adj(arguments: dict[str, object]) -> torch.Tensor:
    """``azp_adj`` of a dynamic asymmetric input (``azp`` per token): the column sums of the
    weight ``b`` [K, N], [1, N] int32, as vLLM's compressed-tensors W8A8 INT8 layer computes it."""
    b = arguments["b"]
    assert isinstance(b, torch.Tensor)
    return b.sum(dim=0, keepdim=True, dtype=torch.int32)


def scaled_int8_quant_static_scale(arguments: dict[str, object]) -> torch.Tensor:
    """A calibrated static scale [1] of the input ``x``: max|x| / 127, or (max - min) / 255 for
    an asymmetric quantisation (``symmetric`` false)."""
    x = arguments["x"]
    assert isinstance(x, torch.Tensor)
    xf = x.float()
    if arguments.get("symmetric", True):
        return (xf.abs().amax() / _I8_MAX).reshape(1)
    return ((xf.amax() - xf.amin()) / (_I8_MAX - _I8_MIN)).reshape(1)


def scaled_int8_quant_static_azp(arguments: dict[str, object]) -> torch.Tensor:
    """The zero point [1] int32 of an asymmetric static quantisation of ``x``:
    round(-128 - min / scale) with the scale of ``scaled_int8_quant_static_scale``."""
    x = arguments["x"]
    assert isinstance(x, torch.Tensor)
    scale = scaled_int8_quant_static_scale({"x": x, "symmetric": False})
    return torch.round(_I8_MIN - x.float().amin() / scale).to(torch.int32)


# -- FP8 ----------------------------------------------------------------------------------------

_FP8 = torch.float8_e4m3fn
_FP8_MAX = torch.finfo(_FP8).max  # 448
#: the smallest dynamic scale vLLM's kernels produce (an all-zero row quantises to zeros)
_FP8_MIN_SCALE = 1.0 / (_FP8_MAX * 512.0)


def _to_fp8(scaled: torch.Tensor) -> torch.Tensor:
    return scaled.clamp(-_FP8_MAX, _FP8_MAX).to(_FP8)


def per_token_group_quant_fp8(
    x: torch.Tensor,
    group_size: int,
    eps: float = 1e-10,
    column_major_scales: bool = False,
    tma_aligned_scales: bool = False,
    use_ue8m0: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 activation quantisation of x [tokens, hidden] in groups of group_size consecutive
    elements of a row: scale = max(max|group|, eps) / 448 (a power of two rounded up with
    use_ue8m0); x_q = x / scale saturated to float8_e4m3fn. Returns (x_q, scales float32 [tokens,
    hidden / group_size]) in the layout the flags ask for.
    """
    op = "per_token_group_quant_fp8"
    if x.dim() != 2:
        raise ValueError(f"{op}: argument 'x' has shape {list(x.shape)}, expected [tokens, hidden]")
    m, k = x.shape
    if group_size <= 0 or k % group_size:
        raise ValueError(
            f"{op}: group_size is {group_size}, expected a positive divisor of the hidden size {k}"
        )
    groups = x.float().reshape(m, k // group_size, group_size)
    scales = groups.abs().amax(dim=-1, keepdim=True).clamp(min=eps) / _FP8_MAX
    if use_ue8m0:
        scales = torch.exp2(torch.ceil(torch.log2(scales)))
    q = _to_fp8(groups / scales).reshape(m, k)
    return q, scales_in_layout(scales.squeeze(-1), column_major_scales, tma_aligned_scales)


def scaled_fp8_quant(
    x: torch.Tensor,
    scale: torch.Tensor | None = None,
    use_per_token_if_dynamic: bool = False,
    scale_ub: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 activation quantisation of x [tokens, hidden]: static per-tensor with scale, else
    dynamic per tensor ([1]) or per token ([tokens, 1], max|row| capped at scale_ub), scales at
    least 1 / (448 * 512); saturated to float8_e4m3fn. Returns (x_q, scales float32)."""
    op = "scaled_fp8_quant"
    if x.dim() != 2:
        raise ValueError(f"{op}: argument 'x' has shape {list(x.shape)}, expected [tokens, hidden]")
    xf = x.float()
    if scale is not None:
        check_shape(op, "scale", scale, (1,), numel=True)
        return _to_fp8(xf * scale.float().reshape(()).reciprocal()), scale.clone()
    if use_per_token_if_dynamic:
        absmax = xf.abs().amax(dim=-1, keepdim=True)
        if scale_ub is not None:
            check_shape(op, "scale_ub", scale_ub, (1,), numel=True)
            absmax = absmax.clamp(max=scale_ub.float().reshape(()))
    else:
        if scale_ub is not None:
            raise ValueError(f"{op}: scale_ub is only for dynamic per-token quantisation")
        absmax = xf.abs().amax().reshape(1)
    scales = (absmax / _FP8_MAX).clamp(min=_FP8_MIN_SCALE)
    # times the reciprocal, as vLLM's kernels (and its native code) compute it
    return _to_fp8(xf * scales.reciprocal()), scales


def _check_out_dtype(op: str, out_dtype: str) -> torch.dtype:
    if out_dtype not in _OUT_DTYPES:
        raise ValueError(f"{op}: out_dtype is {out_dtype!r}, expected one of {list(_OUT_DTYPES)}")
    return getattr(torch, out_dtype)


def _expand_blocks(scales: torch.Tensor, rows: int, cols: int, bn: int, bk: int) -> torch.Tensor:
    """Block scales [ceil(rows / bn), ceil(cols / bk)] repeated onto every element [rows, cols]."""
    full = scales.float().repeat_interleave(bn, dim=0).repeat_interleave(bk, dim=1)
    return full[:rows, :cols]


def w8a8_block_fp8_matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    block_n: int,
    block_k: int,
    out_dtype: str,
) -> torch.Tensor:
    """Block-scaled FP8 GEMM, a @ b^T dequantised, in out_dtype: a [M, K] with scale_a [M, K /
    block_k], b [N, K] with scale_b [N / block_n, K / block_k] (float32, ceil-divided)."""
    op = "w8a8_block_fp8_matmul"
    dtype = _check_out_dtype(op, out_dtype)
    if block_n <= 0 or block_k <= 0:
        raise ValueError(f"{op}: block size is [{block_n}, {block_k}], expected positive sizes")
    if a.dim() != 2:
        raise ValueError(f"{op}: argument 'a' has shape {list(a.shape)}, expected [M, K]")
    m, k = a.shape
    check_shape(op, "b", b, (None, k))
    n = b.shape[0]
    groups_k, groups_n = -(-k // block_k), -(-n // block_n)
    check_shape(op, "scale_a", scale_a, (m, groups_k))
    check_shape(op, "scale_b", scale_b, (groups_n, groups_k))
    a_deq = a.float() * _expand_blocks(scale_a, m, k, 1, block_k)
    b_deq = b.float() * _expand_blocks(scale_b, n, k, block_n, block_k)
    return (a_deq @ b_deq.t()).to(dtype)


def fp8_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: str,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """FP8 GEMM scale_a * scale_b^T * (a @ b) + bias in out_dtype: a [M, K], b [K, N] (the
    transposed weight), scale_a [M, 1] or [1], scale_b [N, 1] or [1] (float32), bias [N]."""
    op = "fp8_scaled_mm"
    dtype = _check_out_dtype(op, out_dtype)
    if a.dim() != 2:
        raise ValueError(f"{op}: argument 'a' has shape {list(a.shape)}, expected [M, K]")
    m, k = a.shape
    check_shape(op, "b", b, (k, None))
    n = b.shape[1]
    check_shape(op, "scale_a", scale_a, (m, 1), numel=True)
    check_shape(op, "scale_b", scale_b, (n, 1), numel=True)
    out = scale_a.float().reshape(-1, 1) * (a.float() @ b.float()) * scale_b.float().reshape(1, -1)
    if bias is not None:
        check_shape(op, "bias", bias, (n,))
        out = out + bias.float()
    return out.to(dtype)


def _dequantized_groups(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    group = q.shape[-1] // scales.shape[-1]
    return q.float() * scales.float().repeat_interleave(group, dim=-1)


def fp8_group_quant_canonical(
    result: tuple[torch.Tensor, torch.Tensor],
    x: torch.Tensor,
    group_size: int,
    eps: float = 1e-10,
    column_major_scales: bool = False,
    tma_aligned_scales: bool = False,
    use_ue8m0: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """What two per_token_group_quant_fp8 results must agree on: the dequantised values and the
    scales (float8 values compare only bit for bit, and a value on a rounding boundary may round
    either way; the scales' strides are open)."""
    q, scales = result
    assert q.dtype == _FP8 and scales.dtype == torch.float32, (q.dtype, scales.dtype)
    return _dequantized_groups(q, scales), scales.contiguous()


def fp8_quant_canonical(
    result: tuple[torch.Tensor, torch.Tensor],
    x: torch.Tensor,
    scale: torch.Tensor | None = None,
    use_per_token_if_dynamic: bool = False,
    scale_ub: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """What two scaled_fp8_quant results must agree on: the dequantised values and the scales."""
    q, scales = result
    assert q.dtype == _FP8 and scales.dtype == torch.float32, (q.dtype, scales.dtype)
    return q.float() * scales.float().reshape(-1, 1), scales.reshape(-1)


def scaled_fp8_quant_static_scale(arguments: dict[str, object]) -> torch.Tensor:
    """A calibrated static FP8 scale [1] of the input ``x``: max|x| / 448."""
    x = arguments["x"]
    assert isinstance(x, torch.Tensor)
    return (x.float().abs().amax() / _FP8_MAX).reshape(1)


def w8a8_block_fp8_matmul_round_trip(
    originals: dict[str, torch.Tensor], arguments: dict[str, object]
) -> torch.Tensor:
    """The float32 GEMM ``w8a8_block_fp8_matmul`` approximates when ``a`` (per token group) and
    ``b`` (per block) are quantised: the unquantised ``a @ b^T``."""
    return originals["a"].float() @ originals["b"].float().t()


def fp8_scaled_mm_round_trip(
    originals: dict[str, torch.Tensor], arguments: dict[str, object]
) -> torch.Tensor:
    """The float32 GEMM ``fp8_scaled_mm`` approximates when ``a`` and ``b`` (the transposed
    weight) are quantised: the unquantised ``a @ b`` + bias."""
    out = originals["a"].float() @ originals["b"].float()
    bias = arguments.get("bias")
    if isinstance(bias, torch.Tensor):
        out = out + bias.float()
    return out
