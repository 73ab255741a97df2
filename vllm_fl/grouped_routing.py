"""DeepSeek's grouped top-k routing on the dispatch op ``grouped_topk``, on every platform.

vLLM's ``GroupedTopKRouter`` (DeepSeek-V2/V3, Kimi-K2, ... every MoE with ``n_group``) calls the
module function ``grouped_topk_router.grouped_topk``, a ``torch.compile(dynamic=True)``'d Python
function. Only on CUDA and XPU does that function hand the call to the fused kernel
``vllm._custom_ops.grouped_topk`` (the op ops.yaml replaces); on any other platform, the plugin's
CPU platform and every other chip included, it computes the routing in Python (compiled by
Inductor on first use), so the dispatch, and with it a vendor's routing kernel, is never reached.
vLLM's ``GroupedTopk`` CustomOp would be the natural layer to replace, but no model of vLLM 0.24
or 0.32 builds one.

:func:`install` therefore replaces the router module's ``grouped_topk`` (the router reads it as
a module global on every call) with :func:`grouped_topk`, which makes vLLM's own CUDA choice on
every platform: where vLLM would run its fused kernel (a correction bias, at most 32 groups and
experts per token, ``VLLM_USE_FUSED_MOE_GROUPED_TOPK`` on), it calls the op as vLLM's
``fused_grouped_topk`` calls the kernel (softmax computed first, sigmoid in the kernel); every
other call goes to vLLM's function unchanged. On CUDA the result is what vanilla vLLM runs (the
shipped policy's cuda impl is vLLM's kernel); elsewhere the op's selected impl runs.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, Callable

import torch

from vllm_fl import functions

logger = logging.getLogger("vllm_fl.vllm")

#: where vLLM defines the function its grouped router calls
ROUTER_MODULE = "vllm.model_executor.layers.fused_moe.router.grouped_topk_router"
#: the op that computes the routing
OP = "grouped_topk"
#: vLLM's limits for its fused kernel (``grouped_topk_router.grouped_topk``), kept so that the
#: cuda impl gets exactly the calls vanilla vLLM gives that kernel
MAX_GROUPS = 32
MAX_TOPK = 32
#: vLLM's scoring function -> the op's ``scoring_func`` (0: scores given, 1: sigmoid of logits)
_SCORING = {"softmax": 0, "sigmoid": 1}

# The op's dispatch trampoline as a module attribute (kept current on policy changes).
grouped_topk_op: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
functions.bind(sys.modules[__name__], "grouped_topk_op", OP)

_lock = threading.Lock()
_vllm_grouped_topk: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
_announced = False


def dispatchable(
    num_expert_group: int | None,
    topk: int,
    scoring_func: str,
    e_score_correction_bias: torch.Tensor | None,
) -> bool:
    """Whether vLLM would compute this routing with its fused kernel on CUDA, which is when
    :func:`grouped_topk` calls the op instead of vLLM's Python routing."""
    return (
        e_score_correction_bias is not None
        and num_expert_group is not None
        and num_expert_group <= MAX_GROUPS
        and topk <= MAX_TOPK
        and scoring_func in _SCORING
    )


def grouped_topk(
    hidden_states: torch.Tensor,
    gating_output: torch.Tensor,
    topk: int,
    renormalize: bool,
    num_expert_group: int = 0,
    topk_group: int = 0,
    scoring_func: str = "softmax",
    routed_scaling_factor: float = 1.0,
    e_score_correction_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``grouped_topk`` (same signature and results: float32 weights, int32 ids, a token's
    experts in no set order), computed by the op where vLLM would use its fused kernel."""
    if not dispatchable(num_expert_group, topk, scoring_func, e_score_correction_bias):
        assert _vllm_grouped_topk is not None, "vllm_fl.grouped_routing.install() was not run"
        return _vllm_grouped_topk(
            hidden_states,
            gating_output,
            topk,
            renormalize,
            num_expert_group,
            topk_group,
            scoring_func,
            routed_scaling_factor,
            e_score_correction_bias,
        )
    assert hidden_states.size(0) == gating_output.size(0), "Number of tokens mismatch"
    if not _announced:
        _announce()
    scoring = _SCORING[scoring_func]
    # as vLLM's fused_grouped_topk: the kernel applies the sigmoid itself, a softmax comes first
    scores = gating_output if scoring else torch.softmax(gating_output, dim=-1)
    return grouped_topk_op(
        scores,
        num_expert_group,
        topk_group,
        topk,
        renormalize,
        routed_scaling_factor,
        e_score_correction_bias,
        scoring,
    )


def _announce() -> None:
    # once per process, at the first routed call: the proof that a model's routing ran the op
    global _announced
    _announced = True
    logger.info("vllm_fl: grouped top-k routing runs through the dispatch (op %s)", OP)


def install(policy: Any = None) -> bool:
    """Make vLLM's grouped router call :func:`grouped_topk`; idempotent. Leaves vLLM alone where
    the OOT policy excludes the op (``VLLM_FL_OOT_BLACKLIST=grouped_topk``) or the user turned
    vLLM's fused grouped top-k off (``VLLM_USE_FUSED_MOE_GROUPED_TOPK=0``: vLLM's Python routing
    on every platform). Returns whether the hook is in place."""
    global _vllm_grouped_topk
    if policy is None:
        from vllm_fl.dispatch import get_policy

        policy = get_policy()
    if not policy.oot_active or not policy.oot_allowed(OP, OP):
        return False
    import importlib

    from vllm import envs

    if not envs.VLLM_USE_FUSED_MOE_GROUPED_TOPK:
        return False
    module = importlib.import_module(ROUTER_MODULE)
    with _lock:
        if module.grouped_topk is not grouped_topk:
            _vllm_grouped_topk = module.grouped_topk
            module.grouped_topk = grouped_topk
            logger.info(
                "vllm_fl: vLLM's grouped top-k routing (%s.grouped_topk) calls op %s",
                ROUTER_MODULE,
                OP,
            )
    return True


def installed() -> bool:
    """Whether vLLM's grouped router calls :func:`grouped_topk` in this process."""
    module = sys.modules.get(ROUTER_MODULE)
    return module is not None and module.grouped_topk is grouped_topk


def _reset_for_tests() -> None:
    """Give vLLM its function back (tests only)."""
    global _announced
    with _lock:
        module = sys.modules.get(ROUTER_MODULE)
        if module is not None and _vllm_grouped_topk is not None:
            module.grouped_topk = _vllm_grouped_topk
        _announced = False
