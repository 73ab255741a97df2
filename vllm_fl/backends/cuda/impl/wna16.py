"""CUDA weight-only GEMMs: the kernel vanilla vLLM chooses for the layer on that GPU, fed with
weights repacked once.

vLLM's CUDA row of ``_POSSIBLE_KERNELS`` tries Machete (Hopper, CUTLASS), then Marlin
(AllSpark before it only on Ampere; the W4A8 kernels do not take 16-bit activations);
:func:`choose_kernel` applies the same checks to the op's arguments. Both kernels want their own
weight layout, made from the canonical one (``vllm_fl.kernels.wna16``) at the first call for a
weight tensor and remembered while that tensor lives (``TensorMemo``): a call repacks nothing.
Once repacked, a layer's canonical weight gives its device memory back
(``vllm_fl.kernels.resident``), so the model holds its weights once, as vanilla vLLM does;
another backend reading the canonical (a fallback, the verifier's reference) brings it back.

What neither kernel takes (8-bit with zero points off Hopper, group sizes or shapes outside
their tiles, float32 activations) is dequantised and multiplied in x's dtype.
"""

from __future__ import annotations

import functools

import torch

from vllm_fl import compat
from vllm_fl.backends.reference.impl.wna16 import check_wna16_args
from vllm_fl.kernels import wna16 as packing
from vllm_fl.kernels.memo import TensorMemo
from vllm_fl.kernels.resident import release, resident

MACHETE = "machete"
MARLIN = "marlin"
DEQUANTISED = "dequantised"

_HALF_DTYPES = (torch.float16, torch.bfloat16)
# vLLM's machete_utils / marlin_utils
_MACHETE_GROUP_SIZES = (-1, 64, 128)
_MACHETE_BLOCK_K, _MACHETE_BLOCK_N = 64, 128
_MARLIN_GROUP_SIZES = (-1, 32, 64, 128)
_MARLIN_MIN_CAPABILITY = 75

_marlin_weights = TensorMemo()
_marlin_scales = TensorMemo()
_marlin_zeros = TensorMemo()
_marlin_bias = TensorMemo()
_machete_weights = TensorMemo()
_machete_zeros = TensorMemo()


def choose_kernel(
    bits: int,
    zero_points: bool,
    group_size: int,
    k: int,
    n: int,
    dtype: torch.dtype,
    capability: tuple[int, int],
) -> str:
    """The kernel vLLM's CUDA row would take for this layer: ``MACHETE`` on compute capability
    9.0 (16-bit activations, group size -1/64/128, K % 64 and N % 128), else ``MARLIN`` from 7.5
    (4 or 8 bits without zero points or 4 bits with them, group size -1/32/64/128, tile-aligned
    N and K: vLLM 0.24 pads other shapes, this impl does not), else ``DEQUANTISED``.
    ``group_size`` -1 means one group over K."""
    if dtype not in _HALF_DTYPES:
        return DEQUANTISED
    major, minor = capability
    if (
        (major, minor) == (9, 0)
        and group_size in _MACHETE_GROUP_SIZES
        and k % _MACHETE_BLOCK_K == 0
        and n % _MACHETE_BLOCK_N == 0
    ):
        return MACHETE
    marlin_types = bits == 4 or not zero_points
    marlin_tiles = (n % 64 == 0 and k % 128 == 0) or (n % 128 == 0 and k % 64 == 0)
    if (
        major * 10 + minor >= _MARLIN_MIN_CAPABILITY
        and marlin_types
        and group_size in _MARLIN_GROUP_SIZES
        and marlin_tiles
    ):
        return MARLIN
    return DEQUANTISED


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def _scalar_type(bits: int, zero_points: bool):
    from vllm.scalar_type import scalar_types

    if zero_points:
        return scalar_types.uint4 if bits == 4 else scalar_types.uint8
    return scalar_types.uint4b8 if bits == 4 else scalar_types.uint8b128


