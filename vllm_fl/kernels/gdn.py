"""Gated-delta-net kernels (Qwen3-Next's linear attention) of the kernel library: the gates, the
decode step and the prefill (``gdn_kernels``; FlagGems has none). Kernels launch through Triton's own
launcher; calls a kernel does not take raise NotImplementedError, so the dispatch runs the next
candidate for them. The prefill (``chunk_gated_delta_rule``) runs the recurrence token by token
over each sequence, each program's block of the state in registers: one launch, no chunked
(WY-form) kernel yet, so a long prompt costs one sequential step per token.
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


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    l2norm_eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The op ``chunk_gated_delta_rule`` in one launch of the prefill kernel, the recurrence
    token by token with each program's block of the state in registers: o in q's dtype and,
    when asked, the final states (float32)."""
    batch, length, value_heads, head_v = v.shape
    sequences = batch if cu_seqlens is None else cu_seqlens.shape[0] - 1
    o = torch.empty(v.shape, dtype=q.dtype, device=q.device)
    final = None
    if output_final_state:
        final = torch.empty(
            (sequences, value_heads, head_v, k.shape[-1]), dtype=torch.float32, device=q.device
        )
    own = _own()
    launch = own.gated_delta_rule_prefill_launch(
        o,
        final,
        q,
        k,
        v,
        g,
        beta,
        scale,
        initial_state,
        cu_seqlens,
        use_qk_l2norm_in_kernel,
        l2norm_eps,
    )
    if launch is None:
        raise NotImplementedError(
            f"gated_delta_rule_prefill: q {tuple(q.shape)} with strides {q.stride()}: the "
            "kernel takes [B, T, ...] tensors whose batch and token dimensions merge, key "
            f"heads of at most {own.DECODE_MAX_K}"
        )
    if sequences > 0:
        own.gated_delta_rule_prefill_kernel[launch.grid](*launch.args, **launch.kwargs)
    return o, final
