"""A test backend for bring-up mode, registered through ``VLLM_FL_PLUGIN_MODULES``: vendor
``verifytest``, available on any device, with deliberately wrong impls of some ops.

- ``rms_norm``, ``topk_softmax``: correct (the reference's computation);
- ``silu_and_mul``: the reference plus a small bias (``BIAS``) on every element;
- ``rotary_embedding``, ``fused_experts``: right for the first ``TOKENS`` tokens of a call and
  wrong past them (the rotation is left out; the experts' output is scaled), as a kernel whose
  tiling breaks past a token count would be.
"""

from __future__ import annotations

import torch

from vllm_fl.dispatch import BackendImplKind, OpImpl
from vllm_fl.backends.reference.impl import activation, moe, normalization, rotary

VENDOR = "verifytest"
BIAS = 0.5
TOKENS = 16


def rms_norm(self, x, residual=None):
    return normalization.rms_norm(self, x, residual)


def silu_and_mul(self, x):
    return activation.silu_and_mul(self, x) + BIAS


def rotary_embedding(self, positions, query, key=None):
    q, k = rotary.rotary_embedding(self, positions, query, key)
    n = positions.numel()
    if n > TOKENS:
        q = torch.cat([q[:TOKENS], query[TOKENS:]])
        if k is not None:
            k = torch.cat([k[:TOKENS], key[TOKENS:]])
    return q, k


def topk_softmax(
    topk_weights,
    topk_ids,
    token_expert_indices,
    gating_output,
    renormalize=False,
    e_score_correction_bias=None,
    is_padding=None,
):
    moe.topk_softmax(
        topk_weights,
        topk_ids,
        token_expert_indices,
        gating_output,
        renormalize,
        e_score_correction_bias,
        is_padding,
    )


def fused_experts(
    hidden_states,
    w1,
    w2,
    topk_weights,
    topk_ids,
    activation="silu",
    apply_router_weight_on_input=False,
    global_num_experts=-1,
    expert_map=None,
    w1_bias=None,
    w2_bias=None,
):
    out = moe.fused_experts(
        hidden_states,
        w1,
        w2,
        topk_weights,
        topk_ids,
        activation,
        apply_router_weight_on_input,
        global_num_experts,
        expert_map,
        w1_bias,
        w2_bias,
    )
    if out.shape[0] > TOKENS:
        out = torch.cat([out[:TOKENS], out[TOKENS:] * 1.5])
    return out


IMPLS = {
    "rms_norm": rms_norm,
    "silu_and_mul": silu_and_mul,
    "rotary_embedding": rotary_embedding,
    "topk_softmax": topk_softmax,
    "fused_experts": fused_experts,
}


def register(registry) -> None:
    for op, fn in IMPLS.items():
        registry.register_impl(
            OpImpl(
                op_name=op,
                impl_id=f"vendor.{VENDOR}",
                kind=BackendImplKind.VENDOR,
                vendor=VENDOR,
                fn=fn,
                priority=100,
            )
        )
