"""CUDA vendor quantisation: vLLM's compiled kernels, called as vLLM's own linear kernels call
them (``scaled_int8_quant``, CUTLASS ``cutlass_scaled_mm`` / ``cutlass_scaled_mm_azp``)."""

import torch


def scaled_int8_quant(
    x: torch.Tensor,
    scale: torch.Tensor | None = None,
    azp: torch.Tensor | None = None,
    symmetric: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``vllm._custom_ops.scaled_int8_quant``; a static scale and zero point come back as copies
    (an op never returns its inputs)."""
    from vllm import _custom_ops as ops

    q, scales, zero_points = ops.scaled_int8_quant(x.contiguous(), scale, azp, symmetric=symmetric)
    if scale is not None:
        return q, scale.clone(), (azp.clone() if zero_points is not None else None)
    return q, scales, zero_points


def _column_major(b: torch.Tensor) -> torch.Tensor:
    # CUTLASS reads b [K, N] column-major: the transposed view of a contiguous weight is already.
    return b if b.stride(0) == 1 else b.t().contiguous().t()


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
    """``cutlass_scaled_mm``, or ``cutlass_scaled_mm_azp`` with a zero-point term."""
    from vllm import _custom_ops as ops

    dtype = getattr(torch, out_dtype)
    b = _column_major(b)
    if azp_adj is None:
        return ops.cutlass_scaled_mm(a, b, scale_a, scale_b, out_dtype=dtype, bias=bias)
    return ops.cutlass_scaled_mm_azp(a, b, scale_a, scale_b, dtype, azp_adj, azp, bias)
