"""FlagGems normalisations: vLLM's RMSNorm layers mapped to ``vllm_fl.kernels.norm``, its
LayerNorm to FlagGems' ``layer_norm``, its RMSNormGated and Mixer2RMSNormGated to the Triton
kernels vLLM runs for them.

With a residual, the functional ``rms_norm`` writes both results into new tensors in one launch;
outside torch.compile, ``rms_norm_inplace`` (the op's eager variant) overwrites x and residual
with FlagGems' ``fused_add_rms_norm``, as vLLM does.
"""

import torch
import torch.nn.functional as F

from vllm_fl import compat
from vllm_fl.backends.reference.impl import normalization as _reference
from vllm_fl.kernels import norm


def rms_norm(
    self, x: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """rms_norm(x), out of place; with a residual, (rms_norm(x + residual), x + residual)."""
    weight = self.weight.data
    if residual is None:
        return norm.rms_norm(x, weight, self.variance_epsilon)
    return norm.add_rms_norm(x, residual, weight, self.variance_epsilon)


def rms_norm_inplace(
    self, x: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The eager variant: with a residual, FlagGems' ``fused_add_rms_norm`` in place,
    returning (x, residual) holding (rms_norm(x + r), x + r).

    Without a residual, or with non-contiguous inputs (which the kernel may copy rather than
    overwrite), the functional ``rms_norm``.
    """
    if residual is None or not (x.is_contiguous() and residual.is_contiguous()):
        return rms_norm(self, x, residual)
    # the parameter itself: ``.data`` makes a tensor object per call
    norm.fused_add_rms_norm_inplace(x, residual, self.weight, self.variance_epsilon)
    return x, residual


def gemma_rms_norm(
    self, x: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Gemma's RMSNorm, x * rrms * (1 + w) computed in float32 and rounded once."""
    return norm.gemma_rms_norm(self, x, residual, self.weight, self.variance_epsilon)


def layer_norm(self, x: torch.Tensor) -> torch.Tensor:
    """FlagGems' ``layer_norm``: x and the weight read in float32, the result rounded once to x's
    dtype, which is vLLM's widening to a float32 weight's dtype too."""
    import flag_gems

    out, _, _ = flag_gems.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
    return out


def rms_norm_gated(self, x: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
    """FlagGems has no gated or grouped RMSNorm: flash-linear-attention's Triton kernel as vLLM
    ships it (``compat.gated_rms_norm_kernel``), portable Triton like the rest of this backend,
    float32 arithmetic rounded once."""
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
    """FlagGems has no gated RMSNorm: the Triton kernel vLLM's ``Mixer2RMSNormGated.forward_cuda``
    runs (``compat.mixer2_gated_rms_norm_kernel``), on every call whose groups lie within this
    rank (vLLM's own CUDA path uses it for one group only; its group_size covers the rest).
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
