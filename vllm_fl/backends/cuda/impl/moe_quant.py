"""CUDA vendor quantized MoE experts: what vanilla vLLM runs for these formats on an H100.

vLLM's oracle picks its Triton experts for block FP8 on Hopper (tensor parallel) and for INT8
W8A8, and its functional ``fused_experts`` for the WNA16 MoE methods: both run
``fused_experts_impl`` with the quantization flags (block-FP8 activations through
``_C::per_token_group_fp8_quant``, small W4A16 batches through ``_moe_C::moe_wna16_gemm``). This
impl calls that ``fused_experts`` with the quant config vLLM's helpers build from the scales.
"""

import torch

_EXPERT_SCALE_VIEW = ("fp8_w8a8", "int8_w8a8")


def _block_shape(block_n: int, block_k: int) -> list[int] | None:
    return None if block_n == 0 and block_k == 0 else [block_n, block_k]


def _per_channel_view(scale: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """One scale per expert as a zero-stride [E, N] view for per-token activations: the Triton
    kernel's per-channel path reads a 1-D scale with expert stride 0."""
    experts, n = w.shape[:2]
    if scale.numel() == experts and experts > 1:
        return scale.reshape(experts, 1).expand(experts, n)
    return scale


def _quant_config(
    quant_type: str,
    w1: torch.Tensor,
    w2: torch.Tensor,
    w1_scale: torch.Tensor,
    w2_scale: torch.Tensor,
    a1_scale: torch.Tensor | None,
    a2_scale: torch.Tensor | None,
    w1_zp: torch.Tensor | None,
    w2_zp: torch.Tensor | None,
    block_shape: list[int] | None,
    per_act_token: bool,
):
    from vllm.model_executor.layers.fused_moe import config as moe_config

    if quant_type in _EXPERT_SCALE_VIEW and per_act_token:
        w1_scale, w2_scale = _per_channel_view(w1_scale, w1), _per_channel_view(w2_scale, w2)
    if quant_type == "fp8_w8a8":
        return moe_config.fp8_w8a8_moe_quant_config(
            w1_scale=w1_scale,
            w2_scale=w2_scale,
            a1_scale=a1_scale,
            a2_scale=a2_scale,
            per_act_token_quant=per_act_token,
            per_out_ch_quant=block_shape is None and w1_scale.numel() > w1.shape[0],
            block_shape=block_shape,
        )
    if quant_type == "int8_w8a8":
        return moe_config.int8_w8a8_moe_quant_config(
            w1_scale=w1_scale,
            w2_scale=w2_scale,
            a1_scale=a1_scale,
            a2_scale=a2_scale,
            per_act_token_quant=per_act_token,
        )
    make = {
        "int8_w8a16": moe_config.int8_w8a16_moe_quant_config,
        "int4_w4a16": moe_config.int4_w4a16_moe_quant_config,
    }.get(quant_type)
    if make is None:
        raise NotImplementedError(f"cuda fused_experts_quant: quant_type {quant_type!r}")
    return make(
        w1_scale=w1_scale, w2_scale=w2_scale, w1_zp=w1_zp, w2_zp=w2_zp, block_shape=block_shape
    )


def fused_experts_quant(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    quant_type: str,
    w1_scale: torch.Tensor,
    w2_scale: torch.Tensor,
    a1_scale: torch.Tensor | None = None,
    a2_scale: torch.Tensor | None = None,
    w1_zp: torch.Tensor | None = None,
    w2_zp: torch.Tensor | None = None,
    block_n: int = 0,
    block_k: int = 0,
    per_act_token: bool = False,
    activation: str = "silu",
    apply_router_weight_on_input: bool = False,
    global_num_experts: int = -1,
    expert_map: torch.Tensor | None = None,
) -> torch.Tensor:
    """vLLM's Triton ``fused_experts`` with the format's quant config."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts as vllm_fused_experts

    quant_config = _quant_config(
        quant_type,
        w1,
        w2,
        w1_scale,
        w2_scale,
        a1_scale,
        a2_scale,
        w1_zp,
        w2_zp,
        _block_shape(block_n, block_k),
        per_act_token,
    )
    return vllm_fused_experts(
        hidden_states,
        w1,
        w2,
        topk_weights,
        topk_ids,
        activation=MoEActivation(activation),
        apply_router_weight_on_input=apply_router_weight_on_input,
        global_num_experts=global_num_experts,
        expert_map=expert_map,
        quant_config=quant_config,
    )
