"""FlagGems quantized MoE experts: ``vllm_fl.kernels.moe.quantized``.

W8A8 runs ``flag_gems.fused.fused_experts_impl``; weight-only formats run its sequence on
FlagGems' kernels without the per-call dequantisation. What FlagGems has no kernel for (other
activations than silu, dynamic per-tensor INT8 activations) raises NotImplementedError, and the
dispatch falls back to the next implementation.
"""

import torch

from vllm_fl.kernels.moe import quantized


def _block_shape(block_n: int, block_k: int) -> list[int] | None:
    return None if block_n == 0 and block_k == 0 else [block_n, block_k]


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
    """FlagGems' fused experts for the W8A8 and weight-only formats (silu-gated)."""
    op = "flag_gems fused_experts_quant"
    if activation != "silu":
        raise NotImplementedError(f"{op}: activation {activation!r}")
    block_shape = _block_shape(block_n, block_k)
    routing = dict(
        apply_router_weight_on_input=apply_router_weight_on_input,
        global_num_experts=global_num_experts,
        expert_map=expert_map,
    )
    if quant_type in ("fp8_w8a8", "int8_w8a8"):
        dynamic_tensor = block_shape is None and not per_act_token and a1_scale is None
        if quant_type == "int8_w8a8" and dynamic_tensor:
            raise NotImplementedError(f"{op}: dynamic per-tensor INT8 activations")
        if w1_zp is not None or w2_zp is not None:
            raise NotImplementedError(f"{op}: weight zero points with {quant_type!r}")
        return quantized.fused_experts_w8a8(
            hidden_states,
            w1,
            w2,
            topk_weights,
            topk_ids,
            use_fp8_w8a8=quant_type == "fp8_w8a8",
            w1_scale=w1_scale,
            w2_scale=w2_scale,
            a1_scale=a1_scale,
            a2_scale=a2_scale,
            block_shape=block_shape,
            per_act_token=per_act_token,
            **routing,
        )
    if quant_type in ("int8_w8a16", "int4_w4a16"):
        return quantized.fused_experts_weight_only(
            hidden_states,
            w1,
            w2,
            topk_weights,
            topk_ids,
            use_int4_w4a16=quant_type == "int4_w4a16",
            w1_scale=w1_scale,
            w2_scale=w2_scale,
            w1_zp=w1_zp,
            w2_zp=w2_zp,
            block_shape=block_shape,
            **routing,
        )
    raise NotImplementedError(f"{op}: quant_type {quant_type!r}")
