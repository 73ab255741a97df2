"""CUDA vendor RMS normalisations: ``vllm._custom_ops.rms_norm(out, x, weight, eps)``.

vLLM's kernel needs the weight in x's dtype; when they differ vLLM's own dispatch
(``vllm.ir``) falls back to the native formula, and so do we (the reference impl), keeping
the numerics of vLLM on CUDA.

``fused_add_rms_norm`` overwrites both its inputs. To stay functional without cloning both
(8 passes over the activations), ``rms_norm`` adds first and normalises the sum out of place
(5 passes, 2 launches). The kernel's own fused path rounds the sum to x's dtype before
normalising too, so the result is the same. Outside torch.compile, ``rms_norm_inplace`` (the
op's eager variant) calls it in place as vLLM does: 4 passes, 1 launch.
"""

import torch
import torch.nn.functional as F

from vllm_fl import compat
from vllm_fl.backends.reference.impl import normalization as _reference

_custom_ops = None


def _ops():
    """``vllm._custom_ops``, imported on first use (a ``from`` import per call costs ~0.2 us)."""
    global _custom_ops
    ops = _custom_ops
    if ops is None:
        from vllm import _custom_ops as ops

        _custom_ops = ops
    return ops


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _ops().rms_norm(out, x, weight, eps)
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


def rms_norm_inplace(
    self, x: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The eager variant: with a residual, ``fused_add_rms_norm`` in place, returning
    (x, residual) holding (rms_norm(x + r), x + r), as vLLM's ``RMSNorm.forward_cuda`` does.

    Without a residual, or with a weight in another dtype than x, the functional ``rms_norm``.
    """
    weight = self.weight.data
    if residual is None or weight.dtype != x.dtype:
        return rms_norm(self, x, residual)
    _ops().fused_add_rms_norm(x, residual, weight, self.variance_epsilon)
    return x, residual


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


def rms_norm_gated(self, x: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
    """What vLLM's ``RMSNormGated.forward_cuda`` runs: flash-linear-attention's Triton
    ``rmsnorm_fn`` from vLLM's copy of it (``compat.gated_rms_norm_kernel``; vLLM has no CUDA
    C++ kernel for the gated norm)."""
    return compat.gated_rms_norm_kernel()(
        x,
        self.weight,
        None,
        z=z,
        eps=self.eps,
        group_size=self.group_size,
        norm_before_gate=self.norm_before_gate,
        activation=self.activation,
    )


def mixer2_gated_rms_norm(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """What vLLM's ``Mixer2RMSNormGated.forward_cuda`` runs (vLLM has no CUDA C++ kernel for it):
    the Triton ``rms_norm_gated`` (``compat.mixer2_gated_rms_norm_kernel``), here on every call
    whose groups lie within this rank (vLLM's own uses it for one group only, its
    forward_native for the others; the kernel's group_size covers them).
    A call whose norm needs other ranks' data runs the reference, whose collectives are vLLM's,
    as vLLM's forward_cuda runs its forward_native; without the norm, the gate alone in x's
    dtype as vLLM's forward_cuda computes it."""
    if not self.use_rms_norm:
        return x * F.silu(gate.to(torch.float32)).to(x.dtype)
    if _reference.mixer2_crosses_ranks(self):
        return _reference.mixer2_gated_rms_norm(self, x, gate)
    return compat.mixer2_gated_rms_norm_kernel()(
        x,
        self.weight,
        None,
        z=gate,
        eps=self.variance_epsilon,
        group_size=self.group_size,
        norm_before_gate=False,
    )
