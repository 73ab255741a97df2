"""Reference weight-only GEMM (W4A16, W8A16): unpack, dequantise and multiply in float32; the
ground truth of ``wna16_gemm`` and the fake of its custom ops under torch.compile."""

import torch

from vllm_fl.dispatch import check_shape
from vllm_fl.kernels import wna16 as packing
from vllm_fl.kernels.resident import resident

OP = "wna16_gemm"


def check_wna16_args(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    bits: int,
    group_size: int,
    qzeros: torch.Tensor | None,
    bias: torch.Tensor | None,
) -> tuple[int, int, int]:
    """Check the arguments of ``wna16_gemm`` against its canonical layout; returns (K, N, G) with
    G the group size in input channels. Every impl calls it, so bad input fails alike."""
    if bits not in packing.SUPPORTED_BITS:
        raise ValueError(f"{OP}: bits is {bits}, expected one of {list(packing.SUPPORTED_BITS)}")
    if qweight.dtype != torch.int32:
        raise ValueError(f"{OP}: argument 'qweight' has dtype {qweight.dtype}, expected int32")
    k = x.shape[-1]
    check_shape(OP, "qweight", qweight, (k, None))
    n = qweight.shape[1] * packing.pack_factor(bits)
    group = k if group_size == -1 else group_size
    if group <= 0 or k % group:
        raise ValueError(
            f"{OP}: group_size is {group_size}, expected -1 or a positive divisor of K = {k}"
        )
    check_shape(OP, "scales", scales, (k // group, n))
    if not scales.is_floating_point():
        raise ValueError(f"{OP}: argument 'scales' has dtype {scales.dtype}, expected a float")
    if qzeros is not None:
        if qzeros.dtype != torch.int32:
            raise ValueError(f"{OP}: argument 'qzeros' has dtype {qzeros.dtype}, expected int32")
        check_shape(OP, "qzeros", qzeros, (k // group, qweight.shape[1]))
    if bias is not None:
        check_shape(OP, "bias", bias, (n,))
    return k, n, group


def wna16_gemm(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    bits: int,
    group_size: int,
    qzeros: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Weight-only quantized GEMM (W4A16, W8A16: GPTQ, AWQ, compressed-tensors), x @ W + bias in
    x's dtype, with x [..., K] and W [K, N] = (q - zero) * scale per group of group_size input
    channels (-1: one group over K). Canonical layout (vllm_fl.kernels.wna16): qweight [K, N /
    p] int32 holding p = 32 / bits values of consecutive output channels, the first in the lowest
    bits; scales [K / G, N] in x's dtype or float32; qzeros [K / G, N / p] int32 packed like
    qweight, or None for the zero point 2^(bits - 1) (GPTQ's uint4b8 / uint8b128); bits 4 or 8.
    """
    k, n, group = check_wna16_args(x, qweight, scales, bits, group_size, qzeros, bias)
    # a weight the cuda impl repacked gave its device memory back
    weight = packing.dequantize(resident(qweight), scales, bits, group, qzeros)
    out = x.reshape(-1, k).float() @ weight
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype).reshape(*x.shape[:-1], n)


def wna16_gemm_round_trip(
    originals: dict[str, torch.Tensor], arguments: dict[str, object]
) -> torch.Tensor:
    """The float32 GEMM ``wna16_gemm`` approximates when ``qweight`` is a float weight [K, N]
    quantised (``scales``, ``qzeros`` its scales and zero points): ``x @ weight`` + bias."""
    x = arguments["x"]
    assert isinstance(x, torch.Tensor)
    weight = originals["qweight"].float()
    out = x.reshape(-1, weight.shape[0]).float() @ weight
    bias = arguments.get("bias")
    if isinstance(bias, torch.Tensor):
        out = out + bias.float()
    return out.reshape(*x.shape[:-1], weight.shape[1])
