"""Portable unquantized GEMM: FlagGems' Triton ``mm`` / ``addmm`` through the kernel library
(``vllm_fl.kernels.linear``), nothing of cuBLAS."""

import torch


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """FlagGems' ``addmm(bias, x, weight^T)`` (``mm`` without a bias) on x's rows, in x's
    dtype."""
    from vllm_fl.kernels import linear as gemm

    return gemm.linear(x, weight, bias)
