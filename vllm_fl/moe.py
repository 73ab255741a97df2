"""The plugin's unquantized MoE method: vLLM's ``UnquantizedFusedMoEMethod`` on the dispatch.

On an out-of-tree platform vLLM picks ``UnquantizedMoeBackend.OOT`` for unquantized MoE layers
and skips building its own kernel ("OOT handles internally"), so the in-tree method has neither
a kernel to run nor an answer to ``is_monolithic``: without this class no MoE model runs under
the plugin's platforms. ``UnquantizedFusedMoEMethodFL`` is registered over it like the generated
layer classes (``CustomOp.register_oot``, key ``UnquantizedFusedMoEMethod``) and

- is modular (``is_monolithic`` False): vLLM's router picks the experts, calling
  ``vllm._custom_ops.topk_softmax`` (or ``grouped_topk``), which ``vllm_fl.functions`` routes
  through the dispatch; shared experts stay with vLLM's runner, which runs them when the MoE
  kernel cannot overlap them (no kernel: never);
- computes the routed experts with the dispatch op ``fused_experts`` (ops.yaml), whose backends
  call ``moe_align_block_size`` / ``moe_sum`` through the dispatch too.

``forward_native`` is the same computation: vLLM's own native path needs the kernel vLLM did not
build, so a user's ``-unquantized_fused_moe`` cannot select it under this platform.
"""

from __future__ import annotations

import sys

import torch
from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import (
    UnquantizedFusedMoEMethod,
)

from vllm_fl import functions

# The op's dispatch trampoline as a module attribute (kept current on policy changes): a call
# costs one frame over the selected impl, where call_op would look the op up on every call.
fused_experts = None
functions.bind(sys.modules[__name__], "fused_experts", "fused_experts")


def _activation_name(activation: object) -> str:
    """vLLM's ``MoEActivation`` member (or a plain string in older releases) -> its value."""
    return str(getattr(activation, "value", activation))


class UnquantizedFusedMoEMethodFL(UnquantizedFusedMoEMethod):
    """Unquantized MoE experts computed by the dispatch op ``fused_experts``."""

    @property
    def is_monolithic(self) -> bool:
        return False

    def forward_oot(
        self,
        layer: torch.nn.Module,
        x: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        shared_experts: object | None = None,
        shared_experts_input: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return fused_experts(
            x,
            layer.w13_weight,
            layer.w2_weight,
            topk_weights,
            topk_ids,
            _activation_name(layer.activation),
            layer.apply_router_weight_on_input,
            layer.global_num_experts,
            layer.expert_map,
        )

    forward_native = forward_oot
