"""Gated-delta-net kernels on the flagos backend: the kernel library's Triton kernels
(``vllm_fl.kernels.gdn``; FlagGems has none). The chunked prefill has no flagos impl (ops.yaml
lists none), so a flagos-first policy runs the next candidate for it.
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
