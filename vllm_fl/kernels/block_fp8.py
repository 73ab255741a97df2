"""Block-scaled FP8 GEMM (W8A8, 128x128 weight blocks, 1x128 activation groups) on FlagGems'
Triton kernel, with this library's tuned tile configs.

FlagGems' ``w8a8_block_fp8_matmul`` takes its tile config from a table it ships per device and
(N, K) — DeepSeek-V3's projections only — and elsewhere a default (64-row tiles, the block's
128 columns): at one token on an H100 a Llama-3-8B projection then runs on a few dozen programs,
4x slower than DeepGEMM. :func:`matmul` launches the same FlagGems kernel with the config this
library measured for the shape on the device (``python -m vllm_fl.kernels.block_fp8_tune``,
tables in ``block_fp8_tuned/``, one JSON file per device and (N, K)::

    N=<n>,K=<k>,device_name=<device>,dtype=fp8_w8a8,block=<bn>x<bk>.json

token count -> config, the nearest tuned count wins), and FlagGems' own entry where no table
matches.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from vllm_fl.kernels import tuned

TABLE_DIR = Path(__file__).with_name("block_fp8_tuned")
#: DeepGEMM's TMA alignment of a float32 scale column: 16 bytes
TMA_ALIGN = 4


def scales_in_layout(scales: torch.Tensor, column_major: bool, tma_aligned: bool) -> torch.Tensor:
    """The activation group scales [M, G] in the layout the block GEMMs read: row-major, or
    column-major with each column M rows apart (rounded up to ``TMA_ALIGN`` rows for DeepGEMM's
    TMA); ``scales`` itself where it has that layout already, else a copy (strides only)."""
    if not column_major:
        return scales.contiguous()
    m, groups = scales.shape
    stride = -(-m // TMA_ALIGN) * TMA_ALIGN if tma_aligned else m
    if scales.stride() == (1, stride):
        return scales
    out = torch.empty_strided((m, groups), (1, stride), dtype=scales.dtype, device=scales.device)
    out.copy_(scales)
    return out


def table_name(n: int, k: int, device: str, block: tuple[int, int]) -> str:
    """The file name of the table for an [N, K] weight in ``block`` blocks on ``device``."""
    return f"N={n},K={k},device_name={device},dtype=fp8_w8a8,block={block[0]}x{block[1]}.json"


@functools.cache
def load_table(name: str) -> dict[int, dict[str, int]] | None:
    """The table in ``TABLE_DIR`` called ``name``; None where there is none or it is invalid."""
    return tuned.read_table(TABLE_DIR / name, "block-FP8 GEMM")


def config_for(
    n: int, k: int, device: str, block: tuple[int, int], tokens: int
) -> dict[str, int] | None:
    """The tuned config for ``tokens`` rows through an [N, K] weight; None without a table."""
    table = load_table(table_name(n, k, device, block))
    return None if table is None else dict(tuned.nearest(table, tokens))


@functools.cache
def _kernel():
    # FlagGems' device-independent kernel: its tile sizes are plain constexprs, so any config
    # of the table launches it (its Hopper variant fixes them through its own tuner).
    from flag_gems.ops.w8a8_block_fp8_matmul import w8a8_block_fp8_matmul_kernel

    return w8a8_block_fp8_matmul_kernel


def launch(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    block: tuple[int, int],
    out_dtype: torch.dtype,
    config: dict[str, int],
) -> torch.Tensor:
    """``a`` [M, K] x ``b`` [N, K]^T with their block scales, through FlagGems' kernel launched
    with ``config`` (a table's entry)."""
    import triton

    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    grid = (triton.cdiv(m, config["BLOCK_SIZE_M"]) * triton.cdiv(n, config["BLOCK_SIZE_N"]),)
    _kernel()[grid](
        a,
        b,
        c,
        a_scale,
        b_scale,
        m,
        n,
        k,
        block[0],
        block[1],
        a.stride(0),
        a.stride(1),
        b.stride(1),
        b.stride(0),
        c.stride(0),
        c.stride(1),
        a_scale.stride(0),
        a_scale.stride(1),
        b_scale.stride(1),
        b_scale.stride(0),
        **config,
    )
    return c


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    block: tuple[int, int],
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """The block-scaled FP8 GEMM: ``a`` [M, K] fp8 (row-major) with ``a_scale`` [M, K/bk],
    ``b`` [N, K] fp8 with ``b_scale`` [N/bn, K/bk] -> [M, N] in ``out_dtype``; the tuned config
    of the shape on this device where there is one, else FlagGems' own choice."""
    n, k = b.shape
    block = (int(block[0]), int(block[1]))
    config = None
    if a.device.type == "cuda":
        config = config_for(n, k, tuned.device_name(a.device), block, a.shape[0])
    if config is None:
        import flag_gems

        return flag_gems.w8a8_block_fp8_matmul(a, b, a_scale, b_scale, list(block), out_dtype)
    # the kernel reads one scale per BLOCK_SIZE_K step: a tile must not span two groups
    config["BLOCK_SIZE_K"] = min(config["BLOCK_SIZE_K"], block[1])
    return launch(a.contiguous(), b, a_scale, b_scale, block, out_dtype, config)
