"""FlagGems RMS normalisations.

With a residual, FlagGems' ``fused_add_rms_norm`` writes both results into its inputs. Our
impls are functional, so instead of cloning x and residual for it (two extra copies: 8
passes over the activations in all) we add first and normalise the sum with the out-of-place
kernel (5 passes, one launch fewer). The sum is rounded to x's dtype before it is normalised,
as vLLM's own CUDA kernel does; vLLM's native path normalises the float32 sum (the difference
is within the parity tolerances). Outside torch.compile, ``rms_norm_inplace`` (the op's eager
variant) calls ``fused_add_rms_norm`` in place instead, as vLLM does: one launch, 4 passes.
"""

import torch


def rms_norm(
    self, x: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``flag_gems.rms_norm(x, [hidden], weight, eps)`` (out of place)."""
    import flag_gems

    weight = self.weight.data
    if residual is None:
        return flag_gems.rms_norm(x, [x.shape[-1]], weight, self.variance_epsilon)
    total = x + residual
    return flag_gems.rms_norm(total, [x.shape[-1]], weight, self.variance_epsilon), total


def rms_norm_inplace(
    self, x: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The eager variant: with a residual, ``flag_gems.fused_add_rms_norm`` in place, returning
    (x, residual) holding (rms_norm(x + r), x + r).

    Without a residual, or with non-contiguous inputs (which the kernel may copy rather than
    overwrite), the functional ``rms_norm``.
    """
    if residual is None or not (x.is_contiguous() and residual.is_contiguous()):
        return rms_norm(self, x, residual)
    import flag_gems

    weight = self.weight.data
    flag_gems.fused_add_rms_norm(x, residual, [x.shape[-1]], weight, self.variance_epsilon)
    return x, residual


def gemma_rms_norm(
    self, x: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Gemma's RMSNorm, x * rrms * (1 + w) computed in float32 and rounded once.

    ``flag_gems.rms_norm`` with the float32 weight (1 + w) does exactly that in FlagGems 5.0.2
    (its kernel multiplies by the weight in float32 before the one rounding). Later FlagGems
    round the normalised x before the weight multiply, like vLLM's RMSNorm, and add
    ``flag_gems.gemma_rms_norm(module, x)`` for Gemma: it is used when present.
    """
    import flag_gems

    total = x if residual is None else x + residual
    gemma = getattr(flag_gems, "gemma_rms_norm", None)
    if gemma is not None:
        out = gemma(self, total)
    else:
        weight = self.weight.float() + 1.0
        out = flag_gems.rms_norm(total, [x.shape[-1]], weight, self.variance_epsilon)
    return out if residual is None else (out, total)
