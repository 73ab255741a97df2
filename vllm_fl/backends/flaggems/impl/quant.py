"""Portable quantized GEMMs and quantisation (Triton only, nothing of vLLM's compiled libraries).

INT8: FlagGems has no INT8 scaled GEMM, so the flagos impl runs vLLM's own Triton kernel
(``triton_scaled_mm``), with the zero-point term applied in PyTorch. FP8: FlagGems'
``per_token_group_quant_fp8`` (its scales copied into DeepGEMM's TMA-aligned layout when asked),
the kernel library's block-FP8 GEMM (``vllm_fl.kernels.block_fp8``: FlagGems' kernel, tuned tile
configs), and FlagGems' Triton ``cutlass_scaled_mm`` on SM90 for per-tensor / per-channel scales
(vLLM's ``triton_scaled_mm`` on other devices, where FlagGems' raises NotImplementedError).
"""

import torch


def int8_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: str,
    bias: torch.Tensor | None = None,
    azp_adj: torch.Tensor | None = None,
    azp: torch.Tensor | None = None,
) -> torch.Tensor:
    """vLLM's ``triton_scaled_mm``, then ``- scale_a * scale_b^T * azp * azp_adj``."""
    from vllm.model_executor.layers.quantization.compressed_tensors.triton_scaled_mm import (
        triton_scaled_mm,
    )

    dtype = getattr(torch, out_dtype)
    rows = a.reshape(-1, a.shape[-1])
    out = triton_scaled_mm(rows, b, scale_a=scale_a, scale_b=scale_b, out_dtype=dtype, bias=bias)
    if azp_adj is not None:
        scale_b_row = scale_b.reshape(1, -1) if scale_b.numel() > 1 else scale_b.reshape(())
        zero = azp_adj if azp is None else azp * azp_adj
        out = out - (scale_a.reshape(-1, 1) * scale_b_row * zero).to(dtype)
    return out.reshape(*a.shape[:-1], b.shape[1])


def per_token_group_quant_fp8(
    x: torch.Tensor,
    group_size: int,
    eps: float = 1e-10,
    column_major_scales: bool = False,
    tma_aligned_scales: bool = False,
    use_ue8m0: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """FlagGems' ``per_token_group_quant_fp8``. It has no TMA-aligned layout: with
    tma_aligned_scales its column-major scales are copied into one (a few bytes per token), so
    the strides are those the reference, the op's fake under torch.compile, declares."""
    import flag_gems

    q, scales = flag_gems.per_token_group_quant_fp8(
        x.contiguous(),
        group_size,
        eps=eps,
        dtype=torch.float8_e4m3fn,
        column_major_scales=column_major_scales,
        scale_ue8m0=use_ue8m0,
    )
    from vllm_fl.kernels.block_fp8 import scales_in_layout

    return q, scales_in_layout(scales, column_major_scales, tma_aligned_scales)


def w8a8_block_fp8_matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    block_n: int,
    block_k: int,
    out_dtype: str,
) -> torch.Tensor:
    """The kernel library's block-FP8 GEMM: FlagGems' kernel with the library's tuned tile
    config for the shape on this device, FlagGems' ``w8a8_block_fp8_matmul`` where no table has
    one (scales of any strides either way)."""
    from vllm_fl.kernels import block_fp8

    return block_fp8.matmul(
        a.contiguous(), b, scale_a, scale_b, (block_n, block_k), getattr(torch, out_dtype)
    )


def _is_sm90(device: torch.device) -> bool:
    return torch.cuda.get_device_capability(device) == (9, 0)


def fp8_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: str,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """FlagGems' Triton ``cutlass_scaled_mm`` on SM90 where its alignment holds (N a multiple of
    16), else vLLM's ``triton_scaled_mm``."""
    dtype = getattr(torch, out_dtype)
    m, n = a.shape[0], b.shape[1]
    if _is_sm90(a.device) and n % 16 == 0:
        import flag_gems

        out = torch.empty((m, n), dtype=dtype, device=a.device)
        # FlagGems reads b [K, N] column-major, as vLLM stores the transposed weight
        b_cols = b if b.stride(0) == 1 else b.t().contiguous().t()
        flag_gems.cutlass_scaled_mm(
            out,
            a.contiguous(),
            b_cols,
            scale_a.contiguous(),
            scale_b.contiguous(),
            None if bias is None else bias.contiguous(),
        )
        return out
    from vllm.model_executor.layers.quantization.compressed_tensors.triton_scaled_mm import (
        triton_scaled_mm,
    )

    return triton_scaled_mm(
        a,
        b,
        scale_a=scale_a.reshape(-1, 1),
        scale_b=scale_b.reshape(-1, 1),
        out_dtype=dtype,
        bias=bias,
    )
