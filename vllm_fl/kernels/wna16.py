"""Packed integer weights of weight-only GEMMs (W4A16, W8A16): the canonical layout of the op
``wna16_gemm`` and the conversions to and from the layouts checkpoints and kernels use.

The canonical layout is the one of vLLM's portable Triton W4A16 kernel, extended to 8 bits:

- ``qweight`` [K, N / p] int32, p = 32 / bits values of consecutive output channels per int32,
  value j of a word at bits [j * bits, (j + 1) * bits) (sequential order, as GPTQ packs);
- ``scales`` [K / G, N], one row per group of G input channels (G = K: one group);
- ``qzeros`` [K / G, N / p] int32 packed like ``qweight``, or None: then every zero point is the
  type's bias, 2^(bits - 1) (8 for 4 bits, 128 for 8 bits: GPTQ's ``uint4b8``, ``uint8b128``).

A weight is ``(q - zero) * scale``. Packing along N lets the Triton kernel load a row of K once
for 8 (or 4) output channels; GPTQ packs along K instead ([K / p, N]), which is what Marlin's and
Machete's repacks start from, so the conversion runs once per weight where they are used.

Plain PyTorch (no Triton), on any device.
"""

from __future__ import annotations

import torch

SUPPORTED_BITS = (4, 8)
#: group sizes of input channels the weight-only kernels take (-1: one group over K): Marlin's,
#: which vLLM's GPTQ and AWQ methods check, and the plugin's kernel's
GROUP_SIZES = (-1, 32, 64, 128)


def pack_factor(bits: int) -> int:
    """Values per int32 word."""
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits is {bits}, expected one of {list(SUPPORTED_BITS)}")
    return 32 // bits


def default_zero(bits: int) -> int:
    """The zero point of a weight without zero points: the bias of GPTQ's unsigned types."""
    return 1 << (bits - 1)


def _shifts(bits: int, device: torch.device) -> torch.Tensor:
    return torch.arange(0, 32, bits, dtype=torch.int32, device=device)


def unpack(packed: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """The int32 values (0 .. 2^bits - 1) of ``packed`` along ``dim``, which grows by the pack
    factor; value j of a word comes from bits [j * bits, (j + 1) * bits)."""
    factor = pack_factor(bits)
    if packed.dtype != torch.int32:
        raise ValueError(f"packed weights have dtype {packed.dtype}, expected torch.int32")
    dim = dim % packed.dim()
    moved = packed.movedim(dim, -1)
    values = (moved.unsqueeze(-1) >> _shifts(bits, packed.device)) & ((1 << bits) - 1)
    values = values.reshape(*moved.shape[:-1], moved.shape[-1] * factor)
    return values.movedim(-1, dim).contiguous()


def pack(values: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """``values`` (integers 0 .. 2^bits - 1) packed into int32 along ``dim``, whose size must be
    a multiple of the pack factor; the inverse of :func:`unpack`."""
    factor = pack_factor(bits)
    dim = dim % values.dim()
    if values.shape[dim] % factor:
        raise ValueError(
            f"cannot pack {values.shape[dim]} values of {bits} bits along dimension {dim}: "
            f"expected a multiple of {factor}"
        )
    moved = values.movedim(dim, -1).to(torch.int32) & ((1 << bits) - 1)
    words = moved.reshape(*moved.shape[:-1], moved.shape[-1] // factor, factor)
    # the shifted fields do not overlap, so their sum is their bitwise or (int32 wraps at bit 31)
    packed = (words << _shifts(bits, values.device)).sum(dim=-1, dtype=torch.int32)
    return packed.movedim(-1, dim).contiguous()


def k_packed_to_canonical(qweight_k: torch.Tensor, bits: int) -> torch.Tensor:
    """GPTQ's layout [K / p, N] (packed along K) -> the canonical [K, N / p]."""
    return pack(unpack(qweight_k, bits, dim=0), bits, dim=1)


def canonical_to_k_packed(qweight: torch.Tensor, bits: int) -> torch.Tensor:
    """The canonical [K, N / p] -> GPTQ's layout [K / p, N] (Marlin's and Machete's input)."""
    return pack(unpack(qweight, bits, dim=1), bits, dim=0)


def dequantize(
    qweight: torch.Tensor,
    scales: torch.Tensor,
    bits: int,
    group_size: int,
    qzeros: torch.Tensor | None = None,
) -> torch.Tensor:
    """The float32 weight [K, N] of canonical tensors: ``(q - zero) * scale`` per group of
    ``group_size`` input channels (-1: one group). Shapes are the caller's to check."""
    q = unpack(qweight, bits, dim=1).float()
    k = q.shape[0]
    group = k if group_size == -1 else group_size
    if qzeros is None:
        zeros = torch.full((1, 1), float(default_zero(bits)), device=q.device)
    else:
        zeros = unpack(qzeros, bits, dim=1).float().repeat_interleave(group, dim=0)
    return (q - zeros) * scales.float().repeat_interleave(group, dim=0)


def quantize(
    weight: torch.Tensor, bits: int, group_size: int, zero_points: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """A float weight [K, N] quantised as GPTQ (symmetric: zero 2^(bits - 1), scale =
    max|w| / (2^(bits - 1) - 1)) or AWQ (``zero_points``: per-group min/max, zero =
    round(-min / scale)) per group of ``group_size`` input channels (-1: one group), rounding
    half to even. Returns canonical ``(qweight, scales, qzeros or None)``, scales float32."""
    k, n = weight.shape
    group = k if group_size == -1 else group_size
    if group <= 0 or k % group:
        raise ValueError(f"group_size is {group_size}, expected -1 or a divisor of K = {k}")
    w = weight.float().reshape(k // group, group, n)
    top = (1 << bits) - 1
    if zero_points:
        lo = w.amin(dim=1).clamp(max=0.0)
        hi = w.amax(dim=1).clamp(min=0.0)
        scales = ((hi - lo) / top).clamp(min=1e-8)
        zeros = torch.round(-lo / scales).clamp(0, top)
    else:
        scales = (w.abs().amax(dim=1) / (default_zero(bits) - 1)).clamp(min=1e-8)
        zeros = torch.full_like(scales, float(default_zero(bits)))
    q = torch.round(w / scales[:, None, :]) + zeros[:, None, :]
    q = q.clamp(0, top).to(torch.int32).reshape(k, n)
    qzeros = pack(zeros.to(torch.int32), bits, dim=1) if zero_points else None
    return pack(q, bits, dim=1), scales, qzeros