def wna16_gemm(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    bits: int,
    group_size: int,
    qzeros: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``machete_mm`` or Marlin's ``marlin_gemm`` on weights repacked once (see the module)."""
    k, n, group = check_wna16_args(x, qweight, scales, bits, group_size, qzeros, bias)
    group_size = -1 if group == k else group
    rows = x.reshape(-1, k)
    kernel = choose_kernel(
        bits, qzeros is not None, group_size, k, n, x.dtype, _capability(x.device.index or 0)
    )
    if kernel == MACHETE:
        out = _machete(rows, qweight, scales, bits, group_size, qzeros)
        if bias is not None:
            out = out + bias.to(out.dtype)
    elif kernel == MARLIN:
        out = _marlin(rows, qweight, scales, bits, group_size, qzeros, bias, k, n)
    else:
        weight = packing.dequantize(resident(qweight), scales, bits, group, qzeros).to(x.dtype)
        out = rows @ weight
        if bias is not None:
            out = out + bias.to(out.dtype)
    return out.reshape(*x.shape[:-1], n)


def _replacing(qweight: torch.Tensor, repack) -> torch.Tensor:
    """``repack(qweight)``, after which the canonical ``qweight`` gives its device memory back
    (where it is a layer's weight): the repacked copy replaces it, as in vanilla vLLM."""
    repacked = repack(resident(qweight))
    release(qweight)
    return repacked


def _machete(rows, qweight, scales, bits, group_size, qzeros):
    from vllm import _custom_ops as ops

    dtype = rows.dtype
    b_type = _scalar_type(bits, qzeros is not None)
    prepacked = _machete_weights.get(
        qweight,
        (bits, qzeros is not None, dtype),
        # Machete's prepack reads GPTQ's K-packed weight column-major, as vLLM's kernel hands it
        lambda: _replacing(
            qweight,
            lambda canonical: ops.machete_prepack_B(
                packing.canonical_to_k_packed(canonical, bits).t().contiguous().t(),
                a_type=dtype,
                b_type=b_type,
                group_scales_type=dtype,
            ),
        ),
    )
    group_scales = scales.to(dtype).contiguous()
    zeros = None
    if qzeros is not None:
        # Machete takes -zero * scale per group, as vLLM's kernel pre-applies it
        zeros = _machete_zeros.get(
            qzeros,
            (id(scales), scales._version, dtype),
            lambda: (-group_scales * packing.unpack(qzeros, bits, dim=1).to(dtype)).contiguous(),
        )
    return ops.machete_mm(
        a=rows.contiguous(),
        b_q=prepacked,
        b_type=b_type,
        b_group_scales=group_scales,
        b_group_zeros=zeros,
        b_group_size=group_size,
    )


@functools.cache
def _workspace(device: torch.device) -> torch.Tensor:
    from vllm.model_executor.layers.quantization.utils.marlin_utils import (
        marlin_make_workspace_new,
    )

    return marlin_make_workspace_new(device)


@functools.cache
def _empty(device: torch.device) -> torch.Tensor:
    return torch.empty(0, dtype=torch.int32, device=device)


def _marlin(rows, qweight, scales, bits, group_size, qzeros, bias, k, n):
    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.quantization.utils import marlin_utils

    device, dtype = rows.device, rows.dtype
    weight = _marlin_weights.get(
        qweight,
        (bits, k, n),
        lambda: _replacing(
            qweight,
            lambda canonical: compat.call_with_supported(
                ops.gptq_marlin_repack,
                b_q_weight=packing.canonical_to_k_packed(canonical, bits),
                perm=_empty(device),
                size_k=k,
                size_n=n,
                num_bits=bits,
            ),
        ),
    )
    marlin_scales = _marlin_scales.get(
        scales,
        (group_size, k, n, dtype),
        lambda: marlin_utils.marlin_permute_scales(
            scales.to(dtype).contiguous(), size_k=k, size_n=n, group_size=group_size
        ),
    )
    if qzeros is None:
        zeros = _empty(device)
    else:
        zeros = _marlin_zeros.get(
            qzeros,
            (bits, n),
            lambda: marlin_utils.marlin_zero_points(
                packing.unpack(qzeros, bits, dim=1),
                size_k=qzeros.shape[0],
                size_n=n,
                num_bits=bits,
            ),
        )
    if bias is not None:
        # Marlin adds the bias in its epilogue, in the order of its scales
        bias = _marlin_bias.get(
            bias, (dtype,), lambda: marlin_utils.marlin_permute_bias(bias.to(dtype))
        )
    return compat.call_with_supported(
        marlin_utils.apply_gptq_marlin_linear,
        input=rows,
        weight=weight,
        weight_scale=marlin_scales,
        weight_zp=zeros,
        g_idx=_empty(device),
        g_idx_sort_indices=_empty(device),
        workspace=_workspace(device),
        wtype=_scalar_type(bits, qzeros is not None),
        output_size_per_partition=n,
        input_size_per_partition=k,
        is_k_full=True,
        bias=bias,
    )
