"""RMS normalisation: FlagGems' kernels through launch plans, and this library's own kernels
(``norm_kernels``) where FlagGems' launch shape is the cost.

``rms_norm`` is out of place: FlagGems' rms_norm kernels for contiguous x, the rows kernel for
views of strided rows (Qwen3's per-head query and key norms on [tokens, heads, head_size] views
of the qkv projection), which FlagGems' function would copy first.

``add_rms_norm`` returns ``(rms_norm(x + residual), x + residual)`` as new tensors (what
torch.compile graphs call: they may not write into their inputs). Instead of cloning x and
residual for FlagGems' in-place ``fused_add_rms_norm`` (two extra copies), the add-and-normalise
kernel writes both results into new tensors in one launch; where it does not apply, torch adds
and ``rms_norm`` normalises the sum. The sum is rounded to x's dtype before it is normalised, as
vLLM's own CUDA kernel does; vLLM's native path normalises the float32 sum (the difference is
within the parity tolerances).

``fused_add_rms_norm_inplace`` overwrites x and residual with both results, as vLLM's eager
kernel does: FlagGems' ``fused_add_rms_norm`` kernel, one launch.

``gemma_rms_norm`` is x * rrms * (1 + w) computed in float32 and rounded once.

Every function runs FlagGems' own function for a call its plans do not take. The kernel modules
and ``flag_gems`` are imported on first use (both need a GPU build to be useful).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import torch

from vllm_fl.kernels import launch
from vllm_fl.kernels.memo import TensorMemo

_ONE_BLOCK_MAX = 4096  # FlagGems: rows up to this width run in one block, wider ones loop


@functools.cache
def _own() -> ModuleType:
    """``norm_kernels``, imported on first use: its kernels need Triton."""
    from vllm_fl.kernels import norm_kernels

    return norm_kernels


def _rows(x: torch.Tensor) -> tuple[int, int]:
    n = x.shape[-1]
    return (x.numel() // n if n else 0), n


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x * rrms(x) * weight over the last dimension, into a new tensor: FlagGems' rms_norm
    kernels for contiguous x, the rows kernel (``norm_kernels``) for views of strided rows,
    FlagGems' function for the rest."""
    if x.numel() and launch.on_current_gpu(x) and weight.is_contiguous():
        if x.is_contiguous():
            out = _through_flag_gems_kernels(x, weight, eps)
        else:
            out = _strided_rows(x, weight, eps)
        if out is not None:
            return out
    import flag_gems

    return flag_gems.rms_norm(x, [x.shape[-1]], weight, eps)


def _through_flag_gems_kernels(x, weight, eps) -> torch.Tensor | None:
    m, n = _rows(x)
    wide = n > _ONE_BLOCK_MAX
    plans = launch.plans_of("rms_norm", "rms_norm_loop_kernel" if wide else "rms_norm_kernel")
    if plans is None or not launch.aligned(x, weight):
        return None
    out = torch.empty_like(x)
    inv_rms = launch.sink(m, x.device)  # FlagGems' kernels also store 1/rms per row
    key = (x.dtype, weight.dtype, n, x.device.index)
    if wide:
        plans.launch(key, (m,), (out, inv_rms, x, weight, n, eps), {})
    else:
        block = launch.next_pow2(n)
        args = (out, inv_rms, x, weight, n, 1, n, 1, n, eps)
        plans.launch(key, (m,), args, {"BLOCK_SIZE": block})
    return out


def _strided_rows(x, weight, eps) -> torch.Tensor | None:
    """The rows kernel into a new contiguous tensor; its launch is bound to the call's layout
    (a layer's per-head norm calls with the same view step after step)."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    found = launch.pointers(x, weight, out)
    if found is None:
        return None
    own = _own()
    plans = launch.plans_for(own.rms_norm_rows_kernel)
    signature = (x.shape, x.stride(), x.dtype, weight.dtype, x.get_device(), eps)
    if plans.launch_bound(signature, found):
        return out
    planned = own.rms_norm_rows_launch(x, weight, eps, out)
    if planned is None:
        return None
    plans.run(planned, signature, dynamic=3)
    return out


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual) as new tensors: the one-launch kernel
    (``norm_kernels``), or torch's add and ``rms_norm`` where it does not apply."""
    if launch.on_current_gpu(x):
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        total = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        if x.dim() == 2:
            flat = (x, residual, weight, eps, out, total)
        elif x.is_contiguous() and residual.is_contiguous():
            n = x.shape[-1]
            flat = (
                x.view(-1, n),
                residual.view(-1, n),
                weight,
                eps,
                out.view(-1, n),
                total.view(-1, n),
            )
        else:
            flat = None
        own = _own()
        planned = None if flat is None else own.add_rms_norm_launch(*flat)
        if planned is not None and launch.aligned(x, residual, weight):
            launch.plans_for(own.add_rms_norm_kernel).run(planned)
            return out, total
    total = x + residual
    return rms_norm(total, weight, eps), total


def fused_add_rms_norm_inplace(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> None:
    """x := rms_norm(x + residual), residual := x + residual, in place: FlagGems'
    ``fused_add_rms_norm`` kernel, its launch bound to the call's layout. ``weight`` may be the
    layer's parameter itself (``.data`` makes a tensor object per call). x and residual must be
    contiguous (FlagGems may copy others rather than overwrite them)."""
    plans = launch.plans_of("fused_add_rms_norm", "fused_add_rms_norm_kernel")
    if (
        plans is not None
        and launch.on_current_gpu(x)
        and weight.is_contiguous()
        and (found := launch.pointers(x, residual, weight)) is not None
    ):
        # a layer's calls share all but the tensors (see KernelPlans.launch_bound)
        signature = (x.shape, x.dtype, residual.dtype, weight.dtype, x.get_device(), eps)
        if plans.launch_bound(signature, found):
            return
        m, n = _rows(x)
        if m:
            key = (x.dtype, residual.dtype, weight.dtype, n, x.device.index)
            args = (x, residual, weight, n, 1, n, 1, n, eps)
            kwargs = {"BLOCK_SIZE": launch.next_pow2(n)}
            plans.run(launch.Launch((m,), args, kwargs, key), signature, dynamic=3)
            return
    import flag_gems

    flag_gems.fused_add_rms_norm(x, residual, [x.shape[-1]], weight, eps)


_gemma_weights = TensorMemo()  # Gemma's (1 + w) in float32, per weight tensor


def _gemma_weight(weight: torch.Tensor) -> torch.Tensor:
    return _gemma_weights.get(weight, None, lambda: weight.float() + 1.0)


def gemma_rms_norm(
    module: Any,
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor,
    eps: float,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Gemma's RMSNorm of the layer ``module`` (its ``weight`` and ``eps``), x * rrms * (1 + w)
    computed in float32 and rounded once; with a residual, (that of x + residual, x + residual).

    FlagGems' rms_norm kernel with the float32 weight (1 + w) does exactly that in FlagGems
    5.0.2 (its kernel multiplies by the weight in float32 before the one rounding). Later
    FlagGems round the normalised x before the weight multiply, like vLLM's RMSNorm, and add
    ``flag_gems.gemma_rms_norm(module, x)`` for Gemma: it is used when present.
    """
    import flag_gems

    gemma = getattr(flag_gems, "gemma_rms_norm", None)
    if gemma is None and residual is not None:
        return add_rms_norm(x, residual, _gemma_weight(weight), eps)
    total = x if residual is None else x + residual
    if gemma is not None:
        out = gemma(module, total)
    else:
        out = rms_norm(total, _gemma_weight(weight), eps)
    return out if residual is None else (out, total)
