"""Reference normalisations: vLLM's ``vllm.ir`` native ``rms_norm`` and
``fused_add_rms_norm``, which ``RMSNorm``/``GemmaRMSNorm.forward_native`` call, and the
``forward_native`` of ``LayerNorm``, ``RMSNormGated`` and the Mamba2 mixer's
``Mixer2RMSNormGated``.

Dtype handling, as vLLM does it: x is normalised in float32; the result is cast to the
weight's dtype, multiplied by the weight, then cast back to x's dtype. With a residual,
the sum is taken in float32, returned rounded to x's dtype, and the float32 sum is what
gets normalised. ``layer_norm``, ``rms_norm_gated`` and ``mixer2_gated_rms_norm`` keep their layers' own dtype rules
(their docstrings).
"""

import torch
import torch.nn.functional as F


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


def layer_norm(self, x: torch.Tensor) -> torch.Tensor:
    """``F.layer_norm`` in the wider of x's and the weight's dtype, returned in x's dtype
    (vLLM ``LayerNorm.forward_native``: a float32 weight gives a float32 reduction)."""
    weight = self.weight
    compute = x.dtype if weight is None else torch.promote_types(x.dtype, weight.dtype)
    out = F.layer_norm(x.to(compute), self.normalized_shape, weight, self.bias, self.eps)
    return out.to(x.dtype)


def rms_norm_gated(self, x: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
    """Gated RMSNorm in float32, rounded once to x's dtype (vLLM
    ``RMSNormGated.forward_static``; its einops regrouping is a reshape of the last dimension)."""
    if self.activation not in ("silu", "sigmoid", "swish"):
        raise ValueError(f"RMSNormGated: unknown activation {self.activation!r}")
    act = torch.sigmoid if self.activation == "sigmoid" else F.silu
    x32 = x.float()
    gate = None if z is None else act(z.float())
    if gate is not None and not self.norm_before_gate:
        x32 = x32 * gate
    group = x32.shape[-1] if self.group_size is None else self.group_size
    grouped = x32.unflatten(-1, (-1, group))
    variance = grouped.pow(2).mean(dim=-1, keepdim=True)
    out = (grouped * torch.rsqrt(variance + self.eps)).flatten(-2) * self.weight.float()
    if gate is not None and self.norm_before_gate:
        out = out * gate
    return out.to(x.dtype)


def mixer2_gated_rms_norm(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """vLLM's ``Mixer2RMSNormGated.forward_native``: x * silu(gate) in float32, normalised over
    groups, rounded to x's dtype and multiplied by the weight; its three tensor-parallel cases
    (one group: the sum of squares all-reduced; tp_size dividing n_groups: each rank's own
    groups; otherwise: x all-gathered and this rank's slice kept) through vLLM's tensor-parallel
    helpers, which the plugin's communicator serves where it runs."""
    input_dtype = x.dtype
    gated = x * F.silu(gate.to(torch.float32))
    if not self.use_rms_norm:
        return gated.to(input_dtype)
    if self.n_groups == 1:
        if self.tp_size > 1:
            from vllm.distributed import tensor_model_parallel_all_reduce

            local_sums = gated.pow(2).sum(dim=-1, keepdim=True)
            variance = tensor_model_parallel_all_reduce(local_sums) / (
                self.tp_size * gated.shape[-1]
            )
        else:
            variance = gated.pow(2).mean(-1, keepdim=True)
        normed = gated * torch.rsqrt(variance + self.variance_epsilon)
    else:
        crosses_ranks = self.n_groups % self.tp_size != 0
        if crosses_ranks:
            from vllm.distributed import tensor_model_parallel_all_gather

            gated = tensor_model_parallel_all_gather(gated, -1)
        grouped = gated.unflatten(-1, (-1, self.group_size))
        variance = grouped.pow(2).mean(-1, keepdim=True)
        normed = (grouped * torch.rsqrt(variance + self.variance_epsilon)).flatten(-2)
        if crosses_ranks:
            start = self.per_rank_hidden_size * self.tp_rank
            normed = normed[..., start : start + self.per_rank_hidden_size]
    return self.weight * normed.to(input_dtype)


def mixer2_crosses_ranks(self) -> bool:
    """Whether a ``Mixer2RMSNormGated`` call needs other ranks' data: its norm reduces over groups
    split across the tensor-parallel ranks (one group over several ranks, or a tp_size that does
    not divide n_groups). Without the norm nothing is reduced."""
    return self.use_rms_norm and self.n_groups % self.tp_size != 0
