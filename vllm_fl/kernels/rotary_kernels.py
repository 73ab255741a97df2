"""Rotary embedding with a token's heads spread over programs, in place or into new tensors.

FlagGems' rotary kernels run one program per token that loops over all of its heads: at decode
batch sizes a few programs do all the work, and the kernel is slower than vLLM's CUDA kernel,
which spreads a token's heads over its threads. This kernel, in FlagGems' Triton and with its
float32 arithmetic, gives each program ``BLOCK_H`` heads of one token, query heads first, then
key heads, and rotates only the first ``rotary_dim`` features of each head (vLLM's partial
rotary), in GPT-NeoX or GPT-J layout.
Out of place (the functional op, which torch.compile graphs call) it writes whole new query and
key tensors in the same one launch, where FlagGems' functional kernel takes as long as its
in-place one.

``launch_of`` derives the launch (grid, arguments, constexprs and the layout key the compiled
kernel is specialised on) from vLLM's tensors; it needs Triton but no GPU, so the CPU tests run
the kernel in Triton's interpreter. ``rotary`` launches it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_fl.kernels.launch import Launch, cdiv, next_pow2

#: heads per program; 8 heads of Llama's 128 features are 1024 elements, four warps' worth
BLOCK_H = 8
NUM_WARPS = 4


@triton.jit
def rotary_kernel(
    q_ptr,  # [tokens, q_heads * head_size], heads packed, any row stride
    k_ptr,  # [tokens, k_heads * head_size] (q_ptr where there is no key: K_HEADS is 0)
    q_out_ptr,  # where the rotated query goes: q_ptr (in place) or a new tensor
    k_out_ptr,  # likewise for the key
    cos_ptr,  # [max_positions, rotary_dim // 2], any row stride
    sin_ptr,  # like cos_ptr
    pos_ptr,  # [tokens]
    q_row,
    k_row,
    q_out_row,
    k_out_row,
    pos_stride,
    cache_row,
    Q_HEADS: tl.constexpr,
    K_HEADS: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    ROT_HALF: tl.constexpr,
    HALF_BLOCK: tl.constexpr,
    REST_BLOCK: tl.constexpr,  # out of place with rotary_dim < head_size: features copied
    BLOCK_H: tl.constexpr,
    NEOX: tl.constexpr,
):
    token = tl.program_id(0)
    block = tl.program_id(1)
    q_blocks: tl.constexpr = (Q_HEADS + BLOCK_H - 1) // BLOCK_H
    is_query = block < q_blocks
    row = token.to(tl.int64)
    if is_query:
        base = q_ptr + row * q_row
        out = q_out_ptr + row * q_out_row
    else:
        base = k_ptr + row * k_row
        out = k_out_ptr + row * k_out_row
    first = tl.where(is_query, block, block - q_blocks) * BLOCK_H
    heads = tl.where(is_query, Q_HEADS, K_HEADS)
    position = tl.load(pos_ptr + token * pos_stride).to(tl.int64)
    i = tl.arange(0, HALF_BLOCK)
    feature_mask = i < ROT_HALF
    cos = tl.load(cos_ptr + position * cache_row + i, mask=feature_mask, other=0.0)
    sin = tl.load(sin_ptr + position * cache_row + i, mask=feature_mask, other=0.0)
    cos = cos.to(tl.float32)[None, :]
    sin = sin.to(tl.float32)[None, :]
    h = first + tl.arange(0, BLOCK_H)
    head_mask = (h < heads)[:, None]
    mask = head_mask & feature_mask[None, :]
    if NEOX:
        x1_offsets = h[:, None] * HEAD_SIZE + i[None, :]
        x2_offsets = x1_offsets + ROT_HALF
    else:
        x1_offsets = h[:, None] * HEAD_SIZE + 2 * i[None, :]
        x2_offsets = x1_offsets + 1
    x1 = tl.load(base + x1_offsets, mask=mask, other=0.0)
    x2 = tl.load(base + x2_offsets, mask=mask, other=0.0)
    x1_f = x1.to(tl.float32)
    x2_f = x2.to(tl.float32)
    tl.store(out + x1_offsets, (x1_f * cos - x2_f * sin).to(x1.dtype), mask=mask)
    tl.store(out + x2_offsets, (x2_f * cos + x1_f * sin).to(x2.dtype), mask=mask)
    if REST_BLOCK > 0:
        j = tl.arange(0, REST_BLOCK)
        rest = h[:, None] * HEAD_SIZE + 2 * ROT_HALF + j[None, :]
        rest_mask = head_mask & (j < HEAD_SIZE - 2 * ROT_HALF)[None, :]
        tl.store(out + rest, tl.load(base + rest, mask=rest_mask), mask=rest_mask)


def _rows_of(x: torch.Tensor, head_size: int, tokens: int) -> int | None:
    """The row stride of x as [tokens, heads * head_size] with contiguous features (a slice of
    vLLM's qkv output), or None where it is not laid out so."""
    if x.dim() != 2:
        return None
    rows, cols = x.shape
    row_stride, col_stride = x.stride()
    if rows != tokens or col_stride != 1 or cols % head_size:
        return None
    return row_stride


def launch_of(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox_style: bool,
    query_out: torch.Tensor | None = None,
    key_out: torch.Tensor | None = None,
) -> Launch | None:
    """The launch that writes the rotated ``query`` and ``key`` to ``query_out`` and
    ``key_out`` (new tensors of their shapes), or in place where those are not given; None for
    a layout the kernel does not take (no tokens, heads not packed, dtypes that differ).
    ``cos``/``sin`` are the halves of vLLM's cos/sin cache in the query's dtype,
    [max_positions, rotary_dim // 2]. Called per op call: kept to few tensor queries."""
    if positions.dim() != 1 or rotary_dim % 2 or rotary_dim > head_size:
        return None
    num_tokens = positions.shape[0]
    cache_row, cache_col = cos.stride()
    q_row = _rows_of(query, head_size, num_tokens)
    if num_tokens == 0 or q_row is None or cache_col != 1 or sin.stride(0) != cache_row:
        return None
    k_tensor = query if key is None else key
    k_row = q_row if key is None else _rows_of(key, head_size, num_tokens)
    if k_row is None or k_tensor.dtype != query.dtype:
        return None
    in_place = query_out is None
    if in_place:
        q_out, k_out, q_out_row, k_out_row = query, k_tensor, q_row, k_row
    else:
        if (key is None) != (key_out is None) or query_out.shape != query.shape:
            return None
        q_out, k_out = query_out, (query_out if key_out is None else key_out)
        q_out_row = _rows_of(q_out, head_size, num_tokens)
        k_out_row = _rows_of(k_out, head_size, num_tokens)
        if q_out_row is None or k_out_row is None or k_out.shape != k_tensor.shape:
            return None
    q_heads = query.shape[1] // head_size
    k_heads = 0 if key is None else key.shape[1] // head_size
    rot_half = rotary_dim // 2
    rest = 0 if in_place or rotary_dim == head_size else next_pow2(head_size - rotary_dim)
    grid = (num_tokens, cdiv(q_heads, BLOCK_H) + cdiv(k_heads, BLOCK_H))
    rows = (q_row, k_row, q_out_row, k_out_row)
    pos_stride = positions.stride(0)
    args = (query, k_tensor, q_out, k_out, cos, sin, positions, *rows, pos_stride, cache_row)
    kwargs = {
        "Q_HEADS": q_heads,
        "K_HEADS": k_heads,
        "HEAD_SIZE": head_size,
        "ROT_HALF": rot_half,
        "HALF_BLOCK": next_pow2(rot_half),
        "REST_BLOCK": rest,
        "BLOCK_H": BLOCK_H,
        "NEOX": bool(is_neox_style),
        "num_warps": NUM_WARPS,
    }
    # Triton specialises integer arguments equal to 1 and divisible by 16; the row strides and
    # head counts are fixed per model, the token count is not an argument.
    layout = (
        query.dtype,
        positions.dtype,
        in_place,
        *rows,
        pos_stride,
        cache_row,
        q_heads,
        k_heads,
        head_size,
        rotary_dim,
        bool(is_neox_style),
        query.device.index,
    )
    return Launch(grid, args, kwargs, layout)
