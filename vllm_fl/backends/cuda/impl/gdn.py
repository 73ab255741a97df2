"""Gated-delta-net kernels when the CUDA vendor backend is preferred: vLLM's own Triton kernels
of its copy of flash-linear-attention, what vanilla vLLM 0.32 runs on the GPU (its Triton
prefill backend; Hopper and Blackwell default to FlashInfer's prefill, which the plugin leaves
in place).

The functions are vLLM's as vLLM shipped them (``vllm_fl.gdn.original``: the plugin routes
vLLM's calls of those names through the dispatch, so calling the module attribute here would
come back to the dispatch). vLLM has no CUDA kernel of the gating alone (its GPU path computes
the gates inside these kernels and its prefill preparation), so ``fused_gdn_gating`` has no
cuda impl.
"""

import torch


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
    """vLLM's ``fused_sigmoid_gating_delta_rule_update``, its outputs copied into o."""
    from vllm_fl.gdn import original  # on first use: vllm_fl.gdn binds the ops at import

    # the kernel addresses a slot as stride(0) apart and its [HV, V, K] state as contiguous
    cache = ssm_state if ssm_state[0].is_contiguous() else ssm_state.contiguous()
    result, _ = original("fused_sigmoid_gating_delta_rule_update")(
        A_log=A_log,
        a=a,
        b=b,
        dt_bias=dt_bias,
        q=q,
        k=k,
        v=v,
        beta=softplus_beta,
        threshold=softplus_threshold,
        scale=scale,
        initial_state=cache,
        inplace_final_state=True,
        cu_seqlens=cu_seqlens,
        ssm_state_indices=ssm_state_indices,
        num_accepted_tokens=num_accepted_tokens,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
    )
    if cache is not ssm_state:
        ssm_state.copy_(cache)
    o.copy_(result.view(o.shape))


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
    l2norm_eps: float = 1e-06,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """vLLM's ``chunk_gated_delta_rule`` (its L2 norm's epsilon is 1e-6, the only one ops.yaml
    lets this impl take); final states as float32."""
    from vllm_fl.gdn import original

    o, final = original("chunk_gated_delta_rule")(
        q=q,
        k=k,
        v=v,
        g=g,
        beta=beta,
        scale=scale,
        initial_state=initial_state,
        output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
    )
    return o, None if final is None else final.to(torch.float32)
