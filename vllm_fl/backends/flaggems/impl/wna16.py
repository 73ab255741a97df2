"""Portable weight-only GEMMs. FlagGems has no dense W4A16 or W8A16 GEMM (its int4/int8
weight-only kernels are the MoE experts'), so 4-bit weights run vLLM's portable Triton kernel
(``triton_w4a16_gemm``, whose weight layout is the op's canonical one) and 8-bit weights are
dequantised in PyTorch and multiplied in x's dtype."""

import torch

from vllm_fl.backends.reference.impl.wna16 import check_wna16_args
from vllm_fl.kernels import wna16 as packing
from vllm_fl.kernels.resident import resident


def wna16_gemm(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    bits: int,
    group_size: int,
    qzeros: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """4 bits: vLLM's ``triton_w4a16_gemm``; 8 bits: the dequantised weight, then ``matmul``."""
    k, n, group = check_wna16_args(x, qweight, scales, bits, group_size, qzeros, bias)
    qweight = resident(qweight)  # a weight the cuda impl repacked gave its device memory back
    rows = x.reshape(-1, k)
    if bits == 4:
        from vllm.model_executor.kernels.linear.mixed_precision.triton_w4a16 import (
            triton_w4a16_gemm,
        )

        out = triton_w4a16_gemm(
            a=rows.contiguous(),
            b_q=qweight.contiguous(),
            # the kernel scales the weight in x's dtype before its dot product
            scales=scales.to(x.dtype).contiguous(),
            qzeros=None if qzeros is None else qzeros.contiguous(),
            group_size=group,
            zp_bias=packing.default_zero(bits),
        )
    else:
        weight = packing.dequantize(qweight, scales, bits, group, qzeros).to(x.dtype)
        out = rows @ weight
    if bias is not None:
        out = out + bias.to(out.dtype)
    return out.reshape(*x.shape[:-1], n)
