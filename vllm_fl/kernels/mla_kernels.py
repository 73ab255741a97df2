"""The MLA context gather: cached latent entries read back into a dense workspace, in one
launch.

vLLM's MLA prefill reads each prefill's earlier tokens back from the paged latent cache before
expanding them into keys and values (``gather_and_maybe_dequant_cache``); FlagGems has no such
kernel and vLLM's is CUDA C++. One program per gathered row: it finds its sequence
(``token_to_seq``), its position in that sequence (its offset from the sequence's first row, plus
the sequence's start in the cache), the block holding that position, and copies the entry.

``gather_cache_launch`` needs Triton but no GPU, so the CPU tests run the kernel in Triton's
interpreter. ``mla`` launches it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_fl.kernels.launch import Launch, next_pow2


@triton.jit
def gather_cache_kernel(
    src_ptr,  # [num_blocks, block_size, ENTRY]
    dst_ptr,  # [rows, ENTRY]
    block_table_ptr,  # [sequences, blocks per sequence], int32
    cu_seq_lens_ptr,  # [sequences + 1], int32
    token_to_seq_ptr,  # [>= num_tokens], int32
    seq_starts_ptr,  # [sequences], int32 (unread without HAS_STARTS)
    block_size,
    block_table_stride,
    cache_block_stride,
    cache_entry_stride,
    dst_row_stride,
    ENTRY: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_STARTS: tl.constexpr,
):
    row = tl.program_id(0)
    seq = tl.load(token_to_seq_ptr + row).to(tl.int64)
    position = row - tl.load(cu_seq_lens_ptr + seq).to(tl.int64)
    if HAS_STARTS:
        position += tl.load(seq_starts_ptr + seq).to(tl.int64)
    block = tl.load(block_table_ptr + seq * block_table_stride + position // block_size)
    source = (
        src_ptr
        + block.to(tl.int64) * cache_block_stride
        + (position % block_size) * cache_entry_stride
    )
    target = dst_ptr + row.to(tl.int64) * dst_row_stride
    cols = tl.arange(0, BLOCK)
    mask = cols < ENTRY
    entry = tl.load(source + cols, mask=mask)
    tl.store(target + cols, entry.to(dst_ptr.dtype.element_ty), mask=mask)


def gather_cache_launch(
    src_cache: torch.Tensor,
    dst: torch.Tensor,
    block_table: torch.Tensor,
    cu_seq_lens: torch.Tensor,
    token_to_seq: torch.Tensor,
    num_tokens: int,
    seq_starts: torch.Tensor | None,
) -> Launch:
    """The launch of ``gather_cache_kernel`` for these tensors (entries with unit stride)."""
    entry = src_cache.shape[-1]
    args = (
        src_cache,
        dst,
        block_table,
        cu_seq_lens,
        token_to_seq,
        cu_seq_lens if seq_starts is None else seq_starts,
        src_cache.shape[1],
        block_table.stride(0),
        src_cache.stride(0),
        src_cache.stride(1),
        dst.stride(0),
    )
    kwargs = {"ENTRY": entry, "BLOCK": next_pow2(entry), "HAS_STARTS": seq_starts is not None}
    layout = (src_cache.dtype, dst.dtype, block_table.dtype, entry, seq_starts is not None)
    return Launch((num_tokens,), args, kwargs, layout)
