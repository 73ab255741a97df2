"""Gated-delta-net kernels on the flagos backend: the kernel library's Triton kernels
(``vllm_fl.kernels.gdn``; FlagGems has none): the gates, the decode step and the prefill, the
last as the recurrence token by token over each sequence (no chunked kernel).
"""

import torch

from vllm_fl.kernels import gdn


def fused_gdn_gating(
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The library's gating kernel."""
    return gdn.fused_gdn_gating(a, b, A_log, dt_bias, softplus_beta, softplus_threshold)


def fused_sigmoid_gating_delta_rule_update(
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
    """The library's decode kernel, gates computed in it."""
    gdn.gated_delta_rule_decode(
        o,
        q,
        k,
        v,
        a,
        b,
        A_log,
        dt_bias,
        ssm_state,
        ssm_state_indices,
        cu_seqlens,
        num_accepted_tokens,
        scale,
        use_qk_l2norm_in_kernel,
        softplus_beta,
        softplus_threshold,
    )


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
    """The library's prefill kernel (the recurrence token by token, not chunked)."""
    return gdn.chunk_gated_delta_rule(
        q,
        k,
        v,
        g,
        beta,
        scale,
        initial_state,
        output_final_state,
        cu_seqlens,
        use_qk_l2norm_in_kernel,
        l2norm_eps,
    )
