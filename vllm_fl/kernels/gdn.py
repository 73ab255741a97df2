"""Gated-delta-net kernels (Qwen3-Next's linear attention) of the kernel library: the gates and
the decode step (``gdn_kernels``; FlagGems has none). Kernels launch through Triton's own
launcher; calls a kernel does not take raise NotImplementedError, so the dispatch runs the next
candidate for them. The chunked prefill has no kernel here yet.
"""

from __future__ import annotations

import functools
from types import ModuleType

import torch


@functools.cache
def _own() -> ModuleType:
    """``gdn_kernels``, imported on first use: its kernels need Triton."""
    from vllm_fl.kernels import gdn_kernels

    return gdn_kernels


def fused_gdn_gating(
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """g (float32) and beta (b's dtype) of a's shape, in one launch."""
    a, b = a.contiguous(), b.contiguous()
    g = torch.empty(a.shape, dtype=torch.float32, device=a.device)
    beta = torch.empty(b.shape, dtype=b.dtype, device=b.device)
    if a.numel() == 0:
        return g, beta
    own = _own()
    launch = own.gdn_gating_launch(
        A_log.contiguous(), a, b, dt_bias.contiguous(), softplus_beta, softplus_threshold, g, beta
    )
    own.gdn_gating_kernel[launch.grid](*launch.args, **launch.kwargs)
    return g, beta


def gated_delta_rule_decode(
    o: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    ssm_state: torch.Tensor,
    ssm_state_indices: torch.Tensor,
    cu_seqlens: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    scale: float | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> None:
    """The op ``fused_sigmoid_gating_delta_rule_update`` in one launch: outputs into o, states
    into ssm_state."""
    if q.shape[0] * q.shape[1] == 0:
        return
    own = _own()
    launch = own.gated_delta_rule_decode_launch(
        o,
        q,
        k,
        v,
        a,
        b,
        A_log.contiguous(),
        dt_bias.contiguous(),
        ssm_state,
        ssm_state_indices.contiguous(),
        cu_seqlens,
        num_accepted_tokens,
        scale,
        use_qk_l2norm_in_kernel,
        softplus_beta,
        softplus_threshold,
    )
    if launch is None:
        raise NotImplementedError(
            f"gated_delta_rule_decode: q {tuple(q.shape)} with strides {q.stride()}, "
            f"o with strides {o.stride()}: the kernel takes [B, T, ...] tensors whose batch and "
            f"token dimensions merge, key heads of at most {own.DECODE_MAX_K}"
        )
    own.gated_delta_rule_decode_kernel[launch.grid](*launch.args, **launch.kwargs)
