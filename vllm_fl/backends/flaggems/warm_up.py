"""The flaggems backend's MoE warm-up: before the engine serves, compile every kernel variant
its ``fused_experts`` can need for a layer (``vllm_fl.moe.warm_up`` calls it through the
package's ``warm_up_experts``). Triton compiles a variant on first use, and a variant first needed
by a served step would stall that step for the compilation."""

import torch

from vllm_fl.backends.flaggems.impl import moe
from vllm_fl.kernels import launch, routing
from vllm_fl.kernels.moe import experts


def warm_up_experts(
    w1: torch.Tensor,
    w2: torch.Tensor,
    top_k: int,
    max_tokens: int,
    apply_router_weight_on_input: bool = False,
    global_num_experts: int = -1,
) -> int:
    """Compile, before serving, every kernel variant ``fused_experts`` can need for this
    layer's weights and calls of up to ``max_tokens`` tokens: one call per token count of
    ``experts.warm_up_token_counts``, on zeros routed round-robin over the experts (top-k ids
    int32 and weights float32, as vLLM's router gives them). Returns the number of calls made
    (none where the backend's own launches do not take this layer)."""
    if not launch.on_current_gpu(w1):
        return 0
    kernels = experts.flag_gems_kernels()
    if kernels is None or not kernels.takes_our_arguments:
        return 0
    routed = w1.size(0) if global_num_experts == -1 else global_num_experts
    align_max = routing.align_max_pairs()
    counts = experts.warm_up_token_counts(kernels, w1, w2, top_k, max_tokens, routed, align_max)
    for tokens in counts:
        hidden = torch.zeros(tokens, w1.size(2), dtype=w1.dtype, device=w1.device)
        pairs = torch.arange(tokens * top_k, dtype=torch.int32, device=w1.device)
        topk_ids = (pairs % w1.size(0)).view(tokens, top_k)
        topk_weights = torch.full((tokens, top_k), 1.0 / top_k, device=w1.device)
        moe.fused_experts(
            hidden,
            w1,
            w2,
            topk_weights,
            topk_ids,
            apply_router_weight_on_input=apply_router_weight_on_input,
            global_num_experts=global_num_experts,
        )
    return len(counts)
