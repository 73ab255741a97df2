"""Reference quantisation: plain PyTorch, accumulating in float32; the ground truth of the
quantized-linear ops and the fake of their custom ops under torch.compile.

The rounding follows vLLM's kernels (round half to even, saturate to the integer range), so a
value quantises to the same integer here as on the GPU except on a rounding boundary.
"""

import torch

from vllm_fl.dispatch.shapes import check_shape

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
