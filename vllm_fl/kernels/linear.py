"""The unquantized GEMM of linear layers and LM heads on FlagGems' Triton matrix products.

``linear(x, weight, bias)`` computes ``torch.nn.functional.linear``: x's rows ([..., K] viewed as
[M, K]) times the transposed weight ([N, K] read as a [K, N] view, no copy: FlagGems' kernels take
strides), plus the bias, in x's dtype with float32 accumulation. With a bias it is FlagGems'
``addmm`` (the bias added in the GEMM's epilogue, one launch), without one its ``mm``. ``flag_gems``
is imported on first use.
"""

from __future__ import annotations

import torch


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` in x's dtype on FlagGems' ``addmm`` / ``mm``."""
    import flag_gems

    n, k = weight.shape
    rows = x.reshape(-1, k)
    if rows.shape[0] == 0:  # an empty batch: nothing to launch
        return x.new_empty((*x.shape[:-1], n))
    if bias is None:
        out = flag_gems.mm(rows, weight.t())
    else:
        out = flag_gems.addmm(bias, rows, weight.t())
    return out.reshape(*x.shape[:-1], n)
