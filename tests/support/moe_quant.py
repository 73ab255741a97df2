"""Quantised MoE expert weights for the tests, written independently of the code under test.

Each quantiser takes float expert weights [E, N, K] and returns them in the layout vLLM's Triton
experts read (``fused_experts_quant``'s doc), with the scales (and zero points) and the float
weights the quantised values stand for, which the unquantized ``fused_experts`` then computes
with.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FP8_MAX = torch.finfo(torch.float8_e4m3fn).max


@dataclass
class QuantizedExperts:
    """One expert weight in a format: what the op gets, and the weight it stands for."""

    weight: torch.Tensor
    scale: torch.Tensor
    zero_point: torch.Tensor | None
    dequantised: torch.Tensor


def fp8_blocks(w: torch.Tensor, bn: int = 128, bk: int = 128) -> QuantizedExperts:
    """float8_e4m3fn values, scales [E, N / bn, K / bk]."""
    e, n, k = w.shape
    blocks = w.float().reshape(e, n // bn, bn, k // bk, bk)
    scale = blocks.abs().amax(dim=(2, 4)).clamp(min=1e-12) / FP8_MAX
    q = (blocks / scale[:, :, None, :, None]).to(torch.float8_e4m3fn)
    dequant = (q.float() * scale[:, :, None, :, None]).reshape(e, n, k)
    return QuantizedExperts(q.reshape(e, n, k), scale, None, dequant)


def fp8_experts(w: torch.Tensor) -> QuantizedExperts:
    """float8_e4m3fn values, one scale per expert [E]."""
    scale = w.float().abs().amax(dim=(1, 2)).clamp(min=1e-12) / FP8_MAX
    q = (w.float() / scale[:, None, None]).to(torch.float8_e4m3fn)
    return QuantizedExperts(q, scale, None, q.float() * scale[:, None, None])


def int8_channels(w: torch.Tensor) -> QuantizedExperts:
    """int8 values, one scale per output channel [E, N]."""
    scale = w.float().abs().amax(dim=-1).clamp(min=1e-12) / 127
    q = torch.round(w.float() / scale[..., None]).clamp(-128, 127).to(torch.int8)
    return QuantizedExperts(q, scale, None, q.float() * scale[..., None])


def groups(w: torch.Tensor, group: int, bits: int, zero_points: bool) -> QuantizedExperts:
    """Unsigned `bits`-bit values per group of `group` along K, scales [E, N, K / group], offset
    by zero points (asymmetric) or the format's fixed 2^(bits-1); 4-bit values packed two per
    byte along K (the even index in the low nibble), 4-bit zero points two per byte along N."""
    e, n, k = w.shape
    levels = 2**bits - 1
    g = w.float().reshape(e, n, k // group, group)
    if zero_points:
        lo, hi = g.amin(-1), g.amax(-1)
        scale = ((hi - lo) / levels).clamp(min=1e-12)
        zp = torch.round(-lo / scale).clamp(0, levels)
    else:
        scale = (g.abs().amax(-1) / (levels // 2)).clamp(min=1e-12)
        zp = torch.full_like(scale, float(levels // 2 + 1))
    q = torch.round(g / scale[..., None] + zp[..., None]).clamp(0, levels)
    dequant = ((q - zp[..., None]) * scale[..., None]).reshape(e, n, k)
    q = q.reshape(e, n, k).to(torch.uint8)
    zp = zp.to(torch.uint8)
    if bits == 4:
        q = q[..., 0::2] | (q[..., 1::2] << 4)
        zp = zp[:, 0::2] | (zp[:, 1::2] << 4)
    return QuantizedExperts(q, scale, zp if zero_points else None, dequant)


def routing(tokens: int, experts: int, top_k: int, generator: torch.Generator):
    """Softmax-normalised weights [tokens, top_k] (float32) over distinct experts (int32)."""
    ids = torch.stack([torch.randperm(experts, generator=generator)[:top_k] for _ in range(tokens)])
    weights = torch.rand(tokens, top_k, generator=generator).softmax(-1)
    return weights, ids.to(torch.int32)


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return ((got.float() - expected.float()).norm() / expected.float().norm()).item()
