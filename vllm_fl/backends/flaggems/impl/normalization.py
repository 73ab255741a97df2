"""FlagGems RMS normalisations: vLLM's RMSNorm layers mapped to ``vllm_fl.kernels.norm``.

With a residual, the functional ``rms_norm`` writes both results into new tensors in one launch;
outside torch.compile, ``rms_norm_inplace`` (the op's eager variant) overwrites x and residual
with FlagGems' ``fused_add_rms_norm``, as vLLM does.
"""

import torch

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
    """Mean-centred layer normalisation over the last dimension, (x - mean) / sqrt(var + eps), times
    weight plus bias where the layer has them; computed in the wider of x's and the weight's dtype
    and returned in x's.

    Reads ``self.normalized_shape``, ``self.weight``, ``self.bias``, ``self.eps``.
    """
    raise NotImplementedError(
        "flagos layer_norm: write the kernel here, "
        "matching FLBackendBase.layer_norm (vllm_fl/dispatch/spec.py)"
    )


def rms_norm_gated(self, x: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
    """RMS normalisation gated by act(z) (silu, or sigmoid for activation "sigmoid"), over groups of
    group_size channels (all channels when None): norm(x) * weight * act(z) when norm_before_gate,
    else norm(x * act(z)) * weight; without z, norm(x) * weight. Computed in float32, returned in
    x's dtype (Mamba2's and the gated-delta-net layers' output norm).

    Reads ``self.weight``, ``self.eps``, ``self.group_size``, ``self.norm_before_gate``, ``self.activation``.
    """
    raise NotImplementedError(
        "flagos rms_norm_gated: write the kernel here, "
        "matching FLBackendBase.rms_norm_gated (vllm_fl/dispatch/spec.py)"
    )
