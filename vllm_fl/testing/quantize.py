"""Quantisation schemes for test inputs: a float32 tensor -> (quantised values, scales, zeros).

The generated parity tests build an input ``{quantize: [shape], scheme: S, ...}`` of ``ops.yaml``
with ``SCHEMES[S]``, so a quantized op is tested on values and scales that belong together, as
vLLM's checkpoints and activation quantisers make them. Plain PyTorch, deterministic, CPU or GPU.

The conventions are vLLM's (``quantization/utils/fp8_utils.py``, ``quant_utils.py``,
``input_quant_fp8.py``, the INT8 kernels of ``_custom_ops``): a scale multiplies the quantised
value back, ``x ~= q * scale`` (``x ~= (q - zero) * scale`` with a zero point), scales are
float32 and zero points int32.

FP8 (``float8_e4m3fn``, largest value 448): ``scale = max(amax / 448, 1 / (448 * 512))`` over a
group (the floor is vLLM's ``_FP8_MIN_SCALING_FACTOR``, which keeps an all-zero group finite),
``q = clamp(x / scale, -448, 448)`` cast to FP8 (round to nearest even).

- ``fp8_tensor``: one scale for the tensor, ``scales`` [1]; any shape.
- ``fp8_token``: one scale per row of x [M, K], ``scales`` [M, 1] (vLLM's dynamic per-token
  activation scales).
- ``fp8_group``, group ``(1, g)``: one scale per row and group of g columns of x [M, K],
  ``scales`` [M, ceil(K / g)] (vLLM's ``per_token_group_quant_fp8``, DeepSeek-style
  activations; the last group may be partial).
- ``fp8_block``, group ``(bn, bk)``: one scale per bn x bk block of a weight [N, K] or of each
  expert's weight of [E, N, K]: ``scales`` [ceil(N / bn), ceil(K / bk)] or
  [E, ceil(N / bn), ceil(K / bk)] (vLLM's ``weight_scale_inv`` of block-quantised checkpoints;
  edge blocks may be partial).

INT8 (range [-128, 127]), round half to even as vLLM's kernels, saturated:

- ``int8_tensor``: symmetric, ``scale = amax / 127`` over the tensor, ``scales`` [1],
  ``q = round(x * 127 / amax)``; any shape.
- ``int8_token``: the same per row of x [M, K], ``scales`` [M, 1] (``scaled_int8_quant`` without
  a scale). ``int8_channel`` is the same function: a weight [N, K] quantised per output channel,
  ``scales`` [N, 1] (compressed-tensors W8A8 weights).
- ``int8_token_asym``: asymmetric per row of x [M, K]: ``scale = (max - min) / 255``,
  ``zero = round(-128 - min / scale)`` (int32, ``zeros`` [M, 1]),
  ``q = clamp(round(x / scale) + zero)``; a row's minimum lands on -128 and its maximum on 127,
  and the zero point is in [-128, 127] when the row holds 0 between them. A constant row (scale
  0) has no such quantisation; rows of random values never are constant.

Weight-only integer weights (W4A16, W8A16, GPTQ and AWQ checkpoints) in the canonical layout of
the op ``wna16_gemm`` (``vllm_fl.kernels.wna16``), quantised from a float weight x [K, N] per group
of G input channels, group ``(G,)`` (G = K: one group over K, the op's ``group_size`` -1):

- ``wna16_w4``, ``wna16_w8``: symmetric as GPTQ, ``scale = max|x| / (2^(bits - 1) - 1)`` over a
  group and output channel, ``q = round(x / scale) + 2^(bits - 1)`` in [0, 2^bits - 1] (the
  zero point the op assumes without zero points); no ``zeros``.
- ``wna16_w4_zp``, ``wna16_w8_zp``: asymmetric as AWQ, over a group's range widened to hold 0:
  ``scale = (max - min) / (2^bits - 1)``, ``zero = round(-min / scale)``,
  ``q = clamp(round(x / scale) + zero, 0, 2^bits - 1)``.

``q`` is the packed int32 ``qweight`` [K, N / p] (p = 32 / bits values of consecutive output
channels per word, the first in the lowest bits), ``scales`` [K / G, N] float32 and ``zeros`` the
packed int32 ``qzeros`` [K / G, N / p]; rounding is half to even.

A group is given exactly to the schemes that take one (``fp8_group``, ``fp8_block``, the
``wna16_*`` ones); the others refuse one. Every scheme refuses a shape it does not quantise with a
``ValueError`` naming the scheme, the bad value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from vllm_fl.kernels import wna16 as packing

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448
#: vLLM's floor of a dynamic FP8 scale (``input_quant_fp8._FP8_MIN_SCALING_FACTOR``)
FP8_MIN_SCALE = 1.0 / (FP8_MAX * 512.0)
INT8_MIN, INT8_MAX = -128, 127


@dataclass(frozen=True)
class Quantized:
    """A quantised tensor: ``x ~= q * scales`` (broadcast over their groups), or
    ``(q - zeros) * scales`` for an asymmetric scheme."""

    q: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor | None = None


Scheme = Callable[[torch.Tensor, tuple[int, ...] | None], Quantized]


def _fail(scheme: str, what: str, expected: str) -> ValueError:
    return ValueError(f"quantisation scheme {scheme!r}: {what}, expected {expected}")


def _no_group(scheme: str, group: tuple[int, ...] | None) -> None:
    if group is not None:
        raise _fail(scheme, f"group is {list(group)}", "no group (the scheme has fixed groups)")


def _group(scheme: str, group: tuple[int, ...] | None, pattern: str) -> tuple[int, int]:
    if group is None or len(group) != 2 or any(int(g) <= 0 for g in group):
        shown = None if group is None else list(group)
        raise _fail(scheme, f"group is {shown}", f"{pattern} of positive integers")
    return int(group[0]), int(group[1])


def _rank(scheme: str, x: torch.Tensor, ranks: tuple[int, ...], shape: str) -> None:
    if x.dim() not in ranks:
        raise _fail(scheme, f"x has shape {list(x.shape)}", f"a tensor {shape}")


def _block_amax(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The largest |x| of each rows x cols block of the last two dimensions (edge blocks may be
    partial): [..., ceil(N / rows), ceil(K / cols)]."""
    n, k = x.shape[-2:]
    nb, kb = -(-n // rows), -(-k // cols)
    padded = torch.nn.functional.pad(x.abs(), (0, kb * cols - k, 0, nb * rows - n))
    blocks = padded.reshape(*x.shape[:-2], nb, rows, kb, cols)
    return blocks.amax(dim=(-3, -1))


def _expand(scales: torch.Tensor, rows: int, cols: int, shape: torch.Size) -> torch.Tensor:
    """Block scales [..., nb, kb] repeated over their blocks and cut to ``shape``."""
    full = scales.repeat_interleave(rows, dim=-2).repeat_interleave(cols, dim=-1)
    return full[..., : shape[-2], : shape[-1]]


def _fp8(x: torch.Tensor, amax: torch.Tensor, rows: int, cols: int) -> Quantized:
    scales = (amax.float() / FP8_MAX).clamp(min=FP8_MIN_SCALE)
    per_value = _expand(scales, rows, cols, x.shape)
    q = (x.float() / per_value).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return Quantized(q, scales)


def fp8_tensor(x: torch.Tensor, group: tuple[int, ...] | None = None) -> Quantized:
    """FP8, one scale for the whole tensor: ``scales`` [1]."""
    _no_group("fp8_tensor", group)
    scale = (x.float().abs().amax() / FP8_MAX).clamp(min=FP8_MIN_SCALE).reshape(1)
    q = (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return Quantized(q, scale)


def fp8_token(x: torch.Tensor, group: tuple[int, ...] | None = None) -> Quantized:
    """FP8, one scale per row of x [M, K]: ``scales`` [M, 1]."""
    _no_group("fp8_token", group)
    _rank("fp8_token", x, (2,), "[M, K]")
    return _fp8(x, _block_amax(x, 1, x.shape[-1]), 1, x.shape[-1])


def fp8_group(x: torch.Tensor, group: tuple[int, ...] | None = None) -> Quantized:
    """FP8, one scale per row and group of g columns of x [M, K], group ``(1, g)``:
    ``scales`` [M, ceil(K / g)]."""
    rows, cols = _group("fp8_group", group, "[1, g]")
    if rows != 1:
        raise _fail("fp8_group", f"group is {list(group or ())}", "[1, g] (groups of one row)")
    _rank("fp8_group", x, (2,), "[M, K]")
    return _fp8(x, _block_amax(x, 1, cols), 1, cols)


def fp8_block(x: torch.Tensor, group: tuple[int, ...] | None = None) -> Quantized:
    """FP8, one scale per bn x bk block of x [N, K] or [E, N, K], group ``(bn, bk)``:
    ``scales`` [ceil(N / bn), ceil(K / bk)], with a leading E for 3-D x."""
    rows, cols = _group("fp8_block", group, "[bn, bk]")
    _rank("fp8_block", x, (2, 3), "[N, K] or [E, N, K]")
    return _fp8(x, _block_amax(x, rows, cols), rows, cols)


def _int8_symmetric(x: torch.Tensor, amax: torch.Tensor) -> Quantized:
    amax = amax.float()
    # x * (127 / amax), as vLLM's kernels compute it; an all-zero group quantises to 0
    inverse = torch.where(amax > 0, INT8_MAX / amax, torch.zeros_like(amax))
    q = torch.round(x.float() * inverse).clamp(INT8_MIN, INT8_MAX).to(torch.int8)
    return Quantized(q, amax / INT8_MAX)


def int8_tensor(x: torch.Tensor, group: tuple[int, ...] | None = None) -> Quantized:
    """INT8 symmetric, one scale for the whole tensor: ``scales`` [1]."""
    _no_group("int8_tensor", group)
    return _int8_symmetric(x, x.float().abs().amax().reshape(1))


def int8_token(x: torch.Tensor, group: tuple[int, ...] | None = None) -> Quantized:
    """INT8 symmetric, one scale per row of x [M, K]: ``scales`` [M, 1]; also a weight [N, K]
    per output channel (``int8_channel``)."""
    _no_group("int8_token", group)
    _rank("int8_token", x, (2,), "[M, K]")
    return _int8_symmetric(x, x.float().abs().amax(dim=-1, keepdim=True))


def int8_token_asym(x: torch.Tensor, group: tuple[int, ...] | None = None) -> Quantized:
    """INT8 asymmetric per row of x [M, K]: ``scales`` [M, 1] float32, ``zeros`` [M, 1] int32."""
    _no_group("int8_token_asym", group)
    _rank("int8_token_asym", x, (2,), "[M, K]")
    xf = x.float()
    lo = xf.amin(dim=-1, keepdim=True)
    hi = xf.amax(dim=-1, keepdim=True)
    scales = (hi - lo) / (INT8_MAX - INT8_MIN)
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    zeros = torch.round(INT8_MIN - lo / safe)
    q = (torch.round(xf / safe) + zeros).clamp(INT8_MIN, INT8_MAX).to(torch.int8)
    return Quantized(q, scales, zeros.to(torch.int32))


def _wna16(scheme: str, bits: int, zero_points: bool) -> Scheme:
    """A weight-only scheme of ``bits`` bits: x [K, N] -> canonical (qweight, scales, qzeros)."""

    def quantize_weight(x: torch.Tensor, group: tuple[int, ...] | None = None) -> Quantized:
        if group is None or len(group) != 1 or int(group[0]) <= 0:
            shown = None if group is None else list(group)
            raise _fail(scheme, f"group is {shown}", "[G], a positive integer")
        _rank(scheme, x, (2,), "[K, N]")
        k, n = x.shape
        size = int(group[0])
        if k % size:
            raise _fail(scheme, f"group is {[size]} for K = {k}", "[G] with G dividing K")
        factor = packing.pack_factor(bits)
        if n % factor:
            raise _fail(scheme, f"x has shape {[k, n]}", f"[K, N] with N a multiple of {factor}")
        qweight, scales, qzeros = packing.quantize(x, bits, size, zero_points=zero_points)
        return Quantized(qweight, scales, qzeros)

    quantize_weight.__name__ = quantize_weight.__qualname__ = scheme
    quantize_weight.__doc__ = (
        f"{bits}-bit weight x [K, N] per group [G] of input channels, "
        + ("asymmetric (AWQ): " if zero_points else "symmetric (GPTQ): ")
        + "canonical ``wna16_gemm`` qweight [K, N / p], scales [K / G, N]"
        + (", qzeros [K / G, N / p]." if zero_points else ".")
    )
    return quantize_weight


wna16_w4 = _wna16("wna16_w4", 4, zero_points=False)
wna16_w4_zp = _wna16("wna16_w4_zp", 4, zero_points=True)
wna16_w8 = _wna16("wna16_w8", 8, zero_points=False)
wna16_w8_zp = _wna16("wna16_w8_zp", 8, zero_points=True)


#: scheme name -> function; the names ``ops.yaml`` accepts for ``scheme:`` (the generator keeps
#: the same names with their group and zero points in ``codegen.model.QUANT_SCHEMES``)
SCHEMES: dict[str, Scheme] = {
    "fp8_tensor": fp8_tensor,
    "fp8_token": fp8_token,
    "fp8_group": fp8_group,
    "fp8_block": fp8_block,
    "int8_tensor": int8_tensor,
    "int8_token": int8_token,
    "int8_channel": int8_token,
    "int8_token_asym": int8_token_asym,
    "wna16_w4": wna16_w4,
    "wna16_w4_zp": wna16_w4_zp,
    "wna16_w8": wna16_w8,
    "wna16_w8_zp": wna16_w8_zp,
}


def quantize(x: torch.Tensor, scheme: str, group: tuple[int, ...] | None = None) -> Quantized:
    """``x`` quantised with the scheme named ``scheme``."""
    fn = SCHEMES.get(scheme)
    if fn is None:
        raise ValueError(f"unknown quantisation scheme {scheme!r}, expected one of {list(SCHEMES)}")
    return fn(x, group)
