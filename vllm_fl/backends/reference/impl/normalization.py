"""Reference RMS normalisations: vLLM's ``vllm.ir`` native ``rms_norm`` and
``fused_add_rms_norm``, which ``RMSNorm``/``GemmaRMSNorm.forward_native`` call.

Dtype handling, as vLLM does it: x is normalised in float32; the result is cast to the
weight's dtype, multiplied by the weight, then cast back to x's dtype. With a residual,
the sum is taken in float32, returned rounded to x's dtype, and the float32 sum is what
gets normalised.
"""

import torch


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    orig_dtype = x.dtype
    x = x.to(torch.float32)
    return _normalise(x, weight, eps).to(orig_dtype)


def _fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    orig_dtype = x.dtype
    total = x.to(torch.float32) + residual.to(torch.float32)
    return _normalise(total, weight, eps).to(orig_dtype), total.to(orig_dtype)


def _normalise(x32: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    variance = x32.pow(2).mean(dim=-1, keepdim=True)
    return (x32 * torch.rsqrt(variance + eps)).to(weight.dtype) * weight


def rms_norm(
    self, x: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """x / sqrt(mean(x^2) + eps) * weight; with a residual, (normed(x + r), x + r)."""
    weight = self.weight.data
    if residual is None:
        return _rms_norm(x, weight, self.variance_epsilon)
    return _fused_add_rms_norm(x, residual, weight, self.variance_epsilon)


def gemma_rms_norm(
    self, x: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Gemma's RMSNorm: weight (1 + w) in float32, so the multiply happens in float32."""
    weight = self.weight.float() + 1.0
    if residual is None:
        return _rms_norm(x, weight, self.variance_epsilon)
    return _fused_add_rms_norm(x, residual, weight, self.variance_epsilon)
