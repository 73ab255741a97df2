"""Residual add and RMS normalisation into new tensors, in one launch.

The functional rms_norm with a residual (the op torch.compile graphs call: they may not write
into their inputs) returns ``(rms_norm(x + residual), x + residual)``. FlagGems' fused kernel
writes both into its inputs; adding with torch and normalising the sum with FlagGems'
out-of-place kernel takes two launches where Inductor, compiling vLLM's native formula, makes
one. This kernel reads x and the residual once and writes both results, one program per
row, with the arithmetic of FlagGems' rms_norm kernel: the sum rounded to x's dtype (as torch's
add and vLLM's CUDA kernel round it), its mean square in float32, then
``sum * rrms * weight`` in float32, rounded once.

``rms_norm_rows_kernel`` normalises rows that are views at any stride (Qwen3's per-head query and
key norms take [tokens, heads, head_size] views of the qkv projection's rows) into a new
contiguous tensor, with the same arithmetic and without copying them first, as FlagGems'
function does.

``add_rms_norm_launch`` and ``rms_norm_rows_launch`` need Triton but no GPU, so the CPU tests run
the kernels in Triton's interpreter. ``norm`` launches them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_fl.kernels.launch import Launch, next_pow2

#: the widest row one program holds (Llama-3-8B's hidden size is 4096)
MAX_ROW = 16384


@triton.jit
def add_rms_norm_kernel(
    x_ptr,  # [rows, n]
    residual_ptr,  # [rows, n]
    weight_ptr,  # [n]
    out_ptr,  # [rows, n], new
    total_ptr,  # [rows, n], new: x + residual
    n,
    eps,
    x_row,
    residual_row,
    out_row,
    total_row,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n
    x = tl.load(x_ptr + row * x_row + cols, mask=mask, other=0.0)
    residual = tl.load(residual_ptr + row * residual_row + cols, mask=mask, other=0.0)
    total = (x.to(tl.float32) + residual.to(tl.float32)).to(x.dtype)
    tl.store(total_ptr + row * total_row + cols, total, mask=mask)
    total_f = total.to(tl.float32)
    rrms = 1.0 / tl.sqrt(tl.sum(total_f * total_f, axis=0) / n + eps)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * out_row + cols, (total_f * rrms * weight).to(x.dtype), mask=mask)


def add_rms_norm_launch(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    out: torch.Tensor,
    total: torch.Tensor,
) -> Launch | None:
    """The launch writing ``out`` and ``total`` (new contiguous tensors of x's shape), or None
    for what the kernel does not take (not 2-D, strided features, rows wider than ``MAX_ROW``,
    dtypes that differ, no rows). Called per op call: kept to few tensor queries."""
    if x.dim() != 2 or residual.dim() != 2:
        return None
    rows, n = x.shape
    x_row, x_col = x.stride()
    residual_row, residual_col = residual.stride()
    if (
        not 0 < n <= MAX_ROW
        or rows == 0
        or x_col != 1
        or residual_col != 1
        or residual.shape != x.shape
        or residual.dtype != x.dtype
        or weight.shape != (n,)
        or weight.stride(0) != 1
    ):
        return None
    block = next_pow2(n)
    kwargs = {"BLOCK_N": block, "num_warps": 4 if block <= 2048 else 8 if block <= 8192 else 16}
    args = (x, residual, weight, out, total, n, float(eps), x_row, residual_row, n, n)
    layout = (x.dtype, weight.dtype, n, x_row, residual_row, x.device.index)
    return Launch((rows,), args, kwargs, layout)


@triton.jit
def rms_norm_rows_kernel(
    x_ptr,  # [outer, inner, n]: features contiguous, any outer and inner stride
    weight_ptr,  # [n]
    out_ptr,  # [outer * inner, n], new
    n,
    eps,
    inner,
    x_outer,
    x_inner,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    outer = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n
    mask = (rows < inner)[:, None] & col_mask[None, :]
    x = tl.load(
        x_ptr + outer * x_outer + rows[:, None].to(tl.int64) * x_inner + cols[None, :],
        mask=mask,
        other=0.0,
    ).to(tl.float32)
    rrms = 1 / tl.sqrt(tl.sum(x * x, axis=1) / n + eps)
    weight = tl.load(weight_ptr + cols, mask=col_mask, other=0.0)
    out = x * rrms[:, None] * weight[None, :]
    out_rows = outer * inner + rows[:, None]
    tl.store(out_ptr + out_rows * n + cols[None, :], out.to(out_ptr.dtype.element_ty), mask=mask)


#: elements one program of ``rms_norm_rows_kernel`` normalises (rows of up to this width)
ROWS_BLOCK = 2048
_ROWS_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def rms_norm_rows_launch(
    x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor
) -> Launch | None:
    """The launch writing ``rms_norm(x)`` into ``out`` (new and contiguous, x's shape and
    dtype) for x of one to three dimensions whose features are contiguous and whose rows are at
    any stride: vLLM's per-head query/key norms (Qwen3) hand over [tokens, heads, head_size]
    views of the qkv projection, which FlagGems' rms_norm would copy first. None for what the
    kernel does not take (more dimensions, strided features, rows wider than ``MAX_ROW``,
    dtypes other than half, bfloat16 and float32, no rows). The arithmetic is FlagGems'
    rms_norm kernel's: float32, ``x * rrms * weight``, one rounding."""
    if x.dim() > 3 or x.dtype not in _ROWS_DTYPES or weight.dtype not in _ROWS_DTYPES:
        return None
    shape, strides = (1, 1, *x.shape)[-3:], (0, 0, *x.stride())[-3:]
    outer, inner, n = shape
    if not 0 < n <= MAX_ROW or strides[2] != 1 or x.numel() == 0:
        return None
    if weight.shape != (n,) or weight.stride(0) != 1:
        return None
    block_n = next_pow2(n)
    block_rows = min(next_pow2(inner), max(ROWS_BLOCK // block_n, 1))
    kwargs = {
        "BLOCK_ROWS": block_rows,
        "BLOCK_N": block_n,
        "num_warps": 4 if block_rows * block_n <= 2048 else 8 if block_n <= 8192 else 16,
    }
    args = (x, weight, out, n, float(eps), inner, strides[0], strides[1])
    layout = (x.dtype, weight.dtype, n, inner, strides[0], strides[1], x.device.index)
    return Launch((outer, -(-inner // block_rows)), args, kwargs, layout)
