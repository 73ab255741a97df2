"""CUDA vendor quantisation: vLLM's compiled kernels, called as vLLM's own linear kernels call
them (INT8: ``scaled_int8_quant``, CUTLASS ``cutlass_scaled_mm`` / ``cutlass_scaled_mm_azp``; FP8: see
below)."""

import functools

import torch

from vllm_fl.kernels.memo import TensorMemo


def scaled_int8_quant(
    x: torch.Tensor,
    scale: torch.Tensor | None = None,
    azp: torch.Tensor | None = None,
    symmetric: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``vllm._custom_ops.scaled_int8_quant``; a static scale and zero point come back as copies
    (an op never returns its inputs)."""
    from vllm import _custom_ops as ops

    q, scales, zero_points = ops.scaled_int8_quant(x.contiguous(), scale, azp, symmetric=symmetric)
    if scale is not None:
        return q, scale.clone(), (azp.clone() if zero_points is not None else None)
    return q, scales, zero_points


def _column_major(b: torch.Tensor) -> torch.Tensor:
    # CUTLASS reads b [K, N] column-major: the transposed view of a contiguous weight is already.
    return b if b.stride(0) == 1 else b.t().contiguous().t()


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
    """``cutlass_scaled_mm``, or ``cutlass_scaled_mm_azp`` with a zero-point term."""
    from vllm import _custom_ops as ops

    dtype = getattr(torch, out_dtype)
    b = _column_major(b)
    if azp_adj is None:
        return ops.cutlass_scaled_mm(a, b, scale_a, scale_b, out_dtype=dtype, bias=bias)
    return ops.cutlass_scaled_mm_azp(a, b, scale_a, scale_b, dtype, azp_adj, azp, bias)


# -- FP8 ----------------------------------------------------------------------------------------
# What vanilla vLLM runs on an H100: ``_C`` quantisation kernels, DeepGEMM's block-scaled GEMM
# (CUTLASS's where DeepGEMM cannot), CUTLASS's per-tensor / per-channel scaled GEMM.


def per_token_group_quant_fp8(
    x: torch.Tensor,
    group_size: int,
    eps: float = 1e-10,
    column_major_scales: bool = False,
    tma_aligned_scales: bool = False,
    use_ue8m0: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``per_token_group_quant_fp8``, which runs ``_C::per_token_group_fp8_quant`` on a
    contiguous input."""
    from vllm.model_executor.layers.quantization.utils.fp8_utils import (
        per_token_group_quant_fp8 as vllm_group_quant,
    )

    return vllm_group_quant(
        x.contiguous(),
        group_size,
        eps=eps,
        dtype=torch.float8_e4m3fn,
        column_major_scales=column_major_scales,
        tma_aligned_scales=tma_aligned_scales,
        use_ue8m0=use_ue8m0,
    )


def scaled_fp8_quant(
    x: torch.Tensor,
    scale: torch.Tensor | None = None,
    use_per_token_if_dynamic: bool = False,
    scale_ub: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``vllm._custom_ops.scaled_fp8_quant`` (the ``_C`` kernels); a static scale comes back as
    a copy (an op never returns its inputs)."""
    from vllm import _custom_ops as ops

    # vLLM's own function, also where the plugin routed the module attribute
    quantize = getattr(ops.scaled_fp8_quant, "__wrapped__", ops.scaled_fp8_quant)
    q, scales = quantize(
        x.contiguous(),
        scale,
        scale_ub=scale_ub,
        use_per_token_if_dynamic=use_per_token_if_dynamic,
    )
    return q, (scale.clone() if scale is not None else scales)


_deep_gemm_scales = TensorMemo()


@functools.cache  # per weight shape: decided once, not on every call
def _deep_gemm_fits(n: int, k: int, block_n: int, block_k: int, dtype: torch.dtype) -> bool:
    from vllm.utils.deep_gemm import is_deep_gemm_supported, should_use_deepgemm_for_fp8_linear

    return (
        (block_n, block_k) == (128, 128)
        and is_deep_gemm_supported()
        and should_use_deepgemm_for_fp8_linear(dtype, (n, k))
    )


def _deep_gemm_weight_scales(
    b: torch.Tensor, scale_b: torch.Tensor, block_n: int, block_k: int
) -> torch.Tensor:
    """The weight's scales in DeepGEMM's layout, converted once per scale tensor (as vLLM does
    once after loading). The scales stay float32 (no UE8M0 cast): DeepGEMM's SM90 kernel reads
    float32 either way, and the scales keep the values every other backend computes with. Where
    vanilla uses power-of-two scales, the FP8 layer requantised its weights to them already
    (`vllm_fl.quant.fp8`)."""

    def convert() -> torch.Tensor:
        from vllm.model_executor.layers.quantization.utils.fp8_utils import (
            deepgemm_post_process_fp8_weight_block,
        )

        return deepgemm_post_process_fp8_weight_block(
            wq=b, ws=scale_b, quant_block_shape=(block_n, block_k), use_e8m0=False
        )[1]

    return _deep_gemm_scales.get(scale_b, ("deep_gemm", block_n, block_k), convert)


def _tma_aligned_column_major(scales: torch.Tensor) -> torch.Tensor:
    from vllm.utils.deep_gemm import get_col_major_tma_aligned_tensor

    m = scales.shape[0]
    aligned = -(-m // 4) * 4
    if scales.stride(0) == 1 and scales.stride(1) == aligned:
        return scales
    return get_col_major_tma_aligned_tensor(scales.contiguous())


def w8a8_block_fp8_matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    block_n: int,
    block_k: int,
    out_dtype: str,
) -> torch.Tensor:
    """DeepGEMM's ``fp8_gemm_nt`` where vanilla's DeepGEMM kernel applies (128 x 128 blocks,
    bfloat16 out, N % 64 == 0, K % 128 == 0, Hopper or Blackwell), else CUTLASS's block-scaled
    ``cutlass_scaled_mm`` where the device has it, else vLLM's Triton block GEMM (vanilla's row
    in that order)."""
    dtype = getattr(torch, out_dtype)
    n, k = b.shape
    if _deep_gemm_fits(n, k, block_n, block_k, dtype):
        from vllm.utils.deep_gemm import fp8_gemm_nt

        out = torch.empty((a.shape[0], n), dtype=dtype, device=a.device)
        fp8_gemm_nt(
            (a.contiguous(), _tma_aligned_column_major(scale_a)),
            (b, _deep_gemm_weight_scales(b, scale_b, block_n, block_k)),
            out,
            is_deep_gemm_e8m0_used=False,
        )
        return out
    from vllm.model_executor.layers.quantization.utils.w8a8_utils import (
        cutlass_block_fp8_supported,
    )

    if (block_n, block_k) == (128, 128) and cutlass_block_fp8_supported():
        from vllm import _custom_ops as ops

        # CUTLASS reads the activations' scales column-major, as vanilla's kernel quantises them
        return ops.cutlass_scaled_mm(
            a, b.t(), out_dtype=dtype, scale_a=_column_major(scale_a), scale_b=scale_b.t()
        )
    from vllm.model_executor.layers.quantization.utils.fp8_utils import (
        w8a8_triton_block_scaled_mm,
    )

    return w8a8_triton_block_scaled_mm(
        a.contiguous(), b, scale_a, scale_b, [block_n, block_k], output_dtype=dtype
    )


def fp8_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: str,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``cutlass_scaled_mm``, what vLLM's ``CutlassFP8ScaledMMLinearKernel`` runs."""
    from vllm import _custom_ops as ops

    return ops.cutlass_scaled_mm(
        a, _column_major(b), scale_a, scale_b, out_dtype=getattr(torch, out_dtype), bias=bias
    )
