"""Portable quantized GEMMs: FlagGems has no INT8 scaled GEMM, so the flagos impl runs vLLM's own
Triton kernel (``triton_scaled_mm``), with the zero-point term applied in PyTorch."""

import torch


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
    """vLLM's ``triton_scaled_mm``, then ``- scale_a * scale_b^T * azp * azp_adj``."""
    from vllm.model_executor.layers.quantization.compressed_tensors.triton_scaled_mm import (
        triton_scaled_mm,
    )

    dtype = getattr(torch, out_dtype)
    rows = a.reshape(-1, a.shape[-1])
    out = triton_scaled_mm(rows, b, scale_a=scale_a, scale_b=scale_b, out_dtype=dtype, bias=bias)
    if azp_adj is not None:
        scale_b_row = scale_b.reshape(1, -1) if scale_b.numel() > 1 else scale_b.reshape(())
        zero = azp_adj if azp is None else azp * azp_adj
        out = out - (scale_a.reshape(-1, 1) * scale_b_row * zero).to(dtype)
    return out.reshape(*a.shape[:-1], b.shape[1])
