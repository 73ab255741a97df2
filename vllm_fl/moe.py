"""The plugin's unquantized MoE method: vLLM's ``UnquantizedFusedMoEMethod`` on the dispatch.

On an out-of-tree platform vLLM picks ``UnquantizedMoeBackend.OOT`` for unquantized MoE layers
and skips building its own kernel ("OOT handles internally"), so the in-tree method has neither
a kernel to run nor an answer to ``is_monolithic``: without this class no MoE model runs under
the plugin's platforms. ``UnquantizedFusedMoEMethodFL`` is registered over it like the generated
layer classes (``CustomOp.register_oot``, key ``UnquantizedFusedMoEMethod``) and

- is modular (``is_monolithic`` False): vLLM's router picks the experts, calling
  ``vllm._custom_ops.topk_softmax``, which ``vllm_fl.functions`` routes through the dispatch,
  or, grouped, the op ``grouped_topk`` (``vllm_fl.grouped_routing``); shared experts stay with vLLM's runner, which runs them when the MoE
  kernel cannot overlap them (no kernel: never);
- computes the routed experts with the dispatch op ``fused_experts`` (ops.yaml), whose backends
  call ``moe_align_block_size`` / ``moe_sum`` through the dispatch too.

``warm_up`` (called by the plugin's GPU worker before the engine serves) lets the backend of the
selected ``fused_experts`` impl compile what the model's MoE layers can need: Triton compiles a
kernel variant on first use, and a variant first needed by a served step (a new token count's
tuned config or integer class) would stall that step for the compilation.

``forward_native`` is the same computation: vLLM's own native path needs the kernel vLLM did not
build, so a user's ``-unquantized_fused_moe`` cannot select it under this platform.
"""

from __future__ import annotations

import logging
import sys
import time

import torch
from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import (
    UnquantizedFusedMoEMethod,
)

from vllm_fl import functions

# The op's dispatch trampoline as a module attribute (kept current on policy changes): a call
# costs one frame over the selected impl, where call_op would look the op up on every call.
fused_experts = None
functions.bind(sys.modules[__name__], "fused_experts", "fused_experts")


logger = logging.getLogger("vllm_fl.vllm")


def _activation_name(activation: object) -> str:
    """vLLM's ``MoEActivation`` member (or a plain string in older releases) -> its value."""
    return str(getattr(activation, "value", activation))


class UnquantizedFusedMoEMethodFL(UnquantizedFusedMoEMethod):
    """Unquantized MoE experts computed by the dispatch op ``fused_experts``."""

    @property
    def is_monolithic(self) -> bool:
        return False

    def maybe_make_prepare_finalize(self, routing_tables=None) -> None:
        """No prepare/finalize of vLLM's modular kernels: the experts are the dispatch's. vLLM
        asks under expert parallelism (its EP communicator's buffer preparation), and 0.24's
        in-tree method raises there; with data parallelism vLLM's naive dispatch/combine moves
        the tokens, as for any method without a kernel of its own."""
        return None

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
            # vLLM registers the biases only for layers with has_bias (GPT-OSS)
            getattr(layer, "w13_bias", None),
            getattr(layer, "w2_bias", None),
        )

    forward_native = forward_oot


def _expert_setups(model: torch.nn.Module) -> list[tuple[torch.nn.Module, int]]:
    """One (layer, top-k) per distinct setup of the model's MoE layers computed by
    ``UnquantizedFusedMoEMethodFL`` without an expert map: weights' shapes, dtype and device,
    top-k, where the routing weight applies, the global expert count."""
    setups: dict[tuple, tuple[torch.nn.Module, int]] = {}
    for module in model.modules():
        method = getattr(module, "quant_method", None)
        if not isinstance(method, UnquantizedFusedMoEMethodFL) or module.expert_map is not None:
            continue
        w1, w2 = module.w13_weight, module.w2_weight
        top_k = method.moe.experts_per_token
        setup = (
            tuple(w1.shape),
            tuple(w2.shape),
            w1.dtype,
            w1.device,
            top_k,
            bool(module.apply_router_weight_on_input),
            module.global_num_experts,
        )
        setups.setdefault(setup, (module, top_k))
    return list(setups.values())


def warm_up(model: torch.nn.Module, max_tokens: int) -> int:
    """Before serving: for each distinct setup of the model's MoE layers (``_expert_setups``),
    call the ``fused_experts`` warm-up hook ``(w1, w2, top_k, max_tokens,
    apply_router_weight_on_input, global_num_experts)`` of the backend whose impl of
    ``fused_experts`` is selected, where it declares one (``Backend.warm_up``: a backend whose
    kernels compile on first use), unless ``VLLM_FL_MOE_WARMUP``
    is off. Returns the number of warm-up calls the backend made. A warm-up that fails is a
    warning, not an error: the engine serves as it would have without it (a real call that
    fails falls back through the dispatch)."""
    from vllm_fl.dispatch import DispatchError, get_config, get_default_manager

    setups = _expert_setups(model)
    if not setups or not get_config().moe_warm_up:
        return 0

    manager = get_default_manager()
    try:
        selected = manager.resolve_candidates("fused_experts")[0]
    except DispatchError as exc:
        logger.info("vllm_fl: no MoE warm-up: %s", exc)
        return 0
    backend = manager.registry.backend_of(selected)
    backend_warm_up = backend.warm_up_hook("fused_experts") if backend is not None else None
    if backend_warm_up is None:
        return 0
    start, calls = time.perf_counter(), 0
    try:
        with torch.inference_mode():
            for layer, top_k in setups:
                calls += backend_warm_up(
                    layer.w13_weight,
                    layer.w2_weight,
                    top_k,
                    max_tokens,
                    bool(layer.apply_router_weight_on_input),
                    layer.global_num_experts,
                )
    except Exception as exc:  # noqa: BLE001 - the warm-up is an optimisation, serving goes on
        logger.warning(
            "vllm_fl: the MoE warm-up of %s failed after %d calls (%s: %s); kernels it did not "
            "compile compile on first use",
            selected.impl_id,
            calls,
            type(exc).__name__,
            exc,
        )
        return calls
    logger.info(
        "vllm_fl: %s warmed fused_experts up for %d MoE layer setup(s), %d calls in %.1f s",
        selected.impl_id,
        len(setups),
        calls,
        time.perf_counter() - start,
    )
    return calls
