"""Ascend vendor RMS normalisation: ``torch_npu.npu_rms_norm`` / ``npu_add_rms_norm``.

Both write new tensors (``npu_add_rms_norm`` returns the sum instead of overwriting the
residual), so the impl is functional without copies. The weight is passed in x's dtype,
as vllm-ascend's models load it.
"""

import torch


def rms_norm(
    self, x: torch.Tensor, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``npu_rms_norm(x, w, eps) -> (out, rstd)``;
    ``npu_add_rms_norm(x, r, w, eps) -> (out, rstd, x + r)``."""
    import torch_npu

    weight = self.weight.data
    if weight.dtype != x.dtype:
        weight = weight.to(x.dtype)
    if residual is None:
        out, _ = torch_npu.npu_rms_norm(x, weight, self.variance_epsilon)
        return out
    out, _, total = torch_npu.npu_add_rms_norm(x, residual, weight, self.variance_epsilon)
    return out, total
