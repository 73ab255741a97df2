"""Reference unquantized GEMM: ``torch.nn.functional.linear`` in x's dtype, what vLLM's
``default_unquantized_gemm`` computes (its GEMM on CUDA and on every platform without one of its
own), so that a compiled model traces the same ``aten.linear`` vanilla vLLM's does."""

import torch


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The GEMM of an unquantized linear layer or LM head, x @ weight^T + bias in x's dtype (as
    torch.nn.functional.linear), with x [..., K], weight [N, K] and bias [N].
    """
    return torch.nn.functional.linear(x, weight, bias)
