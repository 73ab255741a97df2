"""CUDA unquantized GEMM: ``torch.nn.functional.linear``, i.e. cuBLAS (cuBLASLt with a bias), as
vLLM's ``default_unquantized_gemm`` runs it on CUDA: the shipped policy computes what vanilla
vLLM computes, with the same kernels."""

import torch


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.nn.functional.linear(x, weight, bias)``: cuBLAS in x's dtype."""
    return torch.nn.functional.linear(x, weight, bias)
