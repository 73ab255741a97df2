"""CUDA vendor RMS normalisations: ``vllm._custom_ops.rms_norm(out, x, weight, eps)``.

vLLM's kernel needs the weight in x's dtype; when they differ vLLM's own dispatch
(``vllm.ir``) falls back to the native formula, and so do we (the reference impl), keeping
the numerics of vLLM on CUDA.

``fused_add_rms_norm`` overwrites both its inputs. To stay functional without cloning both
(8 passes over the activations), we add first and normalise the sum out of place (5 passes).
The kernel's own fused path rounds the sum to x's dtype before normalising too, so the
result is the same.
"""

import torch

from vllm_fl.dispatch.backends.reference.impl import normalization as _reference


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    from vllm import _custom_ops as ops

    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    ops.rms_norm(out, x, weight, eps)
    return out


def rms_norm(
    self, x: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``rms_norm`` kernel; with a residual, (rms_norm(x + r), x + r)."""
    weight = self.weight.data
    if weight.dtype != x.dtype:
        return _reference.rms_norm(self, x, residual)
    if residual is None:
        return _rms_norm(x, weight, self.variance_epsilon)
    total = x + residual
    return _rms_norm(total, weight, self.variance_epsilon), total


def gemma_rms_norm(
    self, x: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``rms_norm`` kernel with weight (1 + w) in x's dtype.

    The kernel rounds the normalised x to x's dtype before multiplying by the weight, and
    (1 + w) is rounded to x's dtype; vLLM's native Gemma path multiplies in float32 and rounds
    once. In float32 the two agree exactly; in half precision within about two ulps.
    """
    weight = (self.weight.float() + 1.0).to(x.dtype)
    total = x if residual is None else x + residual
    out = _rms_norm(total, weight, self.variance_epsilon)
    return out if residual is None else (out, total)
