"""FlagGems' quantized fused experts.

W8A8 (FP8 or INT8 weights and activations): ``flag_gems.fused.fused_experts_impl`` with its
``use_fp8_w8a8`` / ``use_int8_w8a8`` flags takes vLLM's layouts as they are (block, channel or
expert scales) and quantises the activations with FlagGems' own kernels
(``per_token_group_quant_fp8`` for blocks).

Weight-only (``int8_w8a16``, ``int4_w4a16``): FlagGems 5.0's ``fused_experts_impl`` dequantises
the whole weights on every call, with one scale per output channel and 4-bit values stored
unpacked, which is neither vLLM's layout (4-bit values packed two per byte, group scales) nor
affordable per step. Its kernels take vLLM's layout, though: ``fused_experts_weight_only`` runs
``fused_experts_impl``'s sequence without the dequantisation, the GEMMs on FlagGems'
``dispatch_fused_moe_kernel`` (its GPTQ/AWQ kernel for group scales, ``fused_moe_kernel`` for
channel scales), the alignment, activation and top-k sum on FlagGems' kernels.

Nothing here calls vLLM's compiled libraries.
"""

from __future__ import annotations

import torch

from vllm_fl.kernels import launch, pointwise
from vllm_fl.kernels.moe import launch as moe_launch

#: FlagGems' chunking of the tokens (its buffers and configs are sized per chunk)
CHUNK_SIZE = 16 * 1024

_COMPUTE_TYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def _per_channel_view(scale: torch.Tensor, experts: int, n: int) -> torch.Tensor:
    """One scale per expert as a zero-stride [E, N] view: the kernels' per-channel path reads a
    1-D scale with the expert stride 0 (every expert's GEMM would use expert 0's scale)."""
    if scale.numel() == experts and experts > 1:
        return scale.reshape(experts, 1).expand(experts, n)
    return scale


def fused_experts_w8a8(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    use_fp8_w8a8: bool,
    w1_scale: torch.Tensor,
    w2_scale: torch.Tensor,
    a1_scale: torch.Tensor | None,
    a2_scale: torch.Tensor | None,
    block_shape: list[int] | None,
    per_act_token: bool,
    apply_router_weight_on_input: bool,
    global_num_experts: int,
    expert_map: torch.Tensor | None,
) -> torch.Tensor:
    """FP8 / INT8 W8A8 experts through ``flag_gems.fused.fused_experts_impl`` (silu-gated)."""
    from flag_gems.fused import fused_experts_impl

    if per_act_token:
        w1_scale = _per_channel_view(w1_scale, w1.size(0), w1.size(1))
        w2_scale = _per_channel_view(w2_scale, w2.size(0), w2.size(1))
    return fused_experts_impl(
        hidden_states,
        w1,
        w2,
        topk_weights,
        topk_ids,
        inplace=False,
        activation="silu",
        apply_router_weight_on_input=apply_router_weight_on_input,
        use_fp8_w8a8=use_fp8_w8a8,
        use_int8_w8a8=not use_fp8_w8a8,
        per_channel_quant=per_act_token,
        global_num_experts=global_num_experts,
        expert_map=expert_map,
        w1_scale=w1_scale,
        w2_scale=w2_scale,
        a1_scale=a1_scale,
        a2_scale=a2_scale,
        block_shape=block_shape,
    )


def fused_experts_weight_only(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    use_int4_w4a16: bool,
    w1_scale: torch.Tensor,
    w2_scale: torch.Tensor,
    w1_zp: torch.Tensor | None,
    w2_zp: torch.Tensor | None,
    block_shape: list[int] | None,
    apply_router_weight_on_input: bool,
    global_num_experts: int,
    expert_map: torch.Tensor | None,
) -> torch.Tensor:
    """INT8 / packed INT4 weight-only experts (silu-gated) on FlagGems' kernels, the weights
    read in vLLM's layout by the GEMMs (``block_shape`` [0, group] for group scales)."""
    import triton.language as tl
    from flag_gems.fused import dispatch_fused_moe_kernel, moe_align_block_size

    gems = launch.defining_module("fused.fused_experts_impl")
    tokens = hidden_states.size(0)
    experts, n, _ = w1.shape
    hidden = w2.size(1)
    top_k = topk_ids.size(1)
    if global_num_experts == -1:
        global_num_experts = experts
    flags = {
        "use_fp8_w8a8": False,
        "use_int8_w8a8": False,
        "use_int8_w8a16": not use_int4_w4a16,
        "use_int4_w4a16": use_int4_w4a16,
        "per_channel_quant": False,
        "block_shape": block_shape,
    }
    config_dtype = gems._get_config_dtype_str(
        dtype=hidden_states.dtype,
        use_int8_w8a16=not use_int4_w4a16,
        use_int4_w4a16=use_int4_w4a16,
    )
    compute_type = getattr(tl, _COMPUTE_TYPES[hidden_states.dtype])
    out = torch.empty_like(hidden_states)
    for start in range(0, tokens, CHUNK_SIZE):
        end = min(start + CHUNK_SIZE, tokens)
        x, ids, weights = hidden_states[start:end], topk_ids[start:end], topk_weights[start:end]
        m = end - start
        config = gems.try_get_optimal_moe_config(
            w1.size(), w2.size(), top_k, config_dtype, m, E=experts, block_shape=block_shape
        )
        # FlagGems 5.0.2's group-scale (GPTQ/AWQ) MoE kernel declares SPLIT_K but its launcher
        # does not pass it; its other launcher sets it to 1 itself
        config = {**config, "SPLIT_K": 1}
        sorted_ids, expert_ids, total = moe_align_block_size(
            ids, config["BLOCK_SIZE_M"], global_num_experts, expert_map
        )
        routing = (weights, sorted_ids, expert_ids, total)
        gate_up = torch.empty(m, top_k, n, dtype=x.dtype, device=x.device)
        dispatch_fused_moe_kernel(
            x, w1, gate_up, None, w1_scale, w1_zp, *routing,
            apply_router_weight_on_input, top_k, config,
            compute_type=compute_type, **flags,
        )  # fmt: skip
        activated = pointwise.silu_and_mul(gate_up.view(-1, n))
        # Pairs of experts on other ranks are skipped by the GEMM: their rows must be zero.
        per_slot = (torch.zeros if expert_map is not None else torch.empty)(
            m, top_k, hidden, dtype=x.dtype, device=x.device
        )
        dispatch_fused_moe_kernel(
            activated, w2, per_slot, None, w2_scale, w2_zp, *routing,
            not apply_router_weight_on_input, 1, config,
            compute_type=compute_type, **flags,
        )  # fmt: skip
        moe_launch.moe_sum(per_slot, out[start:end])
    return out
